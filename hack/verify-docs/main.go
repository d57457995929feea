// Command verify-docs checks the citations in README.md and every .md file
// under docs/, its subdirectories included (docs/measurements/): each file,
// line and declaration a doc names, in this repository or in a k8s.io
// module at the version go.mod builds with, must exist where the doc says.
// It prints every citation that does not hold and exits 1, so that a
// change to the code cannot leave the docs pointing at what moved.
//
// The citation grammar it checks is in extract (markdown.go).
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	list := flag.Bool("list", false, "print every citation found, checked or not (to see what the checker reads)")
	flag.Parse()

	docs, err := docFiles(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	if *list {
		for _, d := range docs {
			data, err := os.ReadFile(filepath.Join(*root, d))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			for _, c := range append(extract(d, string(data)), links(d, string(data))...) {
				fmt.Printf("%s:%d: %s\n", c.Doc, c.Line, c.Text)
			}
		}
		return
	}

	probs, t, err := checkDocs(*root, docs, goModDownload)
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify-docs:", err)
		os.Exit(2)
	}
	for _, d := range docs {
		if t.Proofs[d]+t.NotTestable[d] > 0 {
			fmt.Printf("%s: %d claims cite a proof, %d are marked not testable\n", d, t.Proofs[d], t.NotTestable[d])
		}
	}
	for _, p := range probs {
		fmt.Println(p)
	}
	floor := belowFloor(t, proofFloor)
	if floor != "" {
		fmt.Println(floor)
	}
	if len(probs) > 0 {
		fmt.Fprintf(os.Stderr, "%d of %d citations in %d docs are stale (the grammar: hack/verify-docs/markdown.go)\n", len(probs), t.Citations, len(docs))
	}
	if len(probs) > 0 || floor != "" {
		os.Exit(1)
	}
	fmt.Printf("All %d citations in %d docs resolve.\n", t.Citations, len(docs))
}

// docFiles returns the docs to check, relative to root: README.md, then
// every .md file under docs/, its subdirectories included (a doc split
// into docs/measurements/ is checked as docs/*.md is), in lexical order.
func docFiles(root string) ([]string, error) {
	docs := []string{"README.md"}
	var more []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			more = append(more, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(more)
	return append(docs, more...), nil
}
