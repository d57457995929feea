package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDocFiles pins which docs the checker reads: README.md and every .md
// file under docs/, those in its subdirectories too (docs/measurements/),
// and nothing else.
func TestDocFiles(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"README.md", "other.md", "docs/guide.md", "docs/measurements.md",
		"docs/measurements/faults.md", "docs/measurements/deeper/x.md", "docs/diagrams/path.dot"} {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("# x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md", "docs/guide.md", "docs/measurements.md",
		"docs/measurements/deeper/x.md", "docs/measurements/faults.md"}
	if !slices.Equal(got, want) {
		t.Errorf("docFiles = %v, want %v", got, want)
	}
}
