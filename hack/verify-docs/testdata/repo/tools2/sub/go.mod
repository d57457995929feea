module example.com/sub

go 1.26.0
