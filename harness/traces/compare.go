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

package traces

import (
	"fmt"
	"slices"
	"strings"
)

// A capture is compared in what does not depend on timing. Two runs of
// the same code on the same machine already differ in:
//   - how many syncs run: an event that arrives while the key is being
//     processed is folded into one more sync, one that arrives after it
//     makes a sync of its own;
//   - how many times the Bar's status is written, and with which reason
//     in between: kube-controller-manager and kwok update the Deployment's
//     status in as many steps as their own timing gives, and each step
//     that changes what the Bar reports is one write;
//   - whether a sync finds the cache behind the controller's own last
//     write (stale_cache): that is a race between the watch event and the
//     next dequeue;
//   - the order of lines from different goroutines: the three informers
//     deliver independently, the event broadcaster logs when it gets to
//     it, and all of them interleave with the worker;
//   - on a relist, whether the Deployments' initial adds find the Bar
//     (racesTheBarInformer);
//   - after a Deployment's delete, which of the two Deployment informers
//     delivers it first, and so whether a sync between the two waits for
//     the caches to agree (stale_cache, see newestDeployment in
//     freshness.go); likewise for any change of a Deployment;
//   - how many times a repair apply met a Conflict with another writer
//     before it went through (requeues). The commands'
//     outputs have forms of their own (kinds.go).
//
// What stays, and is compared:
//  1. the syncs that write the Deployment (create, apply or delete), in order,
//     line by line: the decisions and requests a scenario is about;
//  2. the last status write: what the Bar settles on;
//  3. every line a sync logs, as a set, with the status reason of
//     status-only decisions left out (point 2 has the one that matters):
//     the stages, call sites, messages and keys of the worker;
//  4. every other line, as a set: the handlers and paths that led to the
//     Bar, the start-up, the Events recorded, the WatchList requests.
//
// A renamed message, a moved log call, a new or dropped key, another
// decision or request, an extra or missing Deployment write all show.

type block struct {
	lines []line
	stale bool
}

func (b block) writesDeployment() bool {
	for _, l := range b.lines {
		c := l.value("call")
		if l.msg == "API call" && (strings.HasPrefix(c, `"create deployments/`) || strings.HasPrefix(c, `"apply deployments/`) ||
			strings.HasPrefix(c, `"delete deployments/`)) {
			return true
		}
	}
	return false
}

func (b block) statusDecision() (line, bool) {
	var wrote bool
	var decision line
	for _, l := range b.lines {
		if l.msg == "Sync" && l.value("decision") == `"status changed: write it"` {
			decision = l
		}
		if l.msg == "API call" && strings.HasSuffix(l.value("call"), `/status"`) {
			wrote = true
		}
	}
	return decision, wrote
}

// Summary is the comparable form of a capture's lines (as Select returns
// them, or as the docs show them), one item per line.
func Summary(lines []string) []string {
	var blocks []block
	var cur *block
	var others []string
	for _, s := range lines {
		l, ok := parse(s)
		if !ok {
			continue
		}
		if !worker[l.msg] {
			if !racesTheBarInformer(l) {
				others = append(others, l.normal())
			}
			continue
		}
		if l.msg == "Dequeued" || cur == nil {
			blocks = append(blocks, block{})
			cur = &blocks[len(blocks)-1]
		}
		cur.lines = append(cur.lines, l)
		if l.value("result") == `"stale_cache"` {
			cur.stale = true
		}
		if l.msg == "Sync done" {
			cur = nil
		}
	}

	out := []string{"syncs that wrote the Deployment, in order:"}
	var syncLines []string
	last := "none"
	for _, b := range blocks {
		if b.stale {
			continue
		}
		if b.writesDeployment() {
			out = append(out, "  sync")
			for _, l := range b.lines {
				out = append(out, "    "+l.normal())
			}
		}
		if d, wrote := b.statusDecision(); wrote {
			last = d.normal()
		}
		for _, l := range b.lines {
			if l.msg == "Sync" && strings.HasPrefix(l.value("decision"), `"status `) {
				l.values = slices.Clone(l.values)
				for i, k := range l.keys {
					if k == "detail" {
						l.values[i] = "<reason>"
					}
				}
			}
			syncLines = append(syncLines, l.normal())
		}
	}
	out = append(out, "last status write:", "  "+last, "lines of the syncs, as a set:")
	out = append(out, set(syncLines)...)
	out = append(out, "lines of informers, event broadcaster and start-up, as a set:")
	return append(out, set(others)...)
}

// racesTheBarInformer reports a line that a relist prints or not by which
// informer finishes its initial list first: a Deployment's initial add
// leads to the Bar (and is traced) only if the Bar's informer already has
// the Bar; if not, the Bar's own initial add enqueues it instead. Both
// orders happen, on the same machine, from one run to the next.
func racesTheBarInformer(l line) bool {
	return l.msg == "Event" && l.value("handler") == `"addDeployment"` && l.value("initialList") == "true"
}

func set(items []string) []string {
	s := slices.Clone(items)
	slices.Sort(s)
	s = slices.Compact(s)
	for i := range s {
		s[i] = "  " + s[i]
	}
	return s
}

// Diff returns the lines only in a ("-") or only in b ("+"), under the
// section headings of Summary, or "" if a and b are equal.
func Diff(a, b []string) string {
	if slices.Equal(a, b) {
		return ""
	}
	// Longest common subsequence; summaries are a few dozen lines.
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var d strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			// Of what is the same, only the section headings: they say
			// where the changes are.
			if !strings.HasPrefix(a[i], " ") {
				fmt.Fprintf(&d, "  %s\n", a[i])
			}
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&d, "- %s\n", a[i])
			i++
		default:
			fmt.Fprintf(&d, "+ %s\n", b[j])
			j++
		}
	}
	return d.String()
}
