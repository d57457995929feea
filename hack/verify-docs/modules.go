package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// module is one k8s.io or sigs.k8s.io module a doc may cite, at the version
// the repository builds with.
type module struct {
	Path, Version string
	// Unprefixed: a path without a module prefix (`tools/cache/reflector.go`)
	// is looked up in this module too. Only k8s.io modules the repository
	// uses itself or requires directly (k8s.io/kubernetes in
	// hack/tools/go.mod) take part: every indirect dependency would make more
	// paths ambiguous and cost more downloads.
	Unprefixed bool
}

// modFetcher gives the directory of a module's source; the test swaps in
// a local one.
type modFetcher func(path, version string) (string, error)

// goModRequires returns the require lines of a go.mod: path, version, and
// whether the line is marked "// indirect". go.mod's syntax for requires
// is small enough that a line reader does; golang.org/x/mod is only an
// indirect dependency here and would become a direct one.
func goModRequires(file string) ([][3]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var reqs [][3]string
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require ") && !strings.HasSuffix(line, "("):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		indirect := strings.Contains(line, "// indirect")
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "//") {
			continue
		}
		ind := ""
		if indirect {
			ind = "indirect"
		}
		reqs = append(reqs, [3]string{f[0], f[1], ind})
	}
	return reqs, sc.Err()
}

func isK8sModule(p string) bool {
	return strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/")
}

// knownModules lists the k8s.io and sigs.k8s.io modules of the repository's
// go.mod, then those of hack/tools/go.mod (the module the test tools are
// built from) it does not already have (k8s.io/kubernetes, for one), each
// at the version of the first go.mod that names it.
func knownModules(root string) ([]module, error) {
	files := []string{filepath.Join(root, "go.mod")}
	if tools := filepath.Join(root, "hack", "tools", "go.mod"); isFile(tools) {
		files = append(files, tools)
	}
	var mods []module
	seen := map[string]bool{}
	for i, f := range files {
		reqs, err := goModRequires(f)
		if err != nil {
			return nil, err
		}
		for _, r := range reqs {
			if !isK8sModule(r[0]) || seen[r[0]] {
				continue
			}
			seen[r[0]] = true
			unprefixed := strings.HasPrefix(r[0], "k8s.io/") && (i == 0 || r[2] == "")
			mods = append(mods, module{Path: r[0], Version: r[1], Unprefixed: unprefixed})
		}
	}
	return mods, nil
}

// goModDownload returns a module's directory in the module cache, downloading
// it first: `go list -m` prints nothing for a module not yet in the cache,
// so a fresh machine would see every module citation as missing.
func goModDownload(path, version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", path+"@"+version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil && jerr != io.EOF && err == nil {
		err = jerr
	}
	if info.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", path, version, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v: %s", path, version, err, strings.TrimSpace(stderr.String()))
	}
	return info.Dir, nil
}

// resolver finds the file a citation's path names.
type resolver struct {
	root  string
	mods  []module
	fetch modFetcher
	dirs  map[string]string // module path -> directory, once fetched
	errs  map[string]error
}

func (r *resolver) dir(m module) (string, error) {
	if d, ok := r.dirs[m.Path]; ok {
		return d, r.errs[m.Path]
	}
	d, err := r.fetch(m.Path, m.Version)
	r.dirs[m.Path], r.errs[m.Path] = d, err
	return d, err
}

// resolve returns the file on disk and where it was found (the module with
// its version, or "" for the repository). The rules are the grammar's: a
// path with a module prefix is that module's file; another path is the
// repository's if it has one, else the one k8s.io module's that has it, and
// is ambiguous if more than one has it.
func (r *resolver) resolve(p string) (file, where string, err error) {
	if isK8sModule(p) {
		var best *module
		for i, m := range r.mods {
			if strings.HasPrefix(p, m.Path+"/") && (best == nil || len(m.Path) > len(best.Path)) {
				best = &r.mods[i]
			}
		}
		if best == nil {
			return "", "", fmt.Errorf("no module of go.mod (or hack/tools/go.mod) holds this path")
		}
		d, err := r.dir(*best)
		if err != nil {
			return "", "", err
		}
		f := filepath.Join(d, filepath.FromSlash(strings.TrimPrefix(p, best.Path+"/")))
		if !isFile(f) {
			return "", "", fmt.Errorf("no such file in %s@%s", best.Path, best.Version)
		}
		return f, best.Path + "@" + best.Version, nil
	}
	if f := filepath.Join(r.root, filepath.FromSlash(p)); isFile(f) {
		return f, "", nil
	}
	var found, where2 []string
	for _, m := range r.mods {
		if !m.Unprefixed {
			continue
		}
		d, err := r.dir(m)
		if err != nil {
			return "", "", err
		}
		if f := filepath.Join(d, filepath.FromSlash(p)); isFile(f) {
			found = append(found, f)
			where2 = append(where2, m.Path+"@"+m.Version)
		}
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("no such file in the repository or in a k8s.io module of go.mod")
	case 1:
		return found[0], where2[0], nil
	}
	return "", "", fmt.Errorf("ambiguous: %s all have it; write the module path in front", strings.Join(where2, ", "))
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
