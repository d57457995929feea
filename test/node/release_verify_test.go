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
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	spdxjson "github.com/spdx/tools-golang/json"
)

// verifySignature runs the verify command the release notes give, with the
// release's public key: it must vouch for the index digest that was
// pushed, and for nothing else (the amd64 image's digest, unsigned, must
// fail).
func verifySignature(t *testing.T, rel *release, cosign string) {
	t.Helper()
	notes, err := os.ReadFile(filepath.Join(rel.dir, "RELEASE_NOTES.md"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range strings.Lines(string(notes)) {
		// The image's command (the chart in the registry has its own).
		if f := strings.Fields(line); len(f) > 2 && f[0] == "cosign" && f[1] == "verify" && f[len(f)-1] == rel.ref {
			args = f[1:]
		}
	}
	if len(args) == 0 || args[len(args)-1] != rel.ref {
		t.Fatalf("the release notes give no cosign verify command for %s:\n%s", rel.ref, notes)
	}
	// An empty trusted root keeps cosign off the network (hack/release's
	// TestSignVerifies says why); the key is what is checked.
	emptyRoot := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(emptyRoot, []byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	verify := func(ref string) ([]byte, error) {
		a := slices.Clone(args[:len(args)-1])
		for i := range a {
			if a[i] == "cosign.pub" {
				a[i] = rel.pub
			}
		}
		a = append(a, "--trusted-root", emptyRoot, ref)
		cmd := exec.CommandContext(t.Context(), cosign, a...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("cosign %s: %w: %s", strings.Join(a, " "), err, stderr.Bytes())
		}
		return out, err
	}
	out, err := verify(rel.ref)
	if err != nil {
		t.Fatal(err)
	}
	var payloads []struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(out, &payloads); err != nil || len(payloads) == 0 {
		t.Fatalf("cosign verify printed no signature payload (%v):\n%s", err, out)
	}
	for _, p := range payloads {
		if p.Critical.Image.Digest != rel.index.String() {
			t.Errorf("a signature vouches for %s, not the pushed index %s", p.Critical.Image.Digest, rel.index)
		}
	}
	// Refused for the want of a signature, not for a reason of its own
	// (a registry or key cosign could not read would fail both).
	if _, err := verify(rel.ref[:strings.Index(rel.ref, "@")+1] + rel.images["amd64"].String()); err == nil {
		t.Error("cosign verify accepted the amd64 image's digest, which nothing signed")
	} else if !strings.Contains(err.Error(), "no signatures found") {
		t.Errorf("cosign verify of the unsigned amd64 image failed, but not for want of a signature: %v", err)
	}
}

// verifyImages checks each platform's image against the bundle: its SBOM
// referrer (found through the registry's referrers API by the image's
// digest) is the bundle's SBOM for that binary, and the image's one file
// is that binary, an ELF for the platform's machine.
func verifyImages(t *testing.T, reg *countingRegistry, rel *release) {
	t.Helper()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for arch, digest := range rel.images {
		ref := reg.repo.Digest(digest.String())
		sbom, err := os.ReadFile(filepath.Join(rel.dir, "bar-controller-linux-"+arch+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := referredSBOM(ref); err != nil {
			t.Errorf("%s image %s: %v", arch, digest, err)
		} else if !bytes.Equal(got, sbom) {
			t.Errorf("%s image %s: the SBOM attached in the registry is not the bundle's", arch, digest)
		}
		doc, err := spdxjson.Read(bytes.NewReader(sbom))
		if err != nil {
			t.Fatalf("%s SBOM: %v", arch, err)
		}
		if len(doc.Packages) == 0 || !strings.Contains(doc.Packages[0].PackageComment, "GOARCH="+arch) {
			t.Errorf("the %s SBOM does not describe a GOARCH=%s build", arch, arch)
		}

		img, err := remote.Image(ref)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := layerFile(img, "bar-controller")
		if err != nil {
			t.Fatalf("%s image: %v", arch, err)
		}
		want, err := os.ReadFile(filepath.Join(rel.dir, "bar-controller-linux-"+arch))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(bin) != sha256.Sum256(want) {
			t.Errorf("the %s image's /bar-controller is not the bundle's bar-controller-linux-%s", arch, arch)
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("the %s image's /bar-controller is not an ELF file: %v", arch, err)
		}
		if f.Machine != machines[arch] || f.Class != elf.ELFCLASS64 {
			t.Errorf("the %s image's /bar-controller is a %s %s ELF, want %s", arch, f.Class, f.Machine, machines[arch])
		}
	}
}

// referredSBOM returns the content of the one SPDX artifact that refers to
// the image ref, found through the registry's referrers API. Each
// referrer's own manifest says what it is: go-containerregistry's
// registry lists an artifact under its config's media type rather than
// its artifactType, so the API's artifactType filter would find nothing
// there.
func referredSBOM(ref name.Digest) ([]byte, error) {
	idx, err := remote.Referrers(ref)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Image
	for _, desc := range m.Manifests {
		art, err := remote.Image(ref.Context().Digest(desc.Digest.String()))
		if err != nil {
			return nil, err
		}
		am, err := art.Manifest()
		if err != nil {
			return nil, err
		}
		if am.ArtifactType != sbomType {
			continue
		}
		if am.Subject == nil || am.Subject.Digest.String() != ref.DigestStr() || len(am.Layers) != 1 {
			return nil, fmt.Errorf("the SBOM artifact has subject %v and %d blobs, want %s and one", am.Subject, len(am.Layers), ref.DigestStr())
		}
		found = append(found, art)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d SBOMs among %d referrers, want 1", len(found), len(m.Manifests))
	}
	layers, err := found[0].Layers()
	if err != nil {
		return nil, err
	}
	// The blob as stored: an SBOM is not compressed.
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// layerFile returns the content of the file at path in img's one layer.
func layerFile(img v1.Image, path string) ([]byte, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s in the layer", path)
		}
		if err != nil {
			return nil, err
		}
		if hdr.Name == path {
			return io.ReadAll(tr)
		}
	}
}
