module example.com/fake

go 1.26.0

require (
	example.com/other v1.0.0
	k8s.io/fakemod v0.1.0
)
