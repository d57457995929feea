package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDocs runs the checker on a fake repository whose doc has good
// citations of every form and deliberately broken ones: each broken one
// must be reported on its own doc line, and nothing else. The module is a
// local directory, so that the test needs no network; the download itself
// is exercised by hack/verify-docs.sh on the real docs.
func TestCheckDocs(t *testing.T) {
	root := filepath.Join("testdata", "repo")
	fetch := func(path, version string) (string, error) {
		if path == "k8s.io/fakemod" && version == "v0.1.0" {
			return filepath.Join("testdata", "mods", "fakemod"), nil
		}
		return "", fmt.Errorf("unexpected module %s@%s", path, version)
	}
	probs, tally, err := checkDocs(root, []string{"README.md", "docs/guide.md"}, fetch)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"docs/guide.md:16: `nosuch.go`":                                                      "no such file",
		"docs/guide.md:17: `gone` in `sync.go`":                                              "gone is not declared in sync.go",
		"docs/guide.md:18: `syncBar` at `sync.go:12`":                                        "line 12 is outside syncBar (lines 4-8",
		"docs/guide.md:19: `hack/run.sh:99`":                                                 "line 99 is past the end of hack/run.sh (3 lines)",
		"docs/guide.md:20: `Missing` in `k8s.io/fakemod/tools/cache/reflector.go`":           "Missing is not declared",
		"docs/guide.md:21: `k8s.io/other/x.go`":                                              "no module of go.mod",
		"docs/guide.md:22: `Ready` (run.go)":                                                 "no such file",
		"docs/guide.md:22: (gone.md)":                                                        "no such file",
		"docs/guide.md:24: `TestNoSuchProof` in `test/guide/claims_test.go`":                 "the cited proof does not exist: no func TestNoSuchProof in test/guide/claims_test.go",
		"docs/guide.md:25: `helperNotATest` in `test/guide/claims_test.go`":                  "a proof must be a func TestXxx",
		"docs/guide.md:27: `TestLooksLikeATest` in `test/guide/claims_test.go`":              "no func TestLooksLikeATest",
		"docs/guide.md:27: `syncBar` in `sync.go`":                                           "sync.go is not a _test.go file",
		"docs/guide.md:29: `TestSkipped` in `test/guide/claims_test.go`":                     "may skip itself: TestSkipped calls Skip",
		"docs/guide.md:30: `Testlower` in `test/guide/claims_test.go`":                       "Testlower is not named so",
		"docs/guide.md:31: `TestTagged` in `test/guide/tagged_test.go`":                      "a build constraint leaves test/guide/tagged_test.go out of make test",
		"docs/guide.md:32: `TestInTestdata` in `test/guide/testdata/old_test.go`":            "is under testdata/, which go list skips",
		"docs/guide.md:33: `TestInAnotherModule` in `tools2/sub/sub_test.go`":                "is in another module (tools2/sub/go.mod)",
		"docs/guide.md:34: `TestUpstream` in `k8s.io/fakemod/tools/cache/reflector_test.go`": "a proof must be a test of this repository",
		"docs/guide.md:37: `TestWithAssertions` at `test/guide/claims_test.go:24`":           "line 24 of TestWithAssertions is no assertion",
		"docs/guide.md:38: `TestWithAssertions` at `test/guide/claims_test.go:17`":           "line 17 is outside the test TestWithAssertions (lines 23-29",
		"docs/guide.md:39: `TestSkipped` at `test/guide/claims_test.go:16`":                  "may skip itself: TestSkipped calls Skip",
		"docs/guide.md:41: `TestCallsErrorOnAWatcher` at `test/guide/claims_test.go:37`":     "line 37 of TestCallsErrorOnAWatcher is no assertion",
		"docs/guide.md:41: `TestCallsErrorOnAWatcher` at `test/guide/claims_test.go:38`":     "line 38 of TestCallsErrorOnAWatcher is no assertion",
		"docs/guide.md:42: `TestCallsErrorOnAWatcher` at `test/guide/claims_test.go:49`":     "line 49 of TestCallsErrorOnAWatcher is no assertion",
	}
	got := map[string]bool{}
	for _, p := range probs {
		key := fmt.Sprintf("%s:%d: %s", p.Doc, p.Line, p.Text)
		got[key] = true
		w, ok := want[key]
		if !ok {
			t.Errorf("reported, but the citation holds: %s", p)
			continue
		}
		if !strings.Contains(p.Why, w) {
			t.Errorf("%s: reason %q, want it to say %q", key, p.Why, w)
		}
	}
	for key := range want {
		if !got[key] {
			t.Errorf("not reported: %s", key)
		}
	}
	// Eleven proof citations, good or not, one not-testable mark.
	if n := tally.Proofs["docs/guide.md"]; n != 11 {
		t.Errorf("counted %d proofs in docs/guide.md, want 11", n)
	}
	if n := tally.NotTestable["docs/guide.md"]; n != 1 {
		t.Errorf("counted %d not-testable marks in docs/guide.md, want 1", n)
	}
}

// TestProofFloor pins that the proofs of the teaching docs are counted
// together and that one fewer than the floor fails, naming the floor.
func TestProofFloor(t *testing.T) {
	tl := tally{Proofs: map[string]int{proofDocs[0]: 30, proofDocs[1]: 9, "README.md": 5}}
	if why := belowFloor(tl, 39); why != "" {
		t.Errorf("39 proofs against a floor of 39: %s", why)
	}
	why := belowFloor(tl, 40)
	if !strings.Contains(why, "cite 39 proofs together, fewer than the floor of 40") {
		t.Errorf("39 proofs against a floor of 40: got %q", why)
	}
	if proofFloor < 40 {
		t.Errorf("proofFloor is %d: the docs were brought to at least 40 proofs, and the floor keeps them there", proofFloor)
	}
}

// TestExtractSkipsNonCitations pins what is not a citation: flags,
// commands, field paths, globs, a bare name, anything inside a fence.
func TestExtractSkipsNonCitations(t *testing.T) {
	doc := "`--workers=4` `kubectl apply -f x.yaml` `spec.template.image` `docs/*.md` `Keeper`\n" +
		"see https://example.com/a/b.go and [label.go](https://example.com/c.go)\n" +
		"```\n`gone` in `sync.go` at reflector.go:507]\n```\n"
	if c := extract("d.md", doc); len(c) != 0 {
		t.Errorf("extract found %v, want none", c)
	}
}

// TestUnlistedProofs pins that a proof the teaching docs cite with no row
// in the table is reported where it is cited, and a listed one is not.
func TestUnlistedProofs(t *testing.T) {
	cites := []citation{
		{Doc: "docs/a.md", Line: 3, Name: "TestListed", Path: "x_test.go", Proof: true},
		{Doc: "docs/a.md", Line: 4, Name: "TestForgotten", Path: "x_test.go", Proof: true},
		{Doc: "docs/other.md", Line: 5, Name: "TestElsewhere", Path: "x_test.go", Proof: true},
		{Doc: "docs/table.md", Line: 9, Name: "TestListed", Path: "x_test.go", At: 12},
	}
	probs := unlisted(cites, "docs/table.md", []string{"docs/a.md"})
	if len(probs) != 1 || probs[0].Line != 4 || !strings.Contains(probs[0].Why, "no row of docs/table.md") {
		t.Errorf("reported %v, want TestForgotten at docs/a.md:4 alone", probs)
	}
}
