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
// assertNames method on a test's own *testing.T or testing.TB spans, and
// those of the init and condition of an if statement whose body (not its
// else) makes such a call, closures and subtests included. testing is the
// name the file imports package testing as ("" if it does not).
//
// Only a call on a parameter of type *testing.T or testing.TB counts: the
// test's own, or that of a func literal in it (a subtest's
// t.Run("x", func(t *testing.T) {...}), a check helper's tb testing.TB),
// as far as it is in scope, not shadowed by a parameter, a := or a var of
// the same name. A call named Error on anything else, as a watch.Interface
// fake's w.Error(&status), fails no test and is no assertion.
func assertLines(fset *token.FileSet, fn *ast.FuncDecl, testing string) map[int]bool {
	lines := map[int]bool{}
	if fn.Body == nil || testing == "" {
		return lines
	}
	mark := func(from, to token.Pos) {
		for l := fset.Position(from).Line; l <= fset.Position(to).Line; l++ {
			lines[l] = true
		}
	}
	calls := testCalls(fn, testing)
	isAssert := func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		return ok && calls[call]
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

// testingName is the name file imports package testing as, or "".
func testingName(f *ast.File) string {
	for _, im := range f.Imports {
		if im.Path.Value != `"testing"` {
			continue
		}
		if im.Name == nil {
			return "testing"
		}
		if im.Name.Name == "_" || im.Name.Name == "." {
			return ""
		}
		return im.Name.Name
	}
	return ""
}

// scope is the set of names that, where it holds, are bound to a
// *testing.T or testing.TB parameter.
type scope map[string]bool

func (s scope) without(names []string) scope {
	c := scope{}
	for n := range s {
		c[n] = true
	}
	for _, n := range names {
		delete(c, n)
	}
	return c
}

// testCalls returns fn's calls of an assertNames method on a name bound,
// where the call is, to a *testing.T or testing.TB parameter.
func testCalls(fn *ast.FuncDecl, testing string) map[*ast.CallExpr]bool {
	calls := map[*ast.CallExpr]bool{}
	isTB := func(t ast.Expr) bool {
		if st, ok := t.(*ast.StarExpr); ok {
			sel, ok := st.X.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "T" {
				return false
			}
			id, ok := sel.X.(*ast.Ident)
			return ok && id.Name == testing
		}
		sel, ok := t.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "TB" {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == testing
	}
	// params binds a func's parameters: each hides an outer name, and
	// those of a testing type are bound anew.
	params := func(s scope, recv *ast.FieldList, ft *ast.FuncType) scope {
		var hidden, bound []string
		for _, fl := range []*ast.FieldList{recv, ft.Params, ft.Results} {
			if fl == nil {
				continue
			}
			for _, f := range fl.List {
				for _, id := range f.Names {
					hidden = append(hidden, id.Name)
					if isTB(f.Type) {
						bound = append(bound, id.Name)
					}
				}
			}
		}
		c := s.without(hidden)
		for _, n := range bound {
			c[n] = true
		}
		return c
	}
	var walk func(n ast.Node, s scope)
	stmts := func(list []ast.Stmt, s scope) {
		for _, st := range list {
			walk(st, s)
			s = s.without(defines(st))
		}
	}
	walk = func(n ast.Node, s scope) {
		if n == nil || len(s) == 0 && !containsFuncLit(n) {
			return
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			stmts(n.Body.List, params(s, nil, n.Type))
			return
		case *ast.BlockStmt:
			stmts(n.List, s)
			return
		case *ast.CaseClause:
			for _, e := range n.List {
				walk(e, s)
			}
			stmts(n.Body, s)
			return
		case *ast.CommClause:
			walk(n.Comm, s)
			stmts(n.Body, s.without(defines(n.Comm)))
			return
		case *ast.IfStmt:
			walk(n.Init, s)
			s = s.without(defines(n.Init))
			walk(n.Cond, s)
			walk(n.Body, s)
			walk(n.Else, s)
			return
		case *ast.SwitchStmt:
			walk(n.Init, s)
			s = s.without(defines(n.Init))
			walk(n.Tag, s)
			walk(n.Body, s)
			return
		case *ast.TypeSwitchStmt:
			walk(n.Init, s)
			s = s.without(defines(n.Init))
			walk(n.Assign, s)
			walk(n.Body, s.without(defines(n.Assign)))
			return
		case *ast.ForStmt:
			walk(n.Init, s)
			s = s.without(defines(n.Init))
			walk(n.Cond, s)
			walk(n.Post, s)
			walk(n.Body, s)
			return
		case *ast.RangeStmt:
			walk(n.X, s)
			if n.Tok == token.DEFINE {
				s = s.without(names(n.Key, n.Value))
			}
			walk(n.Body, s)
			return
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && assertNames[sel.Sel.Name] {
				if id, ok := sel.X.(*ast.Ident); ok && s[id.Name] {
					calls[n] = true
				}
			}
		}
		ast.Inspect(n, func(m ast.Node) bool {
			if m == n {
				return true
			}
			if m != nil {
				walk(m, s)
			}
			return false
		})
	}
	walk(fn.Body, params(scope{}, fn.Recv, fn.Type))
	return calls
}

// containsFuncLit reports whether n holds a func literal, which may bind
// a testing parameter of its own where no outer one is in scope.
func containsFuncLit(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		_, ok := m.(*ast.FuncLit)
		found = found || ok
		return !found
	})
	return found
}

// defines returns the names a statement declares in its block: those of
// a := and of a var declaration.
func defines(st ast.Stmt) []string {
	switch st := st.(type) {
	case *ast.AssignStmt:
		if st.Tok == token.DEFINE {
			return names(st.Lhs...)
		}
	case *ast.DeclStmt:
		gd, ok := st.Decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR && gd.Tok != token.CONST {
			return nil
		}
		var ns []string
		for _, sp := range gd.Specs {
			if vs, ok := sp.(*ast.ValueSpec); ok {
				for _, id := range vs.Names {
					ns = append(ns, id.Name)
				}
			}
		}
		return ns
	}
	return nil
}

// names returns the names of the identifiers among es.
func names(es ...ast.Expr) []string {
	var ns []string
	for _, e := range es {
		if id, ok := e.(*ast.Ident); ok {
			ns = append(ns, id.Name)
		}
	}
	return ns
}
