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
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	spdxjson "github.com/spdx/tools-golang/json"

	"github.com/barcontroller/bar-controller/internal/image"
)

// TestSBOMListsTheLinkedModules describes this test binary, whose build
// information is at hand: every module linked in is a package with its
// version and package URL, the controller depends on each, and the
// document survives a round trip through the SPDX library's reader.
func TestSBOMListsTheLinkedModules(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok || len(info.Deps) == 0 {
		t.Fatal("the test binary has no build information")
	}
	b := binary{platform: "linux/arm64", arch: "arm64", path: "/x/bar-controller-linux-arm64"}
	created := time.Unix(1700000000, 0)
	doc := sbom(info, b, "v1.2.3", strings.Repeat("ab", 32), created)
	var buf bytes.Buffer
	if err := spdxjson.Write(doc, &buf); err != nil {
		t.Fatal(err)
	}
	read, err := spdxjson.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if read.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %q, want the given time in UTC", read.CreationInfo.Created)
	}

	purls := map[string]string{} // by SPDX ID
	for _, p := range read.Packages {
		if _, dup := purls[string(p.PackageSPDXIdentifier)]; dup {
			t.Errorf("SPDX ID %s twice", p.PackageSPDXIdentifier)
		}
		if len(p.PackageExternalReferences) != 1 {
			t.Fatalf("package %s has %d external references, want its purl", p.PackageName, len(p.PackageExternalReferences))
		}
		purls[string(p.PackageSPDXIdentifier)] = p.PackageExternalReferences[0].Locator
	}
	dependsOn := map[string]bool{}
	for _, r := range read.Relationships {
		switch r.Relationship {
		case "DESCRIBES":
			if r.RefB.ElementRefID != "Package-bar-controller" {
				t.Errorf("the document describes %s", r.RefB.ElementRefID)
			}
		case "DEPENDS_ON":
			dependsOn[purls[string(r.RefB.ElementRefID)]] = true
		}
	}
	want := []string{"pkg:golang/stdlib@" + strings.TrimPrefix(info.GoVersion, "go")}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		want = append(want, "pkg:golang/"+m.Path+"@"+m.Version)
	}
	for _, w := range want {
		if !dependsOn[w] {
			t.Errorf("the controller does not depend on %s", w)
		}
	}
	if len(dependsOn) != len(want) {
		t.Errorf("%d dependencies, want %d", len(dependsOn), len(want))
	}
	if !strings.Contains(read.Packages[0].PackageComment, info.GoVersion) || read.Packages[0].PackageFileName != "bar-controller-linux-arm64" {
		t.Errorf("the binary's package: %q, %q", read.Packages[0].PackageComment, read.Packages[0].PackageFileName)
	}
}

// TestPinnedTo: a manifest that runs anything but the release's image by
// digest is refused.
func TestPinnedTo(t *testing.T) {
	ref := "r.example/bar@sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		yaml string
		ok   bool
	}{
		{"containers:\n- image: " + ref + "\n  name: a\n", true},
		{"containers:\n- name: a\n  image: " + ref + "\n- name: b\n  image: " + ref + "\n", true},
		{"containers:\n- name: a\n  image: " + ref + "\ninitContainers:\n- image: bar-controller:dev\n", false},
		{"kind: Namespace\n", false},
	} {
		if err := pinnedTo([]byte(tc.yaml), ref); (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok %v", tc.yaml, err, tc.ok)
		}
	}
}

// TestPublishPushesTheIndex pushes to a registry on loopback (the
// go-containerregistry registry in this process), as publish and seal do
// for a release without a key, and reads it back by its tag: the
// registry serves the index with the digest computed before the push, the
// digest install.yaml names, each platform's image under it, and each
// image's SBOM as its referrer, whether the registry has the referrers API
// or only the fallback tag.
func TestPublishPushesTheIndex(t *testing.T) {
	for _, referrersAPI := range []bool{true, false} {
		t.Run(fmt.Sprintf("referrersAPI=%v", referrersAPI), func(t *testing.T) {
			testPublish(t, registry.New(registry.WithReferrersSupport(referrersAPI)))
		})
	}
}

func testPublish(t *testing.T, reg http.Handler) {
	srv := httptest.NewServer(reg)
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/bar-controller"
	c := config{registry: repo, repo: repo, version: "v1.2.3"}

	var imgs []v1.Image
	var binaries []binary
	for _, arch := range []string{"amd64", "arm64"} {
		b := binary{platform: "linux/" + arch, arch: arch, path: filepath.Join(t.TempDir(), "bar-controller-linux-"+arch)}
		if err := os.WriteFile(b.path, []byte("\x7fELF "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.path+".spdx.json", []byte(`{"name":"`+arch+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		img, err := image.Build(image.Controller(b.path, arch))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		binaries = append(binaries, b)
	}
	idx, err := image.Index(imgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if err := publish(t.Context(), idx, c); err != nil {
		t.Fatal(err)
	}
	// Unsigned (no key): seal attaches the SBOMs and tags the index.
	if err := seal(t.Context(), c, idx, binaries, &result{created: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}

	tag, err := name.NewTag(repo + ":v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("the registry serves %s, pushed %s", got, want)
	}
	m, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range m.Manifests {
		img, err := pulled.Image(d.Digest)
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		if got, _ := img.Digest(); got != d.Digest {
			t.Errorf("image %d: %s, listed as %s", i, got, d.Digest)
		}
		refs, err := remote.Referrers(tag.Context().Digest(d.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		rm, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(rm.Manifests) != 1 {
			t.Fatalf("%s has referrers %+v, want its SBOM", d.Platform, rm.Manifests)
		}
		// The artifact type from the manifest itself: this registry's
		// referrers API reports the config's media type instead, which
		// the OCI spec says only for a manifest without artifactType.
		art, err := remote.Image(tag.Context().Digest(rm.Manifests[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		if am, err := art.Manifest(); err != nil || am.ArtifactType != sbomMediaType || am.Subject == nil || am.Subject.Digest != d.Digest {
			t.Fatalf("the referrer of %s: %+v, %v; want an SBOM artifact whose subject is the image", d.Platform, am, err)
		}
		layers, err := art.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("the SBOM artifact has layers %v, %v", layers, err)
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if wantSBOM := `{"name":"` + d.Platform.Architecture + `"}`; string(got) != wantSBOM {
			t.Errorf("the SBOM attached to the %s image is %s, want %s", d.Platform.Architecture, got, wantSBOM)
		}
	}
}

func TestValidate(t *testing.T) {
	nonEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(nonEmpty, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "release")
	for _, tc := range []struct {
		c        config
		wantErr  string
		wantRepo string
	}{
		{config{version: "v1.2.3", out: fresh, platforms: []string{"linux/amd64"}}, "", "bar-controller"},
		{config{version: "v1.2.3-rc.1", out: fresh, platforms: []string{"linux/amd64"}, registry: "r.example/bar", cosignKey: "cosign.key"}, "", "r.example/bar"},
		{config{version: "v1.2.3", out: fresh, platforms: []string{"linux/amd64"}, registry: "r.example/bar"}, "publish the version unsigned", ""},
		{config{version: "v1.2.3", out: fresh, platforms: []string{"linux/amd64"}, registry: "r.example/bar", unsigned: true}, "", "r.example/bar"},
		{config{version: "1.2.3", out: fresh, platforms: []string{"linux/amd64"}}, "not vX.Y.Z", ""},
		{config{version: "v1.2.3+meta", out: fresh, platforms: []string{"linux/amd64"}}, "not vX.Y.Z", ""},
		{config{version: "v1.2.3", out: fresh, platforms: []string{"darwin/arm64"}}, "Linux binary only", ""},
		{config{version: "v1.2.3", out: nonEmpty, platforms: []string{"linux/amd64"}}, "not empty", ""},
		{config{version: "v1.2.3", out: fresh, platforms: []string{"linux/amd64"}, cosignKey: "cosign.key"}, "needs --registry", ""},
	} {
		err := tc.c.validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%+v: %v, want an error with %q", tc.c, err, tc.wantErr)
		case tc.wantErr == "" && tc.c.repo != tc.wantRepo:
			t.Errorf("%+v: repo %q, want %q", tc.c, tc.c.repo, tc.wantRepo)
		}
	}
}

// checkSBOMReferrers: the notes say the SBOM artifacts attached to the
// images are not signed, and how to check one: each one's blob is the
// bundle's file of that name, whose checksum the signed SHA256SUMS lists.
func checkSBOMReferrers(t *testing.T, notes []byte, c config, res *result) {
	t.Helper()
	if !strings.Contains(string(notes), "That artifact is not signed") || !strings.Contains(string(notes), "The signed SBOM is the attestation above") {
		t.Errorf("the release notes do not say that the SBOM artifacts in the registry are unsigned, and which SBOM is signed:\n%s", notes)
	}
	sums, err := os.ReadFile(filepath.Join(c.out, sumsFile))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(c.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.platforms {
		file := "bar-controller-" + strings.ReplaceAll(p, "/", "-") + ".spdx.json"
		refs, err := remote.Referrers(repo.Digest(res.images[p].String()))
		if err != nil {
			t.Fatal(err)
		}
		rm, err := refs.IndexManifest()
		if err != nil || len(rm.Manifests) != 1 {
			t.Fatalf("the %s image's referrers: %+v, %v; want its SBOM", p, rm, err)
		}
		art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		layers, err := art.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("the %s SBOM artifact has layers %v, %v", p, layers, err)
		}
		d, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if line := d.Hex + "  " + file + "\n"; !strings.Contains(string(sums), line) {
			t.Errorf("the %s SBOM artifact's blob is %s, which %s does not list as %s:\n%s", p, d, sumsFile, file, sums)
		}
	}
}
