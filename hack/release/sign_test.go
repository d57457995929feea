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
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/barcontroller/bar-controller/internal/image"
)

// cosignBinary is $COSIGN (make test-release-sign builds it from source);
// without it the test is skipped, or fails when $BAR_REQUIRE_COSIGN says
// it must run.
func cosignBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("COSIGN")
	if p == "" {
		if os.Getenv("BAR_REQUIRE_COSIGN") != "" {
			t.Fatal("$COSIGN must name cosign (hack/install-tool.sh cosign)")
		}
		t.Skip("needs $COSIGN: hack/install-tool.sh cosign builds it")
	}
	return p
}

// TestSignVerifies signs an index pushed to a registry on loopback with a
// key made for the test, then runs the verify command the release notes
// give: it passes with the key's public half and fails with another key's.
func TestSignVerifies(t *testing.T) {
	cosign := cosignBinary(t)
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/bar-controller"

	dir := t.TempDir()
	keys := cosignKeys(t, cosign, "release", "other")
	t.Setenv("COSIGN_PASSWORD", "")

	bin := filepath.Join(dir, "bar-controller")
	if err := os.WriteFile(bin, []byte("\x7fELF amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(image.Controller(bin, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := image.Index([]v1.Image{img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := config{registry: repo, repo: repo, version: "v1.2.3", cosign: cosign, cosignKey: filepath.Join(keys["release"], "cosign.key")}
	if err := publish(t.Context(), idx, c); err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	ref := repo + "@" + digest.String()
	if err := signIndex(t.Context(), c, ref); err != nil {
		t.Fatal(err)
	}

	// An empty trusted root: without one, cosign verify fetches Sigstore's
	// public one from the network, which a key-based verification that
	// ignores the transparency log does not use, and which tests must not
	// reach for.
	emptyRoot := filepath.Join(dir, "trusted_root.json")
	if err := os.WriteFile(emptyRoot, []byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	verify := func(keyDir string) error {
		args := strings.Fields(verifyCommand(c.version, ref))[1:]
		for i, a := range args {
			if a == "cosign.pub" {
				args[i] = filepath.Join(keyDir, "cosign.pub")
			}
		}
		args = append(args[:len(args)-1], "--trusted-root", emptyRoot, args[len(args)-1])
		out, err := exec.Command(cosign, args...).CombinedOutput()
		if err != nil {
			t.Logf("cosign %s: %s", strings.Join(args, " "), out)
		}
		return err
	}
	if err := verify(keys["release"]); err != nil {
		t.Errorf("the signature does not verify with the release's key: %v", err)
	}
	if err := verify(keys["other"]); err == nil {
		t.Error("the signature verifies with another key")
	}
}

// TestSealTagsLast: the version's tag is pushed only after every signature
// and attestation, so that a signing that fails leaves the version
// unpublished. It seals an index of two platforms with stand-in binaries,
// SBOMs and chart, three times into a fresh registry: with a key cosign
// cannot read (the first signature fails), without SHA256SUMS (the last
// one fails, after all the others were pushed), and whole.
func TestSealTagsLast(t *testing.T) {
	cosign := cosignBinary(t)
	keys := cosignKeys(t, cosign, "release")
	t.Setenv("COSIGN_PASSWORD", "")
	for _, tc := range []struct {
		name    string
		key     string
		sums    bool
		tagged  bool
		wantErr string
	}{
		{name: "unreadable key", key: filepath.Join(keys["release"], "missing.key"), sums: true, wantErr: "cosign sign "},
		{name: "no SHA256SUMS", key: filepath.Join(keys["release"], "cosign.key"), sums: false, wantErr: "cosign sign-blob "},
		{name: "whole", key: filepath.Join(keys["release"], "cosign.key"), sums: true, tagged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := startRecordingRegistry(t)
			c := config{registry: reg.repo, repo: reg.repo, version: "v1.2.3", out: t.TempDir(), cosign: cosign, cosignKey: tc.key}
			res := &result{images: map[string]v1.Hash{}, chart: chartFile("v1.2.3"), commit: strings.Repeat("ab", 20)}
			var imgs []v1.Image
			var binaries []binary
			for _, arch := range []string{"amd64", "arm64"} {
				b := binary{platform: "linux/" + arch, arch: arch, path: filepath.Join(c.out, "bar-controller-linux-"+arch)}
				c.platforms = append(c.platforms, b.platform)
				writeTestFile(t, b.path, "\x7fELF "+arch)
				writeTestFile(t, b.path+".spdx.json", `{"name":"`+arch+`"}`)
				img, err := image.Build(image.Controller(b.path, arch))
				if err != nil {
					t.Fatal(err)
				}
				if res.images[b.platform], err = img.Digest(); err != nil {
					t.Fatal(err)
				}
				imgs = append(imgs, img)
				binaries = append(binaries, b)
			}
			writeTestFile(t, filepath.Join(c.out, res.chart), "a chart")
			if tc.sums {
				writeTestFile(t, filepath.Join(c.out, sumsFile), "sums")
			}
			idx, err := image.Index(imgs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.index, err = idx.Digest(); err != nil {
				t.Fatal(err)
			}
			res.provenance = testProvenance(t, c, res)
			if err := publish(t.Context(), idx, c); err != nil {
				t.Fatal(err)
			}
			err = seal(t.Context(), c, idx, binaries, res)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("seal: %v; want an error of %q", err, tc.wantErr)
			}
			puts := reg.manifestPuts()
			if tagged := slices.Contains(puts, c.version); tagged != tc.tagged {
				t.Errorf("the tag %s was pushed: %v, want %v (pushed: %v)", c.version, tagged, tc.tagged, puts)
			}
			if !tc.sums {
				// Everything but the tag was pushed: only the tag's
				// place in the order kept the failed release unpublished.
				checkTagIsLast(t, append(puts, c.version), c, res)
			}
			if tc.tagged {
				checkTagIsLast(t, puts, c, res)
				got, err := remote.Index(mustTag(t, reg.repo+":"+c.version))
				if err != nil {
					t.Fatal(err)
				}
				if d, _ := got.Digest(); d != res.index {
					t.Errorf("the tag names %s, want the index %s", d, res.index)
				}
				for _, f := range []string{res.chart, sumsFile} {
					if fi, err := os.Stat(signatureFile(filepath.Join(c.out, f))); err != nil || fi.Mode().Perm() != 0o644 {
						t.Errorf("the signature of %s: %v, %v; want a file anyone may read, as the bundle's", f, fi, err)
					}
				}
			}
		})
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// cosignKeys makes a cosign key pair with an empty password for each name,
// each in a directory of its own (cosign.key, cosign.pub), and returns the
// directories by name.
func cosignKeys(t *testing.T, cosign string, names ...string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, name := range names {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		gen := exec.Command(cosign, "generate-key-pair")
		gen.Dir = dir
		gen.Env = append(os.Environ(), "COSIGN_PASSWORD=")
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
		keys[name] = dir
	}
	return keys
}

// recordingRegistry is go-containerregistry's registry on loopback,
// keeping the order in which manifests were pushed to it: by digest, by
// tag, and cosign's signature and attestation tags.
type recordingRegistry struct {
	repo string // 127.0.0.1:port/bar-controller

	mu   sync.Mutex
	puts []string // the references pushed, in order
}

func startRecordingRegistry(t *testing.T) *recordingRegistry {
	t.Helper()
	r := &recordingRegistry{}
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, ref, ok := strings.Cut(req.URL.Path, "/manifests/"); ok && req.Method == http.MethodPut {
			r.mu.Lock()
			r.puts = append(r.puts, ref)
			r.mu.Unlock()
		}
		handler.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.repo = strings.TrimPrefix(srv.URL, "http://") + "/bar-controller"
	return r
}

func (r *recordingRegistry) manifestPuts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.puts)
}

// checkTagIsLast: the release's tag is pushed once, after everything else,
// the signature of the index and the attestations of the index and of each
// platform's image among it; until then nobody pulling the version can get
// an image that is not yet signed.
func checkTagIsLast(t *testing.T, puts []string, c config, res *result) {
	t.Helper()
	if len(puts) == 0 || puts[len(puts)-1] != c.version || slices.Index(puts, c.version) != len(puts)-1 {
		t.Errorf("the manifests were pushed in the order %v; want the tag %s once, last", puts, c.version)
	}
	want := []string{"sha256-" + res.index.Hex + ".sig", "sha256-" + res.index.Hex + ".att"}
	for _, p := range c.platforms {
		want = append(want, "sha256-"+res.images[p].Hex+".att")
	}
	if res.chartRef != "" {
		// The chart in the registry is signed, and tagged with its
		// version before the index is.
		_, digest, _ := strings.Cut(res.chartRef, "@sha256:")
		want = append(want, "sha256-"+digest+".sig")
		chartTag := chartVersion(c.version)
		sig, i := slices.Index(puts, "sha256-"+digest+".sig"), slices.Index(puts, chartTag)
		if sig < 0 || i < sig || slices.Index(puts, c.version) < i {
			t.Errorf("the manifests were pushed in the order %v; want the chart's tag %s after its signature and before the index's tag", puts, chartTag)
		}
	}
	for _, w := range want {
		if !slices.Contains(puts, w) {
			t.Errorf("nothing was pushed as %s (pushed: %v)", w, puts)
		}
	}
}
