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

package node

import (
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

const (
	// releaseVersion is what the test releases; any version make release
	// takes.
	releaseVersion = "v0.0.0-node.1"
	// sbomType is the artifact type hack/release attaches SBOMs as.
	sbomType = "application/spdx+json"
)

// countingRegistry is go-containerregistry's registry, as a user's would
// be (with the OCI referrers API), on loopback, counting the requests it
// answers by method and path: what the node fetched, and by which digest.
type countingRegistry struct {
	srv  *httptest.Server
	host string // 127.0.0.1:port
	repo name.Repository

	mu       sync.Mutex
	requests map[string]int
}

func startRegistry(t *testing.T) *countingRegistry {
	t.Helper()
	r := &countingRegistry{requests: map[string]int{}}
	handler := registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests[req.Method+" "+req.URL.Path]++
		r.mu.Unlock()
		handler.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.host = strings.TrimPrefix(r.srv.URL, "http://")
	var err error
	if r.repo, err = name.NewRepository(r.host + "/bar-controller"); err != nil {
		t.Fatal(err)
	}
	return r
}

// take returns the requests answered since the last take, and forgets them.
func (r *countingRegistry) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.requests
	r.requests = map[string]int{}
	return out
}

// release is what make release pushed and wrote.
type release struct {
	dir   string // the bundle
	ref   string // repo@sha256:..., what install.yaml runs
	chart string // oci://host/charts/bar-controller@sha256:..., chart.txt
	index v1.Hash
	// images are the index's manifests by architecture; blobs each image's
	// config and layers.
	images map[string]v1.Hash
	blobs  map[string][]v1.Hash
	pub    string // the cosign public key
}

// digests lists every digest of the release's images: the index, each
// platform's manifest and its blobs.
func (r *release) digests() []string {
	out := []string{r.index.String()}
	for arch, d := range r.images {
		out = append(out, d.String())
		for _, b := range r.blobs[arch] {
			out = append(out, b.String())
		}
	}
	return out
}

// tools returns $HELM and $COSIGN; without them the test is skipped, or
// fails where a node is required (CI).
func tools(t *testing.T) (helm, cosign string) {
	t.Helper()
	helm, cosign = os.Getenv("HELM"), os.Getenv("COSIGN")
	if helm == "" || cosign == "" {
		msg := "needs $HELM and $COSIGN naming helm and cosign: hack/install-tool.sh helm (or cosign) prints the directory each is built into"
		if os.Getenv(RequireNodeEnv) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return helm, cosign
}

// makeRelease runs what make release REGISTRY=... COSIGN_KEY=... runs
// (hack/release, with the kubectl and cosign this test was given), signed
// with a key made for the test, and reads back what it pushed.
func makeRelease(t *testing.T, reg *countingRegistry, cosign string) *release {
	t.Helper()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gen := exec.CommandContext(t.Context(), cosign, "generate-key-pair")
	gen.Dir = dir
	gen.Env = append(os.Environ(), "COSIGN_PASSWORD=")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	rel := &release{dir: filepath.Join(dir, "release"), pub: filepath.Join(dir, "cosign.pub"),
		images: map[string]v1.Hash{}, blobs: map[string][]v1.Hash{}}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "go", "run", "-trimpath", "./hack/release",
		"--version="+releaseVersion, "--registry="+reg.repo.String(), "--out="+rel.dir,
		"--kubectl="+filepath.Join(os.Getenv(localcluster.BinDirEnv), "kubectl"),
		"--cosign="+cosign, "--cosign-key="+filepath.Join(dir, "cosign.key"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=", "CGO_ENABLED=0") // make release's flags
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/release: %v\n%s", err, out)
	}
	t.Logf("make release pushed to %s in %v:\n%s", reg.repo, time.Since(start).Round(time.Second), out)

	image, err := os.ReadFile(filepath.Join(rel.dir, "image.txt"))
	if err != nil {
		t.Fatal(err)
	}
	rel.ref = strings.TrimSpace(string(image))
	chart, err := os.ReadFile(filepath.Join(rel.dir, "chart.txt"))
	if err != nil {
		t.Fatal(err)
	}
	rel.chart = strings.TrimSpace(string(chart))
	d, err := name.NewDigest(rel.ref)
	if err != nil || d.Context() != reg.repo {
		t.Fatalf("the release names %q, not an image by digest in %s (%v)", rel.ref, reg.repo, err)
	}
	if rel.index, err = v1.NewHash(d.DigestStr()); err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(d)
	if err != nil {
		t.Fatalf("the registry does not serve the release's index: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		rel.images[desc.Platform.Architecture] = desc.Digest
		rel.blobs[desc.Platform.Architecture] = []v1.Hash{cfg}
		for _, l := range layers {
			ld, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			rel.blobs[desc.Platform.Architecture] = append(rel.blobs[desc.Platform.Architecture], ld)
		}
	}
	if got := slices.Sorted(maps.Keys(rel.images)); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Fatalf("the index holds images for %v, want amd64 and arm64", got)
	}
	return rel
}
