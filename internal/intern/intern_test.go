/*
Copyright The bar-controller Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package intern

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// fresh is a copy of s of its own, as a decoder makes one per object.
func fresh(s string) string { return string([]byte(s)) }

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestTableLimit: the table holds at most its limit besides the seed;
// when full it starts again, so that what comes next is shared, and the
// seed stays shared throughout.
func TestTableLimit(t *testing.T) {
	table := NewTable(3, "seed")
	seed := table.String(fresh("seed"))
	for i := range 10 {
		table.String(fmt.Sprint("s", i))
	}
	if len(table.m) > 3 {
		t.Errorf("%d strings held besides the seed, want at most the limit of 3", len(table.m))
	}
	if table.Resets() == 0 {
		t.Error("10 strings went into a table of 3 without it starting again")
	}
	s9 := table.String(fresh("s9"))
	if again := table.String(fresh("s9")); !same(again, s9) {
		t.Error("the last string in is not shared")
	}
	if again := table.String(fresh("seed")); again != "seed" || !same(again, seed) {
		t.Error("the seed is not shared after the table started again")
	}
	if got := table.Lookup(fresh("s9")); !same(got, s9) {
		t.Error("lookup does not find what the table holds")
	}
	if got := table.Lookup(fresh("seed")); !same(got, seed) {
		t.Error("lookup does not find the seed")
	}
	if table.String("") != "" {
		t.Error("the empty string changed")
	}
}

// TestATenantCannotTurnSharingOff: a tenant whose objects carry more
// distinct strings than the table's limit (4,096 Bars, each with an image
// of its own) does not stop strings seen after them from being shared:
// another namespace's, a new image everyone moves to. Before, the table
// kept the first 4,096 strings for good and handed everything after back
// unshared, for every object from then on.
func TestATenantCannotTurnSharingOff(t *testing.T) {
	table := NewTable(4096, "bar-controller")
	for i := range 4096 {
		table.String(fmt.Sprintf("registry.tenant-a.example/app-%d:1.0", i))
	}
	for _, later := range []string{"tenant-b", "nginx:1.29.0", "app.example.com/team"} {
		a, b := table.String(fresh(later)), table.String(fresh(later))
		if !same(a, b) {
			t.Errorf("%q, seen after the tenant's strings, is not shared", later)
		}
	}
	// And the tenant's strings are still shared among the tenant's own
	// objects the next time they come.
	img := "registry.tenant-a.example/app-7:1.0"
	if a, b := table.String(fresh(img)), table.String(fresh(img)); !same(a, b) {
		t.Errorf("%q is not shared the second time round", img)
	}
}

// TestLongStringsAreNotHeld: the table holds no string longer than
// MaxBytes, so that what it keeps of strings whose objects are gone is at
// most its limit times MaxBytes. Before, it kept a copy of whatever it
// was handed: 1 MiB owner reference kinds of twenty Deployments, created
// and deleted again and again, took a replica past its memory limit with
// none of them left (issue 39, fifteenth review, C1).
func TestLongStringsAreNotHeld(t *testing.T) {
	table := NewTable(4096)
	long := strings.Repeat("k", MaxBytes+1)
	if a, b := table.String(fresh(long)), table.String(fresh(long)); same(a, b) {
		t.Errorf("a string of %d bytes is shared: the table holds it", len(long))
	}
	edge := strings.Repeat("k", MaxBytes)
	if a, b := table.String(fresh(edge)), table.String(fresh(edge)); !same(a, b) {
		t.Errorf("a string of %d bytes is not shared", len(edge))
	}
}
