package main

import (
	"regexp"
	"strconv"
	"strings"
)

// A citation is one reference of the grammar (docs are checked against
// exactly these forms, so that a writer knows what the checker sees):
//
//	F1 `path/file.go`           the file exists
//	F2 `path/file.go:123`       the file has that line
//	F3 `Name` in `path/file.go` Name is declared in the file
//	F4 `Name` at `path/file.go:123` and line 123 lies inside Name
//
// An F3 citation written right after "proof:", as in "(proof: `TestName`
// in `test/guide/x_test.go`)", names the test that demonstrates the
// sentence it ends: Name must then be a func TestXxx declared in a
// _test.go file that make test runs, and not skip itself (checkProof in
// proof.go). The docs mark a claim no test can prove with
// notTestableMarker instead.
//
// An F4 citation of a TestXxx in a _test.go file, "`TestName` at
// `test/guide/x_test.go:123`", is a row of a table of proofs: it names
// the assertion that fails if the claim is false. It is checked as a
// proof is, and line 123 must be one of that test's assertions
// (checkAssertion in proof.go).
type citation struct {
	Doc   string // the doc's path as given, for the report
	Line  int    // the doc line the citation starts on
	Text  string // the citation as written, backticks included
	Name  string // F3/F4 only
	Path  string
	At    int  // the cited line; 0 when none
	Link  bool // a markdown link: Path is relative to the doc's directory
	Proof bool // an F3 citation right after "proof:"
}

// afterProof reports whether the text before a span ends in "proof:" and
// spaces (a line break included).
func afterProof(before string) bool {
	return strings.HasSuffix(strings.TrimRight(before, " \t\n"), "proof:")
}

// notTestableMarker opens the mark of a claim that no test can prove
// (history, advice): "(not testable: history)".
const notTestableMarker = "(not testable: "

// notTestable counts a doc's not-testable marks outside fenced blocks; one
// right after a backtick is the marker quoted, not a mark.
func notTestable(content string) int {
	text := strings.Join(blankFences(strings.Split(content, "\n")), "\n")
	n := 0
	for i := 0; ; {
		j := strings.Index(text[i:], notTestableMarker)
		if j < 0 {
			return n
		}
		if i+j == 0 || text[i+j-1] != '`' {
			n++
		}
		i += j + len(notTestableMarker)
	}
}

// pathRe accepts only what looks like a file path ending in an extension
// the repository's docs cite. Flags, commands and field paths
// (`spec.template.image`, `kubectl get bars`) fail it: they contain spaces,
// start with a dash, or end in something that is not one of these
// extensions. Globs and placeholders (`docs/diagrams/*.dot`,
// `bin/k8s-<version>/`) fail it too, as they name no one file.
var pathRe = regexp.MustCompile(`^(?:[A-Za-z0-9_.][A-Za-z0-9_.-]*/)*[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:go|sh|ya?ml|md|dot|mod|sum|env|svg|png|json|txt|toml)(?::([0-9]+))?$`)

// nameRe is a Go identifier, optionally qualified by a type (or package):
// `Name`, `Type.Method`, `(*Type).Method`, with an optional trailing "()".
var nameRe = regexp.MustCompile(`^(?:\(\*?[A-Za-z_][A-Za-z0-9_]*\)\.|[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*(?:\(\))?$`)

// span is one inline code span: its content with line breaks folded to
// spaces, and its byte offsets (backticks included) in the text.
type span struct {
	start, end int
	content    string
}

// blankFences replaces every line inside a fenced code block, fences
// included, with an empty line: captured outputs live there and are checked
// by another tool, and their "reflector.go:507]" is a log call site, not a
// citation. Line numbers stay as they were.
func blankFences(lines []string) []string {
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		indent := len(l) - len(t)
		if fence == "" {
			if indent <= 3 && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")) {
				fence = t[:runLen(t, t[0])]
				continue
			}
			out[i] = l
			continue
		}
		// A fence closes with at least as many of the same character and
		// nothing but spaces after them.
		if strings.HasPrefix(t, fence) && strings.TrimSpace(strings.TrimLeft(t, fence[:1])) == "" {
			fence = ""
		}
	}
	return out
}

func runLen(s string, c byte) int {
	n := 0
	for n < len(s) && s[n] == c {
		n++
	}
	return n
}

// codeSpans finds the inline code spans of text. As in CommonMark, a span
// opens with a run of n backticks and closes with the next run of exactly n;
// it may cross a line break (a citation is often wrapped) but not a blank
// line, which ends the paragraph.
func codeSpans(text string) []span {
	var spans []span
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := runLen(text[i:], '`')
		closeAt := -1
		for j := i + n; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			m := runLen(text[j:], '`')
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 || paragraphBreak(text[i+n:closeAt]) {
			i += n
			continue
		}
		content := strings.Join(strings.Fields(text[i+n:closeAt]), " ")
		spans = append(spans, span{start: i, end: closeAt + n, content: content})
		i = closeAt + n
	}
	return spans
}

func paragraphBreak(s string) bool {
	for _, l := range strings.Split(s, "\n")[1:] {
		if strings.TrimSpace(l) == "" {
			return true
		}
	}
	return false
}

// plainRe finds a file path written without backticks ("(sync.go)", "in
// trim.go:"): the docs have many, and a moved file leaves them as stale as a
// backticked one. Only the extensions of code and manifests count here, so
// that a sentence's "README.md" or a host name is not taken for one.
var plainRe = regexp.MustCompile(`[A-Za-z0-9_][A-Za-z0-9_./-]*\.(?:go|sh|ya?ml|dot)(?::[0-9]+)?`)

// linkTextRe is a markdown link's text and target: a path in the text is
// the link's label, relative to the doc's directory like its target, which
// links checks.
var linkTextRe = regexp.MustCompile(`\[[^\]]*\]\([^)]*\)`)

// item is a code span or a plain path, in the order they appear.
type item struct {
	start, end int
	content    string
	code       bool
}

// plainPaths returns the paths written without backticks in text[from:to].
func plainPaths(text string, from, to int, skip [][]int) []item {
	var out []item
	for _, m := range plainRe.FindAllStringIndex(text[from:to], -1) {
		a, b := from+m[0], from+m[1]
		// A sentence's full stop is not part of the path; a path inside a
		// web address or a link's label is not a citation.
		for b > a && text[b-1] == '.' {
			b--
		}
		if a > 0 && !strings.ContainsRune(" \n\t([,;\"'", rune(text[a-1])) {
			continue
		}
		if b < len(text) && !strings.ContainsRune(" \n\t)],;:.\"'", rune(text[b])) {
			continue
		}
		if inRanges(a, skip) || !pathRe.MatchString(text[a:b]) {
			continue
		}
		out = append(out, item{start: a, end: b, content: text[a:b]})
	}
	return out
}

func inRanges(off int, rs [][]int) bool {
	for _, r := range rs {
		if r[0] <= off && off < r[1] {
			return true
		}
	}
	return false
}

// extract returns the citations of one markdown document: the grammar's
// forms, with "in", "at", or "(" (the docs' older "`Name` (file.go)")
// between a name and a path, and every other path alone.
func extract(doc, content string) []citation {
	lines := blankFences(strings.Split(content, "\n"))
	text := strings.Join(lines, "\n")
	lineAt := func(off int) int { return strings.Count(text[:off], "\n") + 1 }
	linkRanges := linkTextRe.FindAllStringIndex(text, -1)

	var items []item
	prev := 0
	for _, s := range codeSpans(text) {
		items = append(items, plainPaths(text, prev, s.start, linkRanges)...)
		items = append(items, item{start: s.start, end: s.end, content: s.content, code: true})
		prev = s.end
	}
	items = append(items, plainPaths(text, prev, len(text), linkRanges)...)

	quote := func(it item) string {
		if it.code {
			return "`" + it.content + "`"
		}
		return it.content
	}
	var cites []citation
	for k := 0; k < len(items); k++ {
		it := items[k]
		if it.code && nameRe.MatchString(it.content) && k+1 < len(items) {
			next := items[k+1]
			gap := strings.Join(strings.Fields(text[it.end:next.start]), " ")
			m := pathRe.FindStringSubmatch(next.content)
			// "`Name` (path)" only when the parenthesis closes right after
			// the path: "`RealFIFO` (`controller.go`, `newQueueFIFO`)"
			// names the function that decides, not where RealFIFO is.
			closes := strings.HasPrefix(text[next.end:], ")")
			if m != nil && (gap == "in" || gap == "at" || (gap == "(" && closes)) {
				c := citation{Doc: doc, Line: lineAt(it.start), Name: strings.TrimSuffix(it.content, "()"),
					Text: quote(it) + " " + gap + " " + quote(next)}
				if gap == "(" {
					c.Text = quote(it) + " (" + quote(next) + ")"
				}
				c.Path, c.At = splitLine(next.content, m[1])
				c.Proof = gap == "in" && afterProof(text[:it.start])
				cites = append(cites, c)
				k++
				continue
			}
		}
		if m := pathRe.FindStringSubmatch(it.content); m != nil {
			c := citation{Doc: doc, Line: lineAt(it.start), Text: quote(it)}
			c.Path, c.At = splitLine(it.content, m[1])
			cites = append(cites, c)
		}
	}
	return cites
}

func splitLine(p, line string) (string, int) {
	if line == "" {
		return p, 0
	}
	n, _ := strconv.Atoi(line)
	return strings.TrimSuffix(p, ":"+line), n
}

// linkRe finds the target of an inline markdown link or image.
var linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links returns the relative file targets of the document's links (anchors
// cut off, web addresses and in-page anchors left out), resolved against
// the document's directory as a markdown renderer does.
func links(doc, content string) []citation {
	var cites []citation
	for i, l := range blankFences(strings.Split(content, "\n")) {
		for _, m := range linkRe.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			cites = append(cites, citation{Doc: doc, Line: i + 1, Text: "(" + m[1] + ")", Path: target, Link: true})
		}
	}
	return cites
}
