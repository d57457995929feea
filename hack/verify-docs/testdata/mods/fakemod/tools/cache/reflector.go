package cache

// ListAndWatch stands for a function of a k8s.io module.
func ListAndWatch() {
	_ = 0
}
