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
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

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
	keys := map[string]string{}
	for _, name := range []string{"release", "other"} {
		kd := filepath.Join(dir, name)
		if err := os.Mkdir(kd, 0o755); err != nil {
			t.Fatal(err)
		}
		gen := exec.Command(cosign, "generate-key-pair")
		gen.Dir = kd
		gen.Env = append(os.Environ(), "COSIGN_PASSWORD=")
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
		}
		keys[name] = kd
	}
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
	if err := sign(t.Context(), c, ref); err != nil {
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
		args := strings.Fields(verifyCommand(ref))[1:]
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
