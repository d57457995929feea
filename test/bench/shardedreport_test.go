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

package main

import "testing"

// The main bench and the sharded one write the same file, each its own
// part: neither may lose the other's.
func TestSpliceSharded(t *testing.T) {
	part := func(body string) string { return shardedBegin + "\n" + body + "\n" + shardedEnd + "\n" }
	for _, tc := range []struct {
		name, doc, section, want string
	}{
		{"appended where there is none", "# Benchmarks\n\n| Bars |\n", part("new"), "# Benchmarks\n\n| Bars |\n\n" + part("new")},
		{"replaced where there is one", "# Benchmarks\n\n" + part("old") + "\n## After\n", part("new"), "# Benchmarks\n\n" + part("new") + "\n## After\n"},
		{"at the end", "# B\n\n" + part("old"), part("new"), "# B\n\n" + part("new")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spliceSharded(tc.doc, tc.section)
			if got != tc.want {
				t.Errorf("spliceSharded:\n%q\nwant\n%q", got, tc.want)
			}
			if p, ok := shardedPart(got); !ok || p != tc.section {
				t.Errorf("shardedPart = %q, %v; want %q", p, ok, tc.section)
			}
		})
	}
	// The main report rewritten without the part keeps the old one.
	old := "# Old\n\n" + part("kept")
	if p, ok := shardedPart(old); !ok || spliceSharded("# New\n", p) != "# New\n\n"+part("kept") {
		t.Errorf("a rewrite of the main report lost the sharded part")
	}
	if _, ok := shardedPart("# none\n"); ok {
		t.Errorf("shardedPart found a part in a report without one")
	}
}
