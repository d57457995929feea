// Command verify-docs checks the citations in README.md and docs/*.md: each
// file, line and declaration a doc names, in this repository or in a
// k8s.io module at the version go.mod builds with, must exist where the doc
// says. It prints every citation that does not hold and exits 1, so that a
// change to the code cannot leave the docs pointing at what moved.
//
// The citation grammar it checks is in extract (markdown.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	list := flag.Bool("list", false, "print every citation found, checked or not (to see what the checker reads)")
	flag.Parse()

	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(*root, "docs", "*.md"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sort.Strings(more)
	for _, m := range more {
		rel, _ := filepath.Rel(*root, m)
		docs = append(docs, filepath.ToSlash(rel))
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
