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
	"regexp"
	"slices"
	"strings"
)

// A Document is one file of the repository that shows captures: Path,
// from the repository root, and Names, the captures it shows, in the order
// it tells them. It must show each of them, and no other: a capture the
// document no longer has, or one the scenarios do not make, is an error
// rather than a block left unchecked.
type Document struct {
	Path  string
	Names []string
}

// Documents are the files make traces rewrites and test/traces checks,
// each capture from the same run. A capture may be shown in more than one
// document; exercises.md shows only what informer-traces.md does not, and
// links there for the rest, so that the two never tell one run twice.
var Documents = []Document{
	{Path: "docs/informer-traces.md", Names: []string{"create", "scale", "rename", "restart", "restart-v6"}},
	{Path: "docs/exercises.md", Names: []string{"delete", "foreign", "foreign-bar", "foreign-events", "foreign-delete", "metrics"}},
}

// In the document a capture is a fenced block between
//
//	<!-- capture: NAME -->
//	```
//	...
//	```
//	<!-- /capture -->
//
// with prose free around it. A log capture may be shown in two blocks with
// the same name, prose between them: the create is shown as the create
// itself and then the rollout that follows. The blocks of one name are one
// capture to the comparison, so where a block ends is no part of it.
var (
	openMarker  = regexp.MustCompile(`^<!-- capture: ([a-z0-9-]+) -->$`)
	closeMarker = "<!-- /capture -->"
)

type span struct {
	name       string
	start, end int // the fenced block's content: lines[start:end]
}

// spans finds the document's capture blocks. Its errors name the document.
func (d Document) spans(lines []string) ([]span, error) {
	var out []span
	for i := 0; i < len(lines); i++ {
		m := openMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```" {
			return nil, fmt.Errorf("%s:%d: capture %s: the marker must be followed by a ``` line", d.Path, i+1, m[1])
		}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 || i+2+end+1 >= len(lines) || lines[i+2+end+1] != closeMarker {
			return nil, fmt.Errorf("%s:%d: capture %s: want the fenced block closed by ``` and then %s", d.Path, i+1, m[1], closeMarker)
		}
		out = append(out, span{name: m[1], start: i + 2, end: i + 2 + end})
		i += 2 + end + 1
	}
	for _, n := range d.Names {
		if !slices.ContainsFunc(out, func(s span) bool { return s.name == n }) {
			return nil, fmt.Errorf("%s: no capture %s (a line <!-- capture: %s --> before its fenced block)", d.Path, n, n)
		}
	}
	for _, s := range out {
		if !slices.Contains(d.Names, s.name) {
			return nil, fmt.Errorf("%s:%d: capture %s is not one of this document's (%s)", d.Path, s.start-1, s.name, strings.Join(d.Names, ", "))
		}
	}
	return out, nil
}

// Committed returns the captures as the document shows them, the blocks of
// one name joined.
func (d Document) Committed(text string) (Captures, error) {
	lines := strings.Split(text, "\n")
	sp, err := d.spans(lines)
	if err != nil {
		return nil, err
	}
	out := Captures{}
	for _, s := range sp {
		out[s.name] = append(out[s.name], lines[s.start:s.end]...)
	}
	return out, nil
}

// Rewrite returns text with every capture replaced by caps'. A log
// capture shown in two blocks is cut after the first sync that wrote
// nothing, following the first that wrote: the first block is then the
// create itself and its echo, the second what came after.
func (d Document) Rewrite(text string, caps Captures) (string, error) {
	lines := strings.Split(text, "\n")
	sp, err := d.spans(lines)
	if err != nil {
		return "", err
	}
	parts := map[string][][]string{}
	for _, n := range d.Names {
		if _, ok := caps[n]; !ok {
			return "", fmt.Errorf("%s: the run made no capture %s", d.Path, n)
		}
		count := 0
		for _, s := range sp {
			if s.name == n {
				count++
			}
		}
		switch {
		case count == 1:
			parts[n] = [][]string{caps[n]}
		case count == 2 && kindOf(n).split:
			cut := firstEcho(caps[n])
			parts[n] = [][]string{caps[n][:cut], caps[n][cut:]}
		default:
			return "", fmt.Errorf("%s: capture %s is shown in %d blocks; %s", d.Path, n, count, kindOf(n).blocks())
		}
	}
	var out []string
	prev := 0
	for _, s := range sp {
		out = append(out, lines[prev:s.start]...)
		out = append(out, parts[s.name][0]...)
		parts[s.name] = parts[s.name][1:]
		prev = s.end
	}
	out = append(out, lines[prev:]...)
	return strings.Join(out, "\n"), nil
}

// firstEcho returns the index after the "Sync done" of the first sync
// that wrote nothing after one that did.
func firstEcho(lines []string) int {
	wrote := false
	inSync, syncWrote := false, false
	for i, s := range lines {
		l, ok := parse(s)
		if !ok {
			continue
		}
		switch l.msg {
		case "Dequeued":
			inSync, syncWrote = true, false
		case "API call":
			syncWrote = true
		case "Sync done":
			if inSync && !syncWrote && wrote && l.value("result") == `"success"` {
				return i + 1
			}
			wrote = wrote || syncWrote
			inSync = false
		}
	}
	return len(lines)
}

// Compare returns, for every capture of the document that differs in its
// comparable form (Summary for the logs, see kinds.go for the others), a
// diff from the document's to the fresh one; "" if none does.
func (d Document) Compare(text string, fresh Captures) (string, error) {
	committed, err := d.Committed(text)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, n := range d.Names {
		if _, ok := fresh[n]; !ok {
			return "", fmt.Errorf("%s: the run made no capture %s", d.Path, n)
		}
		summary := kindOf(n).summary
		if diff := Diff(summary(committed[n]), summary(fresh[n])); diff != "" {
			fmt.Fprintf(&out, "capture %s (- %s, + what the code prints now):\n%s\n", n, d.Path, diff)
		}
	}
	return out.String(), nil
}
