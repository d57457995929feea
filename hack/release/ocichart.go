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
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// A release pushed to a registry puts its chart there too, as helm push
// would: an OCI manifest whose config is Chart.yaml as JSON and whose one
// layer is the chart archive, under the media types Helm reserves
// (helm.sh/helm/v3's pkg/registry/constants.go), tagged X.Y.Z in
// <chart registry>/bar-controller. Then
//
//	helm install bar-controller oci://<chart registry>/bar-controller@sha256:...
//
// installs exactly the bytes of the bundle's .tgz (Helm 3.18 and later
// take a digest), and Artifact Hub lists it from the repository (its
// annotations: setArtifactHub). Built here with go-containerregistry, no
// helm: the manifest is a function of the archive and the commit's time,
// so its digest is known before anything is pushed (the notes name it)
// and a rebuild pushes the same one.
const (
	helmConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	helmChartMediaType  types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// chartRepository is the repository the chart is pushed to: the chart's
// name under --chart-registry, by default a charts/ beside the image's
// repository (registry.example/org/bar-controller's chart is
// registry.example/org/charts/bar-controller), as projects that publish
// both lay them out, so that the image's tags and the chart's (v1.2.3 and
// 1.2.3) are not in one list.
func chartRepository(c config) (name.Repository, error) {
	reg := c.chartRegistry
	if reg == "" {
		parent, _, ok := cutLast(c.registry, "/")
		if !ok {
			return name.Repository{}, fmt.Errorf("--registry %q has no host/ part", c.registry)
		}
		reg = parent + "/charts"
	}
	return name.NewRepository(reg + "/bar-controller")
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// chartArtifact is the chart archive tgz as helm push makes it: the
// config, Chart.yaml as JSON; the archive, its one layer; the manifest's
// annotations, what helm push writes (title, version, description, url,
// source, created, and the chart's own annotations), with the commit's
// time as created.
func chartArtifact(tgz []byte, created time.Time) (v1.Image, error) {
	chartYAML, err := fileInArchive(tgz, "bar-controller/Chart.yaml")
	if err != nil {
		return nil, err
	}
	config, err := yaml.YAMLToJSON(chartYAML)
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	var meta struct {
		Name        string            `json:"name"`
		Version     string            `json:"version"`
		Description string            `json:"description"`
		Home        string            `json:"home"`
		Sources     []string          `json:"sources"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(config, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	annotations := map[string]string{}
	for k, v := range meta.Annotations {
		annotations[k] = v
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":       meta.Name,
		"org.opencontainers.image.version":     meta.Version,
		"org.opencontainers.image.description": meta.Description,
		"org.opencontainers.image.url":         meta.Home,
		"org.opencontainers.image.created":     created.UTC().Format(time.RFC3339),
	} {
		if v != "" {
			annotations[k] = v // helm push lets no chart annotation override these
		}
	}
	if len(meta.Sources) > 0 {
		annotations["org.opencontainers.image.source"] = meta.Sources[0]
	}
	return oneBlobArtifact(v1.Manifest{
		Config:      v1.Descriptor{MediaType: helmConfigMediaType},
		Layers:      []v1.Descriptor{{MediaType: helmChartMediaType}},
		Annotations: annotations,
	}, config, tgz)
}

// fileInArchive is the file at name in the gzipped tar tgz.
func fileInArchive(tgz []byte, name string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the chart archive has no %s", name)
		}
		if err != nil {
			return nil, err
		}
		if hdr.Name == name {
			return io.ReadAll(tr)
		}
	}
}

// prepareChartPush makes the chart artifact of the bundle's archive,
// checks that its version's tag names nothing else yet, before anything
// is signed or tagged, and writes its oci:// reference to chart.txt.
func prepareChartPush(ctx context.Context, c config, res *result) error {
	tgz, err := os.ReadFile(filepath.Join(c.out, res.chart))
	if err != nil {
		return err
	}
	art, err := chartArtifact(tgz, res.created)
	if err != nil {
		return fmt.Errorf("the chart as an OCI artifact: %w", err)
	}
	repo, err := chartRepository(c)
	if err != nil {
		return err
	}
	digest, err := art.Digest()
	if err != nil {
		return err
	}
	t := repo.Tag(chartVersion(c.version)) // helm push tags the chart's version
	if _, err := checkTag(ctx, t, c.version, digest); err != nil {
		return err
	}
	res.chartArtifact, res.chartRef, res.chartTag = art, repo.String()+"@"+digest.String(), t
	// Beside image.txt: what helm install takes, for scripts.
	return os.WriteFile(filepath.Join(c.out, "chart.txt"), []byte("oci://"+res.chartRef+"\n"), 0o644)
}

// pushChart pushes the chart artifact by digest, untagged: seal tags it
// once it is signed, as it tags the index.
func pushChart(ctx context.Context, res *result) error {
	ref, err := name.NewDigest(res.chartRef)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, res.chartArtifact, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing the chart to %s: %w", ref, err)
	}
	return nil
}
