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
	"slices"
	"strconv"
	"strings"
)

// Most captures are the controller's log (Select, compared by Summary).
// The exercises also tell the learner to run commands and read what they
// print, and those outputs are captures of their own kind: a kubectl
// table, or the metrics endpoint. Each kind has a comparable form that
// leaves out what changes from run to run, as Summary does for the logs.
type kind struct {
	// summary is the comparable form of the capture's lines.
	summary func(lines []string) []string
	// split: the capture may be shown in two blocks, cut by firstEcho.
	// Only a log has syncs to cut at.
	split bool
}

func (k kind) blocks() string {
	if k.split {
		return "one or two are supported"
	}
	return "a command's output is shown in one"
}

// kinds are the captures compared otherwise than as a plain log, by name;
// every other capture is a log.
var kinds = map[string]kind{
	// kubectl get bar -o wide: AGE counts from the Bar's creation.
	"foreign-bar": {summary: Columns("AGE")},
	// kubectl get events: LAST SEEN is an age too, with the series'
	// "(x2 over 5s)" when an Event repeated.
	"foreign-events": {summary: Columns("LAST SEEN")},
	"metrics":        {summary: Metrics},
}

func kindOf(name string) kind {
	if k, ok := kinds[name]; ok {
		return k
	}
	return kind{summary: Summary, split: true}
}

// Columns returns the comparable form of a kubectl table without the
// columns named: its header, then each row as its cells joined by " | ",
// in the order kubectl printed them. kubectl aligns the columns with a
// tabwriter that pads by at least three spaces, so a column is where its
// header's name starts, and a cell may hold single spaces ("LAST SEEN",
// an Event's message).
func Columns(drop ...string) func(lines []string) []string {
	return func(lines []string) []string {
		if len(lines) == 0 {
			return nil
		}
		header := []rune(lines[0])
		var names []string
		var starts []int
		for i := 0; i < len(header); {
			if header[i] == ' ' {
				i++
				continue
			}
			end := i
			// A name ends at two spaces in a row or at the end.
			for end < len(header) && !(header[end] == ' ' && (end+1 == len(header) || header[end+1] == ' ')) {
				end++
			}
			names, starts = append(names, string(header[i:end])), append(starts, i)
			i = end
		}
		keep := func(cells []string) string {
			var out []string
			for i, c := range cells {
				if !slices.Contains(drop, names[i]) {
					out = append(out, c)
				}
			}
			return strings.Join(out, " | ")
		}
		out := []string{keep(names)}
		for _, l := range lines[1:] {
			if strings.TrimSpace(l) == "" {
				continue
			}
			row := []rune(l)
			cells := make([]string, len(names))
			for i, s := range starts {
				end := len(row)
				if i+1 < len(starts) {
					end = min(starts[i+1], len(row))
				}
				if s < end {
					cells[i] = strings.TrimSpace(string(row[s:end]))
				}
			}
			out = append(out, "  "+keep(cells))
		}
		return out
	}
}

// Metrics returns the comparable form of metrics in the Prometheus text
// format: each series as its name and labels, without its value, sorted.
// Values are counts and durations of this run. Left out too are the
// series of a sync result other than success: a result label value
// appears once a sync ends with it, and whether one met a stale cache
// (stale_cache) or a conflict (error) is timing, as for the logs
// (compare.go).
func Metrics(lines []string) []string {
	var out []string
	for _, l := range lines {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, labels := series(l)
		if v, ok := labels["result"]; ok && v != `"success"` {
			continue
		}
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b strings.Builder
		b.WriteString(name)
		if len(keys) > 0 {
			b.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(k + "=" + labels[k])
			}
			b.WriteString("}")
		}
		out = append(out, b.String())
	}
	return set(out)
}

// series takes a sample line apart: the metric's name and its labels,
// values as printed (quoted). What follows the labels, the value and an
// optional timestamp, is dropped. A line it cannot read is kept whole as
// the name, so that it still shows in a diff.
func series(l string) (string, map[string]string) {
	labels := map[string]string{}
	brace := strings.IndexByte(l, '{')
	if brace < 0 {
		name, _, _ := strings.Cut(l, " ")
		return name, labels
	}
	name, rest := l[:brace], l[brace+1:]
	for {
		rest = strings.TrimLeft(rest, ", ")
		if strings.HasPrefix(rest, "}") || rest == "" {
			return name, labels
		}
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return l, nil
		}
		v, err := strconv.QuotedPrefix(rest[eq+1:])
		if err != nil {
			return l, nil
		}
		labels[rest[:eq]] = v
		rest = rest[eq+1+len(v):]
	}
}
