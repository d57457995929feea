package main

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkProof says why a proof citation does not name a test that make
// test runs: the claim it ends would then be proven by nothing. file is
// the cited file, resolved in the repository at root.
//
// "Runs" is checked as far as the source shows it: the file is one
// make test's go test -race builds (no build constraint or GOOS/GOARCH
// suffix leaves it out, as a `//go:build integration` would), it is in a
// package of this module that `go list ./...` lists (not under testdata,
// a directory starting with "." or "_", or another go.mod), and the
// test skips itself nowhere in its body (t.Skip, Skipf, SkipNow, in
// subtests too). A helper that skips, such as
// localcluster.SkipWithoutBinaries, is allowed: make test sets
// BAR_REQUIRE_INTEGRATION, under which it fails instead.
func checkProof(g *goFile, ct citation, in, root, file string) string {
	if !strings.HasSuffix(ct.Path, "_test.go") {
		return fmt.Sprintf("a proof must be a test, and %s is not a _test.go file", in)
	}
	if !isTestName(ct.Name) {
		return fmt.Sprintf("a proof must be a func TestXxx, and %s is not named so", ct.Name)
	}
	var fn *decl
	for i, d := range g.Decls {
		if d.Name == ct.Name && d.Recv == "" && d.Func {
			fn = &g.Decls[i]
		}
	}
	if fn == nil {
		return fmt.Sprintf("the cited proof does not exist: no func %s in %s", ct.Name, in)
	}
	if why := notListed(root, file); why != "" {
		return fmt.Sprintf("the cited proof never runs: %s %s", in, why)
	}
	ctx := build.Default
	ctx.BuildTags = []string{"race"} // make test runs go test -race
	if ok, err := ctx.MatchFile(filepath.Dir(file), filepath.Base(file)); err != nil || !ok {
		return fmt.Sprintf("the cited proof never runs: a build constraint leaves %s out of make test's go test -race", in)
	}
	if fn.Skips {
		return fmt.Sprintf("the cited proof may skip itself: %s calls Skip, Skipf or SkipNow", ct.Name)
	}
	return ""
}

// isTestName is go test's rule: "Test", then nothing or a rune that is
// not lower case (TestMain aside, which runs no claim).
func isTestName(name string) bool {
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok || name == "TestMain" {
		return false
	}
	if rest == "" {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return !unicode.IsLower(r)
}

// notListed says why `go list ./...` at root would not list file's
// package, or "".
func notListed(root, file string) string {
	rel, err := filepath.Rel(root, filepath.Dir(file))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "is outside the repository"
	}
	if rel == "." {
		return ""
	}
	sub := ""
	for _, el := range strings.Split(rel, string(filepath.Separator)) {
		if el == "testdata" || strings.HasPrefix(el, ".") || strings.HasPrefix(el, "_") {
			return "is under " + el + "/, which go list skips"
		}
		sub = filepath.Join(sub, el)
		if _, err := os.Stat(filepath.Join(root, sub, "go.mod")); err == nil {
			return "is in another module (" + filepath.ToSlash(filepath.Join(sub, "go.mod")) + ")"
		}
	}
	return ""
}

// callsSkip reports whether fn's body calls a method or function named
// Skip, Skipf or SkipNow anywhere, closures included.
func callsSkip(fn *ast.FuncDecl) bool {
	if fn.Body == nil {
		return false
	}
	found := false
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || found {
			return !found
		}
		name := ""
		switch f := call.Fun.(type) {
		case *ast.SelectorExpr:
			name = f.Sel.Name
		case *ast.Ident:
			name = f.Name
		}
		found = name == "Skip" || name == "Skipf" || name == "SkipNow"
		return !found
	})
	return found
}

// provedAt reports whether a citation names a test at one of its lines,
// "`TestName` at `path/x_test.go:123`": a row of a table of proofs, which
// points at the assertion that fails if the claim is false. It is checked
// as a proof is, and the line must be an assertion of that very test
// (checkAssertion).
func provedAt(ct citation) bool {
	return ct.At > 0 && strings.HasSuffix(ct.Path, "_test.go") && isTestName(ct.Name)
}

// checkAssertion says why the cited line of a test is not one of its
// assertions, or "": it must lie inside the func TestName itself (not a
// same-named type, not the doc comment above it) and be an assertion
// (decl.Asserts), so that a table of proofs cannot point at setup, at
// another test, or at a line that moved away when the test was edited.
func checkAssertion(g *goFile, ct citation, in string) string {
	for _, d := range g.Decls {
		if d.Name != ct.Name || d.Recv != "" || !d.Func {
			continue
		}
		if ct.At < d.From || ct.At > d.To {
			return fmt.Sprintf("line %d is outside the test %s (lines %d-%d of %s)", ct.At, ct.Name, d.From, d.To, in)
		}
		if !d.Asserts[ct.At] {
			return fmt.Sprintf("line %d of %s is no assertion: cite a t.Error, t.Errorf, t.Fatal or t.Fatalf call, or the if that guards one", ct.At, ct.Name)
		}
		return ""
	}
	return fmt.Sprintf("the cited proof does not exist: no func %s in %s", ct.Name, in)
}

// assertNames are the testing.TB methods that fail a test.
var assertNames = map[string]bool{"Error": true, "Errorf": true, "Fatal": true, "Fatalf": true, "Fail": true, "FailNow": true}

// assertLines returns the lines of fn's assertions: those a call of an
// assertNames method spans, and those of the init and condition of an if
// statement whose body (not its else) makes such a call, closures and
// subtests included.
func assertLines(fset *token.FileSet, fn *ast.FuncDecl) map[int]bool {
	lines := map[int]bool{}
	if fn.Body == nil {
		return lines
	}
	mark := func(from, to token.Pos) {
		for l := fset.Position(from).Line; l <= fset.Position(to).Line; l++ {
			lines[l] = true
		}
	}
	isAssert := func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		return ok && assertNames[sel.Sel.Name]
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if isAssert(n) {
			mark(n.Pos(), n.End())
		}
		if ifs, ok := n.(*ast.IfStmt); ok {
			asserts := false
			ast.Inspect(ifs.Body, func(m ast.Node) bool {
				asserts = asserts || isAssert(m)
				return !asserts
			})
			if asserts {
				mark(ifs.Pos(), ifs.Body.Lbrace)
			}
		}
		return true
	})
	return lines
}
