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
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sbomMediaType is SPDX JSON's registered media type, and the artifact
// type a registry's referrers API filters SBOMs by.
const sbomMediaType = "application/spdx+json"

// emptyJSON is the OCI empty descriptor's content, the config of an
// artifact that has nothing to configure.
var emptyJSON = []byte("{}")

// attachSBOMs pushes each binary's SBOM to c.registry as an OCI 1.1
// artifact whose subject is the image holding that binary (not the
// index: the arm64 SBOM describes the arm64 image's bytes only). A
// registry with the referrers API lists them under the image's digest;
// for one without it, go-containerregistry keeps the OCI fallback tag
// (sha256-<digest>) up to date, which oras and crane read too. The
// artifacts carry only the commit's time, so that a rebuild pushes the
// same digests again.
//
// They are not signed, and are kept beside the signed attestations (sign.go)
// for discovery: tools that look for an image's SBOM through the referrers
// API find these, and cosign v2's attestations sit under its own .att tag,
// where such tools do not look. Anyone who can push to the repository can
// add referrers of their own anyway, so a referrer's presence never vouched
// for anything; the notes and the README say that the attestation is the
// signed SBOM, and that an artifact's blob, the bundle's file byte for byte,
// is checked by the signed SHA256SUMS.
func attachSBOMs(ctx context.Context, c config, idx v1.ImageIndex, binaries []binary, created time.Time) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != len(binaries) {
		return fmt.Errorf("the index lists %d images for %d binaries", len(m.Manifests), len(binaries))
	}
	repo, err := name.NewRepository(c.registry)
	if err != nil {
		return err
	}
	for i, b := range binaries {
		sbom, err := os.ReadFile(b.path + ".spdx.json")
		if err != nil {
			return err
		}
		image := m.Manifests[i]
		subject := v1.Descriptor{MediaType: image.MediaType, Digest: image.Digest, Size: image.Size}
		art, err := newArtifact(sbom, filepath.Base(b.path)+".spdx.json", subject, created)
		if err != nil {
			return err
		}
		digest, err := art.Digest()
		if err != nil {
			return err
		}
		if err := remote.Write(repo.Digest(digest.String()), art, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("attaching the %s SBOM to %s: %w", b.platform, image.Digest, err)
		}
	}
	return nil
}

// artifact is an OCI manifest with a config and one blob that are not an
// image's: the parts go-containerregistry needs to push it as an image
// (partial fills in the rest). Built by hand because an image's config is
// a config file, and an SBOM artifact's is the two bytes "{}", a chart's
// its Chart.yaml (ocichart.go).
type artifact struct {
	manifest []byte
	config   []byte
	blob     v1.Layer
}

func newArtifact(content []byte, title string, subject v1.Descriptor, created time.Time) (v1.Image, error) {
	return oneBlobArtifact(v1.Manifest{
		ArtifactType: sbomMediaType,
		Config:       v1.Descriptor{MediaType: types.OCIEmptyJSON, Data: emptyJSON},
		Layers:       []v1.Descriptor{{MediaType: sbomMediaType, Annotations: map[string]string{"org.opencontainers.image.title": title}}},
		Subject:      &subject,
		Annotations:  map[string]string{"org.opencontainers.image.created": created.UTC().Format(time.RFC3339)},
	}, emptyJSON, content)
}

// oneBlobArtifact completes m, an OCI manifest with one layer whose media
// types and annotations are set, with config and content's digests and
// sizes, and returns it as an image to push.
func oneBlobArtifact(m v1.Manifest, config, content []byte) (v1.Image, error) {
	blob := static.NewLayer(content, m.Layers[0].MediaType)
	blobDigest, err := blob.Digest()
	if err != nil {
		return nil, err
	}
	configDigest, _, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return nil, err
	}
	m.SchemaVersion, m.MediaType = 2, types.OCIManifestSchema1
	m.Config.Digest, m.Config.Size = configDigest, int64(len(config))
	m.Layers[0].Digest, m.Layers[0].Size = blobDigest, int64(len(content))
	manifest, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: manifest, config: config, blob: blob})
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.blob.Digest(); err == nil && d == h {
		return a.blob, nil
	}
	return nil, fmt.Errorf("the artifact has no blob %s", h)
}
