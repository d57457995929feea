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

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/barcontroller/bar-controller/internal/image"
)

// binary is one platform's build of the controller.
type binary struct {
	platform string // linux/arm64
	arch     string // arm64
	path     string // in the bundle: bar-controller-linux-arm64
}

// checkout writes the files of commit into dir, as git archive has them,
// and returns the full commit hash and its committer time. Building from
// them rather than from the working tree makes the release a function of
// the commit alone: an uncommitted edit, or a file git ignores, cannot
// reach a binary that says it is that commit.
func checkout(ctx context.Context, root, commit, dir string) (string, time.Time, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return strings.TrimSpace(string(out)), nil
	}
	full, err := git("rev-parse", "--verify", commit+"^{commit}")
	if err != nil {
		return "", time.Time{}, err
	}
	// The committer time, not the author time: a rebase or cherry-pick
	// keeps the author's date but makes a new commit, which should not
	// claim an older build time than its parent's.
	ct, err := git("log", "-1", "--format=%ct", full)
	if err != nil {
		return "", time.Time{}, err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("commit time %q: %w", ct, err)
	}

	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", full)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", time.Time{}, err
	}
	if err := cmd.Start(); err != nil {
		return "", time.Time{}, err
	}
	untarErr := untar(stdout, dir)
	_, _ = io.Copy(io.Discard, stdout) // let git finish if untar stopped early
	if err := cmd.Wait(); err != nil {
		return "", time.Time{}, fmt.Errorf("git archive: %v: %s", err, stderr.Bytes())
	}
	return full, time.Unix(secs, 0).UTC(), untarErr
}

// untar extracts what git archive writes: directories, regular files and
// symbolic links, and a global header with the commit, which is skipped.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("git archive holds %q, outside the tree", hdr.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, p)
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(hdr.Mode).Perm())
		default:
			err = fmt.Errorf("git archive holds %q of type %c", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// buildFlags are the go build flags of every binary, and buildEnv the
// environment past GOOS and GOARCH: every input that changes the output is
// set here, not taken from the caller's environment. The Go flags (-race
// or -cover in $GOFLAGS would change the binary), cgo off (static, and no
// C toolchain in the result), the microarchitecture levels, no
// experiments, no VCS stamp (the commit is given by -X, and the archive
// has no .git anyway), and no build paths (-trimpath). What is left is the
// Go toolchain: the same commit built with another Go version gives other
// binaries, which the SBOM, the provenance and --version then name. The
// provenance records both (provenance.go).
func buildFlags(version, commit string) []string {
	ldflags := fmt.Sprintf("-s -w -X %[1]s/internal/version.version=%[2]s -X %[1]s/internal/version.commit=%[3]s", module, version, commit)
	return []string{"-trimpath", "-buildvcs=false", "-ldflags", ldflags}
}

var buildEnv = []string{
	"CGO_ENABLED=0", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=",
	"GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local",
}

// buildBinaries cross-builds the controller for each platform into c.out,
// with buildFlags and buildEnv.
func buildBinaries(ctx context.Context, src string, c config, commit string) ([]binary, error) {
	var out []binary
	for _, p := range c.platforms {
		goos, arch, _ := strings.Cut(p, "/")
		b := binary{platform: p, arch: arch, path: filepath.Join(c.out, "bar-controller-"+goos+"-"+arch)}
		abs, err := filepath.Abs(b.path)
		if err != nil {
			return nil, err
		}
		args := append(append([]string{"build"}, buildFlags(c.version, commit)...), "-o", abs, ".")
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = src
		cmd.Env = append(append(os.Environ(), "GOOS="+goos, "GOARCH="+arch), buildEnv...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", p, err, msg)
		}
		out = append(out, b)
	}
	return out, nil
}

// buildIndex makes each binary's image as make image-tar does, stamped with
// the commit's time, and the index over them. The index's annotations are
// the OCI's own keys for what it is, so that a registry's UI and tools
// such as crane show the version and commit without pulling anything.
func buildIndex(binaries []binary, c config, res *result) (v1.ImageIndex, error) {
	var imgs []v1.Image
	for _, b := range binaries {
		spec := image.Controller(b.path, b.arch)
		spec.Created = res.created
		img, err := image.Build(spec)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", b.platform, err)
		}
		if res.images[b.platform], err = img.Digest(); err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	idx, err := image.Index(imgs, map[string]string{
		"org.opencontainers.image.version":  c.version,
		"org.opencontainers.image.revision": res.commit,
		"org.opencontainers.image.created":  res.created.Format(time.RFC3339),
		"org.opencontainers.image.title":    "bar-controller",
	})
	if err != nil {
		return nil, err
	}
	res.index, err = idx.Digest()
	return idx, err
}

// publish pushes the index to c.registry by its digest, with no tag: the
// tag, what users pull the version by, is pushed by seal (sign.go) last,
// once everything about the index is signed and attached. Without a
// registry it writes the index as an OCI layout in c.out/oci (crane push,
// skopeo copy oci:, or a tar of it into ctr images import, take it from
// there). Credentials for a push come from the Docker config and
// credential helpers, as crane's do; a registry on localhost or 127.0.0.1
// is spoken to over plain HTTP (go-containerregistry's rule for those
// names).
func publish(ctx context.Context, idx v1.ImageIndex, c config) error {
	if c.registry == "" {
		return image.WriteLayout(filepath.Join(c.out, "oci"), c.repo+":"+c.version, idx)
	}
	repo, err := name.NewRepository(c.registry)
	if err != nil {
		return fmt.Errorf("--registry %q: %w", c.registry, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	ref := repo.Digest(digest.String())
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing to %s: %w", ref, err)
	}
	return nil
}

// tag points t at what publish or pushChart pushed as digest, unless it
// names that already (a re-run of the same release: a no-op). A tag that
// names anything else is never moved (checkTag).
func tag(ctx context.Context, t name.Tag, version string, pushed remote.Taggable, digest v1.Hash) error {
	done, err := checkTag(ctx, t, version, digest)
	if err != nil || done {
		return err
	}
	if err := remote.Tag(t, pushed, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("tagging %s: %w", t, err)
	}
	return nil
}

// versionTag is the index's tag: the version, as the image is pulled by.
func versionTag(c config) (name.Tag, error) {
	t, err := name.NewTag(c.registry + ":" + c.version)
	if err != nil {
		return t, fmt.Errorf("--registry %q: %w", c.registry, err)
	}
	return t, nil
}

// checkTag reads the tag t of version: done when it names digest
// already; an error when it names anything else. A published version is
// never moved: users and their caches have pulled it by its tag, and a
// mistaken VERSION, or a re-run from another commit, would otherwise
// replace a release in place. run checks the index's and the chart's
// tags before pushing anything, and tag again just before tagging. (The
// registry's API has no conditional tag push: two releases of one
// version at the same moment can still race between the check and the
// push.)
func checkTag(ctx context.Context, t name.Tag, version string, digest v1.Hash) (bool, error) {
	desc, err := remote.Head(t, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	var terr *transport.Error
	switch {
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the tag %s: %w", t, err)
	case desc.Digest != digest:
		return false, fmt.Errorf("the version %s is published already: the tag %s names %s, not this release's %s; a published version is never moved, release under a new version", version, t, desc.Digest, digest)
	}
	return true, nil
}
