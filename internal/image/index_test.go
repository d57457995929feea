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

package image

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func platformImages(t *testing.T, archs ...string) []v1.Image {
	t.Helper()
	var imgs []v1.Image
	for _, arch := range archs {
		bin := filepath.Join(t.TempDir(), "bin")
		if err := os.WriteFile(bin, []byte("\x7fELF pretend "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		spec := Controller(bin, arch)
		spec.Created = time.Unix(1700000000, 0).UTC()
		img, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	return imgs
}

// TestIndexWritesALayout: each image is listed under its own platform, the
// layout's index.json names the index, and reading the layout back gives
// the same digest, as a node that pulls it by digest needs.
func TestIndexWritesALayout(t *testing.T) {
	imgs := platformImages(t, "amd64", "arm64")
	idx, err := Index(imgs, map[string]string{"org.opencontainers.image.version": "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(m.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := m.Manifests[i]
		want, _ := imgs[i].Digest()
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch || d.Digest != want {
			t.Errorf("manifest %d: %+v %s, want linux/%s %s", i, d.Platform, d.Digest, arch, want)
		}
	}
	if m.Annotations["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("index annotations %v", m.Annotations)
	}

	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, "bar-controller:v1.2.3", idx); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, "bar-controller:v1.2.3", idx); err == nil {
		t.Error("a second layout was written over the first")
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != want {
		t.Fatalf("index.json lists %+v, want the one index %s", tm.Manifests, want)
	}
	if got := tm.Manifests[0].Annotations[containerdImageName]; got != "docker.io/library/bar-controller:v1.2.3" {
		t.Errorf("containerd name %q", got)
	}
	read, err := top.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := read.Digest(); got != want {
		t.Errorf("read back %s, wrote %s", got, want)
	}

	again, err := Index(platformImages(t, "amd64", "arm64"), map[string]string{"org.opencontainers.image.version": "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Digest(); got != want {
		t.Errorf("the same binaries gave indexes %s and %s", want, got)
	}
}

func TestIndexRefusesImagesWithoutPlatform(t *testing.T) {
	imgs := platformImages(t, "")
	if _, err := Index(imgs, nil); err == nil {
		t.Error("an image without architecture was indexed")
	}
}

func TestSourceDateEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if _, ok, err := SourceDateEpoch(); ok || err != nil {
		t.Errorf("unset: ok %v, err %v", ok, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if got, ok, err := SourceDateEpoch(); !ok || err != nil || !got.Equal(time.Unix(1700000000, 0)) || got.Location() != time.UTC {
		t.Errorf("got %v %v %v", got, ok, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, _, err := SourceDateEpoch(); err == nil {
		t.Error("a non-number was accepted")
	}
}
