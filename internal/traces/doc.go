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

// DocPath is the document whose captures these are, from the repository root.
const DocPath = "docs/informer-traces.md"

// Names are the captures, in the order the scenarios run and the document
// tells them.
var Names = []string{"create", "scale", "rename", "restart", "restart-v6"}

// In the document a capture is a fenced block between
//
//	<!-- capture: NAME -->
//	```
//	...
//	```
//	<!-- /capture -->
//
// with prose free around it. A capture may be shown in several blocks with
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

func spans(lines []string) ([]span, error) {
	var out []span
	for i := 0; i < len(lines); i++ {
		m := openMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```" {
			return nil, fmt.Errorf("line %d: capture %s: the marker must be followed by a ``` line", i+1, m[1])
		}
		end := slices.Index(lines[i+2:], "```")
		if end < 0 || i+2+end+1 >= len(lines) || lines[i+2+end+1] != closeMarker {
			return nil, fmt.Errorf("line %d: capture %s: want the fenced block closed by ``` and then %s", i+1, m[1], closeMarker)
		}
		out = append(out, span{name: m[1], start: i + 2, end: i + 2 + end})
		i += 2 + end + 1
	}
	for _, n := range Names {
		if !slices.ContainsFunc(out, func(s span) bool { return s.name == n }) {
			return nil, fmt.Errorf("no capture %s in the document (a line <!-- capture: %s --> before its fenced block)", n, n)
		}
	}
	for _, s := range out {
		if !slices.Contains(Names, s.name) {
			return nil, fmt.Errorf("capture %s in the document: no scenario of that name (known: %s)", s.name, strings.Join(Names, ", "))
		}
	}
	return out, nil
}

// Committed returns the captures as the document shows them, the blocks of
// one name joined.
func Committed(doc string) (Captures, error) {
	lines := strings.Split(doc, "\n")
	sp, err := spans(lines)
	if err != nil {
		return nil, err
	}
	out := Captures{}
	for _, s := range sp {
		out[s.name] = append(out[s.name], lines[s.start:s.end]...)
	}
	return out, nil
}

// Rewrite returns doc with every capture replaced by caps'. A capture
// shown in two blocks is cut after the first sync that wrote nothing,
// following the first that wrote: the first block is then the create
// itself and its echo, the second what came after.
func Rewrite(doc string, caps Captures) (string, error) {
	lines := strings.Split(doc, "\n")
	sp, err := spans(lines)
	if err != nil {
		return "", err
	}
	parts := map[string][][]string{}
	for _, n := range Names {
		count := 0
		for _, s := range sp {
			if s.name == n {
				count++
			}
		}
		switch count {
		case 1:
			parts[n] = [][]string{caps[n]}
		case 2:
			cut := firstEcho(caps[n])
			parts[n] = [][]string{caps[n][:cut], caps[n][cut:]}
		default:
			return "", fmt.Errorf("capture %s is shown in %d blocks; one or two are supported", n, count)
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

// Compare returns, for every capture that differs in its comparable form
// (Summary), a diff from the document's to the fresh one; "" if none does.
func Compare(doc string, fresh Captures) (string, error) {
	committed, err := Committed(doc)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, n := range Names {
		if d := Diff(Summary(committed[n]), Summary(fresh[n])); d != "" {
			fmt.Fprintf(&out, "capture %s (- %s, + what the code prints now):\n%s\n", n, DocPath, d)
		}
	}
	return out.String(), nil
}
