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

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// A figure is one number a log line reports: a count, a ratio, or a
// duration, which is kept in seconds so that "850ms" in one run and "1.2s"
// in the next are one quantity.
type figure struct {
	value    float64
	duration bool
}

// template turns a log line into the form its figures are grouped by:
// every number and duration becomes a numbered placeholder ("converged in
// {1}; TokenReviews {2}"), and the figures are returned in that order.
// What only tells runs apart (UUIDs, dates and clock times, the random
// parts of generated Kubernetes names) becomes a fixed mark, so that the
// same line from every run has the same template.
//
// A number counts only as a word of its own: "bar-001", "v1alpha1",
// "10.88.0.1" and "nginx:1.28.0" are names, not figures. A word is a run of
// letters, digits, '.', '-' and '_'; a number with a unit of letters
// ("64Mi", "1.46x") keeps its unit in the template.
func template(line string) (string, []figure) {
	line = uuidRE.ReplaceAllString(line, "<uuid>")
	line = clockRE.ReplaceAllString(line, "<time>")
	var b strings.Builder
	var figs []figure
	rest := line
	for rest != "" {
		end := wordEnd(rest)
		if end == 0 {
			_, size := utf8.DecodeRuneInString(rest)
			b.WriteString(rest[:size])
			rest = rest[size:]
			continue
		}
		word := rest[:end]
		rest = rest[end:]
		// A sentence's full stop is not part of its last word.
		trimmed := strings.TrimRight(word, ".")
		if f, unit, ok := parseFigure(trimmed); ok {
			figs = append(figs, f)
			fmt.Fprintf(&b, "{%d}%s", len(figs), unit)
		} else {
			b.WriteString(genericName(trimmed))
		}
		b.WriteString(word[len(trimmed):])
	}
	return b.String(), figs
}

var (
	// uuidRE and clockRE match what differs from run to run without being
	// a measurement: UUIDs (a leader identity's suffix), dates and clock
	// times (RFC 3339, and klog's "15:04:05.000000").
	uuidRE  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	clockRE = regexp.MustCompile(`\b(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?|\d{2}:\d{2}:\d{2}(?:\.\d+)?)\b`)
	// durationRE is what time.Duration.String prints, and what it rounds
	// to: it always ends in a unit of seconds ("1h2m3.5s", "2m0s", "850ms",
	// "12µs"). A bare "100m" is a quantity (millicores), not a duration.
	durationRE = regexp.MustCompile(`^[-+]?(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?(?:ns|us|µs|ms|s)$`)
	// numberRE is a plain number, thousands grouped by commas or not, and
	// an optional unit of letters after it.
	numberRE = regexp.MustCompile(`^([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)(\pL*)$`)
	// segmentRE is a part of a name between '-' and '_'; k8sSuffixRE is the
	// random part of a generated name: generateName's five characters, or
	// a pod-template-hash, drawn from an alphabet without vowels or
	// look-alikes (k8s.io/apimachinery/pkg/util/rand).
	segmentRE   = regexp.MustCompile(`[^-_]+`)
	k8sSuffixRE = regexp.MustCompile(`^[bcdfghjklmnpqrstvwxz2456789]{5,10}$`)
)

// parseFigure reads a word as a figure: a duration, in seconds, or a
// number with its unit, if any.
func parseFigure(word string) (figure, string, bool) {
	if durationRE.MatchString(word) {
		if d, err := time.ParseDuration(word); err == nil {
			return figure{value: d.Seconds(), duration: true}, "", true
		}
	}
	m := numberRE.FindStringSubmatch(word)
	if m == nil {
		return figure{}, "", false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	if err != nil {
		return figure{}, "", false
	}
	return figure{value: v}, m[2], true
}

// genericName replaces the random parts of a generated name
// ("web-6d4f8b7c9-x2k4p", "bar-it-7zq5w") with "*", so that a line naming a
// Pod or a namespace has the same template in every run. A part counts as
// random if it is drawn from the generators' alphabet and has a digit:
// "bar-it" and "kwok-node" stay.
func genericName(word string) string {
	if !strings.ContainsAny(word, "-_") {
		return word
	}
	return segmentRE.ReplaceAllStringFunc(word, func(p string) string {
		if k8sSuffixRE.MatchString(p) && strings.ContainsAny(p, "2456789") {
			return "*"
		}
		return p
	})
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-' || r == '_'
}

// wordEnd is the length of the word s starts with (0 if it starts with
// something else). A comma belongs to the word where it groups the
// thousands of a number ("2,000"), not where it separates ("1,2"); a '+'
// where it is an exponent's sign ("1.5e+06").
func wordEnd(s string) int {
	prev := rune(0)
	for i, r := range s {
		if r == ',' && unicode.IsDigit(prev) && groupFollows(s[i+1:]) ||
			r == '+' && (prev == 'e' || prev == 'E') && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
			prev = r
			continue
		}
		if !isWordRune(r) {
			return i
		}
		prev = r
	}
	return len(s)
}

// groupFollows says whether s starts with exactly three digits.
func groupFollows(s string) bool {
	if len(s) < 3 {
		return false
	}
	for i := range 3 {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) == 3 || s[3] < '0' || s[3] > '9'
}
