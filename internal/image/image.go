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

// Package image builds container images from a static binary with no Docker
// engine and no registry, using go-containerregistry: one layer holding the
// binary on the empty base, written as an OCI image layout in a tar archive
// that `ctr images import` (containerd) and `docker load` read.
//
// The controller's image made this way matches the Dockerfile's in what
// matters at run time: the same static binary at the same path as the
// entrypoint, run as the same numeric user. The Dockerfile's distroless base
// adds CA certificates, tzdata and /etc/passwd, none of which the controller
// reads (in-cluster it trusts the ServiceAccount's CA bundle, and a numeric
// user needs no passwd entry). image_test.go checks that the Dockerfile
// still says what Controller says.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what an image built here contains: one executable, run as a
// numeric user.
type Spec struct {
	// Binary is the file on disk to ship; it must be statically linked,
	// since the image holds nothing else.
	Binary string
	// Path is where the binary lives in the image; it is the entrypoint.
	Path string
	// User is "uid:gid", numeric, so that a Pod's runAsNonRoot can verify it.
	User string
	// Architecture is the GOARCH the binary was built for.
	Architecture string
	// Created stamps the layer's files and the config. A fixed time makes
	// the image reproducible: the same binary gives the same digest.
	Created time.Time
}

// Controller returns the Spec of bar-controller's image. The Dockerfile
// must agree (image_test.go).
func Controller(binary, arch string) Spec {
	return Spec{Binary: binary, Path: "/bar-controller", User: "65532:65532", Architecture: arch}
}

// Build returns the image for s.
func Build(s Spec) (v1.Image, error) {
	data, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := singleFileTar(s.Path, data, s.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "bar-controller internal/image: " + s.Path},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	// Without OS and architecture a runtime refuses the image as not
	// for its platform.
	cfg.OS = "linux"
	cfg.Architecture = s.Architecture
	cfg.Created = v1.Time{Time: s.Created}
	cfg.Config.Entrypoint = []string{s.Path}
	cfg.Config.Cmd = nil
	cfg.Config.User = s.User
	cfg.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cfg)
}

// singleFileTar is a layer: one executable file at p, owned by root, so
// the numeric user can run but not modify it.
func singleFileTar(p string, data []byte, modTime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     path.Clean(p)[1:], // layer paths are relative to /
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  modTime,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing layer: %w", err)
	}
	return buf.Bytes(), nil
}
