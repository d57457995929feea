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
	"regexp"
	"strconv"
	"strings"
)

// line is one klog text line, taken apart.
type line struct {
	header  string // "I1124 03:17:34.302245": severity, date and time
	site    string // "trace.go:166": the call site
	msg     string // the message, unquoted
	keys    []string
	values  []string // as printed: quoted strings keep their quotes
	display string   // the line as the docs show it
}

// klogHeader matches klog's text header. The process id column is optional
// because the docs leave it out; everything after "] " is the structured
// part, a quoted message and key=value pairs.
var klogHeader = regexp.MustCompile(`^([IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6})(?:\s+\d+)? ([^ \]]+:\d+)\] (.*)$`)

// parse takes a klog line apart; ok is false for anything else (the
// docs' "..." and blank lines, a panic's stack).
func parse(s string) (l line, ok bool) {
	m := klogHeader.FindStringSubmatch(s)
	if m == nil {
		return line{}, false
	}
	l.header, l.site = m[1], m[2]
	rest := m[3]
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return line{}, false
	}
	l.msg, _ = strconv.Unquote(q)
	rest = strings.TrimPrefix(rest[len(q):], " ")
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			break
		}
		key, v := rest[:eq], rest[eq+1:]
		var val string
		if strings.HasPrefix(v, `"`) {
			if val, err = strconv.QuotedPrefix(v); err != nil {
				break
			}
		} else if sp := strings.IndexByte(v, ' '); sp >= 0 {
			val = v[:sp]
		} else {
			val = v
		}
		l.keys, l.values = append(l.keys, key), append(l.values, val)
		rest = strings.TrimPrefix(v[len(val):], " ")
	}
	l.display = l.header + " " + l.site + "] " + q
	for i, k := range l.keys {
		// Every trace line carries the same logger and Bar; the docs say
		// once, at the top, that they were cut.
		if l.value("logger") == `"trace"` && (k == "logger" || k == "bar") {
			continue
		}
		l.display += " " + k + "=" + l.values[i]
	}
	return l, true
}

func (l line) value(key string) string {
	for i, k := range l.keys {
		if k == key {
			return l.values[i]
		}
	}
	return ""
}

func (l line) trace() bool { return l.value("logger") == `"trace"` }

// kept are the messages other than --trace's that belong in a capture:
// the start-up the docs walk through, the controller's own -v=2 lines
// about the Deployments it writes, the Events it records, and at -v=5 and
// -v=6 the enqueues and the WatchList requests. The rest (feature gates,
// serving addresses, the version) says nothing about informers.
var kept = map[string]bool{
	"Starting Bar controller":             true,
	"Waiting for informer caches to sync": true,
	"Caches populated":                    true,
	"Caches are synced":                   true,
	"Started workers":                     true,
	"Created Deployment":                  true,
	"Applied Deployment":                  true,
	"Deleted old Deployment":              true,
	"Event occurred":                      true,
	"Starting reflector":                  true,
	"Listing and watching":                true,
	"Exiting watch because received the bookmark that marks the end of initial events stream": true,
	"Enqueued Bar": true,
}

// Select returns the lines of a controller log that belong in a capture,
// as the docs show them: without klog's process id, and without the
// logger and bar keys that every trace line repeats.
func Select(log []string) []string {
	var out []string
	for _, s := range log {
		l, ok := parse(s)
		if !ok {
			continue
		}
		if l.trace() || kept[l.msg] || (l.msg == "Response" && strings.Contains(l.value("url"), "watch=true")) {
			out = append(out, l.display)
		}
	}
	return out
}

// worker messages are logged by the worker that runs a sync, in an order
// the sync's code fixes; everything else comes from informer, event
// broadcaster or start-up goroutines, and interleaves with the syncs as
// the scheduler and the watch streams have it.
var worker = map[string]bool{
	"Dequeued": true, "Sync started": true, "Sync": true, "API call": true, "API call failed": true,
	"Sync done": true, "Created Deployment": true, "Applied Deployment": true, "Deleted old Deployment": true,
}

var (
	apiServerURL = regexp.MustCompile(`https://127\.0\.0\.1:\d+`)
	watchTimeout = regexp.MustCompile(`timeout=[0-9hms]+&timeoutSeconds=\d+`)
	number       = regexp.MustCompile(`\b\d{2,}\b`)
)

// normal is the form the drift test compares: the call site, the message
// and every key, with the values that differ from run to run replaced by
// placeholders. What remains is what the code decides: which handler,
// which path to the Bar, which decision and detail, which request.
func (l line) normal() string {
	var b strings.Builder
	b.WriteString(l.site + " " + strconv.Quote(l.msg))
	for i, k := range l.keys {
		v := l.values[i]
		switch k {
		case "logger", "bar":
			if l.trace() {
				continue
			}
		case "resourceVersion", "oldResourceVersion", "barResourceVersion", "deploymentResourceVersion":
			// The counter of the whole etcd: any other write in the
			// cluster moves it. Empty (a delete returns no object) and
			// "none" (nothing in the cache) stay.
			if v != `""` && v != `"none"` {
				v = "<rv>"
			}
		case "took", "duration", "milliseconds":
			v = "<duration>"
		case "waited":
			// Absent when a worker takes a key that a stale cache put back
			// with AddAfter, which the tracer's first-add clock does not
			// see; present otherwise. Whether a cache was stale is timing.
			continue
		case "queueDepth":
			v = "<n>"
		case "requeues":
			// Rate-limited retries since the key's last success: a repair
			// apply that meets a Conflict (another writer, often
			// kube-controller-manager's status updates, moved the
			// Deployment since the cache showed it) is retried this way,
			// and how many times depends on how those writes interleave.
			v = "<n>"
		case "collapsed":
			// Whether an add found the key waiting depends on how the
			// watch streams and the worker interleave.
			v = "<bool>"
		case "url":
			v = watchTimeout.ReplaceAllString(apiServerURL.ReplaceAllString(v, "https://<apiserver>"), "timeout=<t>&timeoutSeconds=<t>")
		case "reflector":
			// Where the reflector was created, as the binary knows the
			// file: make build's -trimpath gives "k8s.io/client-go@...",
			// the tests' build the path under the module cache.
			if i := strings.Index(v, "k8s.io/client-go@"); i > 0 {
				v = `"` + v[i:]
			}
		case "detail", "err":
			v = number.ReplaceAllString(v, "<n>")
		}
		b.WriteString(" " + k + "=" + v)
	}
	return b.String()
}
