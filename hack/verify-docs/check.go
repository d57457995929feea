package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// decl is one declaration of a Go file, with the lines it spans (its doc
// comment left out: a line in the comment is not a line of the code).
type decl struct {
	Name  string
	Recv  string // the receiver's or enclosing type's name; "" at top level
	Field bool   // a struct field or interface method, found only as Type.Name
	Func  bool   // a func or method, not a type, variable or constant
	Skips bool   // a func whose body calls a Skip, Skipf or SkipNow
	// Asserts holds the lines of a func's assertions: each line of a call
	// of Error, Errorf, Fatal, Fatalf, Fail or FailNow on the test's own
	// *testing.T or testing.TB (or a subtest's), and each line of the
	// condition of an if whose body makes one (assertLines, proof.go).
	Asserts map[int]bool
	From    int
	To      int
}

// goFile is what the checker needs of a Go file.
type goFile struct {
	Pkg   string
	Decls []decl
}

func parseGo(file string) (*goFile, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	lines := func(n ast.Node) (int, int) { return fset.Position(n.Pos()).Line, fset.Position(n.End()).Line }
	g := &goFile{Pkg: f.Name.Name}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			from, to := lines(d)
			g.Decls = append(g.Decls, decl{Name: d.Name.Name, Recv: recvType(d), Func: true, Skips: callsSkip(d),
				Asserts: assertLines(fset, d, testingName(f)), From: from, To: to})
		case *ast.GenDecl:
			for _, s := range d.Specs {
				// A spec alone in its declaration spans the keyword
				// too; in a group, only its own lines.
				var n ast.Node = s
				if len(d.Specs) == 1 {
					n = d
				}
				from, to := lines(n)
				switch s := s.(type) {
				case *ast.TypeSpec:
					g.Decls = append(g.Decls, decl{Name: s.Name.Name, From: from, To: to})
					g.Decls = append(g.Decls, members(s, lines)...)
				case *ast.ValueSpec:
					for _, id := range s.Names {
						g.Decls = append(g.Decls, decl{Name: id.Name, From: from, To: to})
					}
				}
			}
		}
	}
	return g, nil
}

// recvType is the name of a method's receiver type, without the pointer
// or type parameters, so that `(*T).M` and `T.M` both find it.
func recvType(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// members lists a struct's fields and an interface's methods: the docs cite
// `ResourceEventHandlerFuncs.AddFunc` or `SharedInformer.AddEventHandler`
// as Type.Name, and both are declared in the type's file.
func members(s *ast.TypeSpec, lines func(ast.Node) (int, int)) []decl {
	var fields *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return nil
	}
	var out []decl
	for _, f := range fields.List {
		from, to := lines(f)
		for _, id := range f.Names {
			out = append(out, decl{Name: id.Name, Recv: s.Name.Name, Field: true, From: from, To: to})
		}
	}
	return out
}

// lookup returns the declarations a cited name denotes in the file:
// `Name` is any top-level declaration or method of that name, `Type.Name`
// or `(*Type).Name` a method, field or interface method of Type, and
// `pkg.Name` (pkg the file's package) a top-level declaration.
func (g *goFile) lookup(cited string) []decl {
	qual, name, ok := strings.Cut(cited, ".")
	if !ok {
		qual, name = "", cited
	}
	qual = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(qual, "("), "*"), ")")
	var out []decl
	for _, d := range g.Decls {
		if d.Name != name {
			continue
		}
		switch {
		case qual == "" && !d.Field:
			out = append(out, d)
		case qual != "" && d.Recv == qual:
			out = append(out, d)
		case qual != "" && qual == g.Pkg && d.Recv == "":
			out = append(out, d)
		}
	}
	return out
}

type checker struct {
	res    *resolver
	goMemo map[string]*goFile
	goErr  map[string]error
}

func (c *checker) parsed(file string) (*goFile, error) {
	if g, ok := c.goMemo[file]; ok {
		return g, c.goErr[file]
	}
	g, err := parseGo(file)
	c.goMemo[file], c.goErr[file] = g, err
	return g, err
}

// check returns why a citation does not hold, or "" if it does.
func (c *checker) check(ct citation) string {
	var file string
	if ct.Link {
		file = filepath.Join(c.res.root, filepath.Dir(ct.Doc), filepath.FromSlash(ct.Path))
		if _, err := os.Stat(file); err != nil {
			return "no such file or directory " + filepath.ToSlash(filepath.Join(filepath.Dir(ct.Doc), ct.Path))
		}
		return ""
	}
	file, where, err := c.res.resolve(ct.Path)
	if err != nil {
		return err.Error()
	}
	in := ct.Path
	if where != "" && !isK8sModule(ct.Path) {
		in = ct.Path + " (" + where + ")"
	}
	if ct.At > 0 {
		data, err := os.ReadFile(file)
		if err != nil {
			return err.Error()
		}
		n := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			n++
		}
		if ct.At > n {
			return fmt.Sprintf("line %d is past the end of %s (%d lines)", ct.At, in, n)
		}
	}
	if ct.Name == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".go") {
		return "only a Go file's declarations can be cited by name"
	}
	g, err := c.parsed(file)
	if err != nil {
		return "cannot parse: " + err.Error()
	}
	if ct.Proof || provedAt(ct) {
		if where != "" {
			return fmt.Sprintf("a proof must be a test of this repository, which make test runs, and %s is not", in)
		}
		if why := checkProof(g, ct, in, c.res.root, file); why != "" || ct.At == 0 {
			return why
		}
		return checkAssertion(g, ct, in)
	}
	ds := g.lookup(ct.Name)
	if len(ds) == 0 {
		return fmt.Sprintf("%s is not declared in %s", ct.Name, in)
	}
	if ct.At == 0 {
		return ""
	}
	var spans []string
	for _, d := range ds {
		if d.From <= ct.At && ct.At <= d.To {
			return ""
		}
		spans = append(spans, fmt.Sprintf("%d-%d", d.From, d.To))
	}
	return fmt.Sprintf("line %d is outside %s (lines %s of %s)", ct.At, ct.Name, strings.Join(spans, ", "), in)
}

// problem is one stale citation, as printed.
type problem struct {
	Doc  string
	Line int
	Text string
	Why  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.Doc, p.Line, p.Text, p.Why) }

// tally is what checkDocs counted: citations in all, and per doc the
// claims that cite a proof and those marked not testable.
type tally struct {
	Citations   int
	Proofs      map[string]int
	NotTestable map[string]int
}

// checkDocs checks every citation of the docs (paths relative to root).
func checkDocs(root string, docs []string, fetch modFetcher) ([]problem, tally, error) {
	t := tally{Proofs: map[string]int{}, NotTestable: map[string]int{}}
	mods, err := knownModules(root)
	if err != nil {
		return nil, t, err
	}
	c := &checker{
		res:    &resolver{root: root, mods: mods, fetch: fetch, dirs: map[string]string{}, errs: map[string]error{}},
		goMemo: map[string]*goFile{},
		goErr:  map[string]error{},
	}
	var probs []problem
	var all []citation
	for _, doc := range docs {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			return nil, t, err
		}
		t.NotTestable[doc] = notTestable(string(data))
		cites := append(extract(doc, string(data)), links(doc, string(data))...)
		all = append(all, cites...)
		for _, ct := range cites {
			t.Citations++
			if ct.Proof {
				t.Proofs[doc]++
			}
			if why := c.check(ct); why != "" {
				probs = append(probs, problem{Doc: doc, Line: ct.Line, Text: ct.Text, Why: why})
			}
		}
	}
	if slices.Contains(docs, proofTable) {
		probs = append(probs, unlisted(all, proofTable, proofDocs)...)
	}
	return probs, t, nil
}

// proofTable is the doc whose table names, for every proof the proofDocs
// cite, the assertion that fails if the claim were false.
const proofTable = "docs/informer-proofs.md"

// unlisted reports each proof that a doc of proofDocs cites and no row of
// the table doc names (a provedAt citation of the same test and file),
// so that a proof added to the guide cannot be left out of the table.
func unlisted(cites []citation, table string, proofDocs []string) []problem {
	listed := map[string]bool{}
	for _, ct := range cites {
		if ct.Doc == table && provedAt(ct) {
			listed[ct.Name+" "+ct.Path] = true
		}
	}
	var probs []problem
	for _, ct := range cites {
		if ct.Proof && slices.Contains(proofDocs, ct.Doc) && !listed[ct.Name+" "+ct.Path] {
			probs = append(probs, problem{Doc: ct.Doc, Line: ct.Line, Text: ct.Text,
				Why: fmt.Sprintf("no row of %s names this proof's assertion (`%s` at `%s:N`)", table, ct.Name, ct.Path)})
		}
	}
	return probs
}

// proofFloor is how many proof citations the teaching docs (proofDocs)
// hold together at least: the count they reached, so that a proof
// cannot be dropped, or a claim's citation broken into a non-citation,
// without this check noticing. Raise it as proofs are added.
const proofFloor = 105

// proofDocs are the docs whose behavioural claims cite their proofs.
var proofDocs = []string{"docs/informer-internals.md", "docs/informer-two-caches.md", "docs/informer-topics.md", "docs/informer-sharding.md", "docs/writing-handlers.md"}

// belowFloor returns why the proofDocs' proofs are too few, or "".
func belowFloor(t tally, floor int) string {
	n := 0
	for _, d := range proofDocs {
		n += t.Proofs[d]
	}
	if n >= floor {
		return ""
	}
	return fmt.Sprintf("%s cite %d proofs together, fewer than the floor of %d (proofFloor in hack/verify-docs/check.go): a proof citation was dropped or broken", strings.Join(proofDocs, ", "), n, floor)
}
