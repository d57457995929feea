package main

// syncBar is cited by the test doc; its body is lines 4-8.
func syncBar() {
	a := 1
	a++
	_ = a
}

// Keeper has a method and a field the doc cites.
type Keeper struct {
	ready bool
}

func (k *Keeper) Ready() bool {
	return k.ready
}
