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
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// TestDockerfileAgrees keeps the Dockerfile and Controller in step: the
// image the tests run is built by Controller's Spec, the image users build
// with Docker by the Dockerfile, and both must run the same binary the same
// way.
func TestDockerfileAgrees(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ast, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("the Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	want := Controller("", "")
	build, final := stages[0], stages[len(stages)-1]

	var user string
	var entrypoint []string
	var copied []string
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("ENTRYPOINT %v is in shell form; the image has no shell", c.CmdLine)
			}
			entrypoint = c.CmdLine
		case *instructions.CopyCommand:
			if c.From == build.Name {
				copied = append(copied, c.DestPath)
			}
		case *instructions.RunCommand:
			t.Errorf("the runtime stage runs %v; it must only copy the binary", c.CmdLine)
		}
	}
	if user != want.User {
		t.Errorf("Dockerfile USER = %q, image.Controller's User = %q", user, want.User)
	}
	if !slices.Equal(entrypoint, []string{want.Path}) {
		t.Errorf("Dockerfile ENTRYPOINT = %q, image.Controller's entrypoint = [%q]", entrypoint, want.Path)
	}
	if !slices.Equal(copied, []string{want.Path}) {
		t.Errorf("the runtime stage copies %q from the build stage, want exactly [%q]", copied, want.Path)
	}

	// Static: the image built here has no libc to link against.
	var static bool
	for _, cmd := range build.Commands {
		if c, ok := cmd.(*instructions.RunCommand); ok && strings.Contains(strings.Join(c.CmdLine, " "), "CGO_ENABLED=0 go build") {
			static = true
		}
	}
	if !static {
		t.Errorf("the build stage does not build with CGO_ENABLED=0; the binary would not be static")
	}
}

// TestBuildWritesARunnableArchive builds an image and reads the archive
// back as containerd would: the index names the image, the config says how
// to run it, the one layer holds the binary, and the same input gives the
// same digest.
func TestBuildWritesARunnableArchive(t *testing.T) {
	dir := t.TempDir()
	binary := filepath.Join(dir, "bin")
	content := []byte("\x7fELF pretend binary")
	if err := os.WriteFile(binary, content, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := Controller(binary, "amd64")
	spec.Created = time.Unix(1700000000, 0).UTC()
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	if err := WriteOCIArchive(archive, "bar-controller:v1", img); err != nil {
		t.Fatal(err)
	}

	layoutDir := filepath.Join(dir, "layout")
	untar(t, archive, layoutDir)
	index, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 {
		t.Fatalf("the index lists %d images, want 1", len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	if got := desc.Annotations[containerdImageName]; got != "docker.io/library/bar-controller:v1" {
		t.Errorf("containerd name = %q", got)
	}
	if got := desc.Annotations[ociRefName]; got != "v1" {
		t.Errorf("OCI ref name = %q", got)
	}
	read, err := index.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := read.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform = %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/bar-controller"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("config user %q, entrypoint %q, cmd %q", cfg.Config.User, cfg.Config.Entrypoint, cfg.Config.Cmd)
	}

	layers, err := read.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(tr)
	if hdr.Name != "bar-controller" || hdr.Mode != 0o755 || hdr.Uid != 0 || !bytes.Equal(got, content) {
		t.Errorf("layer entry %q mode %o uid %d, %d bytes; want the binary at bar-controller, 0755, root", hdr.Name, hdr.Mode, hdr.Uid, len(got))
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("the layer holds more than the binary (%v)", err)
	}

	again, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same binary differ: %s, %s", d1, d2)
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
