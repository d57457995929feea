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
	"testing"
	"unsafe"
)

// TestTableLimit: past its limit the table shares what it holds and
// hands back the rest as they are, so that an endless supply of distinct
// strings costs at most the limit.
func TestTableLimit(t *testing.T) {
	table := NewTable(3, "seed")
	for i := range 10 {
		table.String(fmt.Sprint("s", i))
	}
	if len(table.m) != 3 {
		t.Errorf("%d strings held, want the limit of 3", len(table.m))
	}
	s0 := table.String(fmt.Sprint("s", 0))
	if again := table.String(fmt.Sprint("s", 0)); unsafe.StringData(again) != unsafe.StringData(s0) {
		t.Error("a string in the table is not shared")
	}
	s9 := fmt.Sprint("s", 9)
	if got := table.String(s9); unsafe.StringData(got) != unsafe.StringData(s9) {
		t.Error("a string past the limit was not handed back as it was")
	}
	if got := table.Lookup(fmt.Sprint("s", 1)); got != "s1" || unsafe.StringData(got) != unsafe.StringData(table.m["s1"]) {
		t.Error("lookup does not find what the table holds")
	}
	if table.String("") != "" {
		t.Error("the empty string changed")
	}
}
