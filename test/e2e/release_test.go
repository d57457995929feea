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

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// previousRelease is the last commit whose controller and CRD speak only
// barcontroller.dev/v1alpha1 (its CRD lists v1 with served: false, so the
// API server stores and serves v1alpha1 alone): what a cluster runs before
// upgrading to this release.
const previousRelease = "5d53a73"

// release is one release's tree and the controller built from it.
type release struct {
	dir       string // the commit's files; dir/artifacts is its install
	binary    string
	artifacts string
}

// buildRelease checks out commit's files with git archive (the working
// tree and its branches stay as they are) and builds its controller, as
// an upgrade test needs the release users run today, not a copy kept here
// that could drift from it. It needs the repository's history: a shallow
// clone fails here, loudly, rather than skipping the upgrade.
func buildRelease(t *testing.T, commit string) release {
	t.Helper()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v: %s\nThe upgrade test builds the previous release (commit %s) from this repository's history; a shallow clone lacks it (git fetch --unshallow).",
				strings.Join(args, " "), err, stderr.String(), commit)
		}
		return out
	}
	git("cat-file", "-e", commit+"^{commit}")
	dir := t.TempDir()
	tarball := filepath.Join(dir, "release.tar")
	git("archive", "--format=tar", "-o", tarball, commit)
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-x", "-f", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	// Built as its own module, with its own go.mod and go.sum, and
	// without the race detector: it is the subject of no assertion about
	// its own races, and an uninstrumented build is minutes faster. With
	// the release's -trimpath and CGO_ENABLED=0, what it shares with this
	// tree is compiled once. The version is in package main up to the
	// release that moved it to internal/version; the linker skips the -X
	// that names a variable the commit does not have.
	binary := filepath.Join(dir, "bar-controller-"+commit)
	build := exec.Command("go", "build", "-trimpath", "-o", binary, "-ldflags",
		"-X main.version="+commit+" -X github.com/barcontroller/bar-controller/internal/version.version="+commit, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the release %s: %v\n%s", commit, err, out)
	}
	return release{dir: src, binary: binary, artifacts: filepath.Join(src, "artifacts")}
}
