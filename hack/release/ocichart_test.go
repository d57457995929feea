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
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestChartInRegistry pushes a release's chart to a registry on loopback
// as the release does, and reads it back as Helm and Artifact Hub would:
// the manifest carries Helm's media types and helm push's annotations, a
// second build gives the same digest, and, with $HELM, helm pull by
// digest gets the bundle's archive byte for byte, and helm template of
// oci://...@sha256: renders the release's image by digest.
func TestChartInRegistry(t *testing.T) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1764000000, 0).UTC()
	reg := startRecordingRegistry(t)
	c := config{registry: reg.repo, repo: reg.repo, version: "v1.2.3", platforms: []string{"linux/amd64", "linux/arm64"}}
	img := chartImage{repository: reg.repo, tag: c.version, digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}, platforms: c.platforms}
	out := t.TempDir()
	file, err := packageChart(copyChart(t, root, 0o644, created), out, c.version, img, created)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := os.ReadFile(filepath.Join(out, file))
	if err != nil {
		t.Fatal(err)
	}
	res := &result{chart: file, created: created}
	c.out = out
	if err := prepareChartPush(t.Context(), c, res); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(reg.repo, "/bar-controller") + "/charts/bar-controller@sha256:"; !strings.HasPrefix(res.chartRef, want) {
		t.Errorf("the chart goes to %s, want %s... (charts/ beside the image)", res.chartRef, want)
	}
	again, err := chartArtifact(tgz, created)
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := mustDigest(t, res.chartArtifact), mustDigest(t, again); d1 != d2 {
		t.Errorf("two builds of the chart's artifact differ: %s, %s", d1, d2)
	}
	if err := pushChart(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	if err := tag(t.Context(), res.chartTag, c.version, res.chartArtifact, mustDigest(t, res.chartArtifact)); err != nil {
		t.Fatal(err)
	}
	if res.chartTag.TagStr() != "1.2.3" {
		t.Errorf("the chart is tagged %s, want 1.2.3 (helm push tags the chart's version)", res.chartTag.TagStr())
	}
	checkChartManifest(t, res.chartTag.String(), tgz, created)

	helm := os.Getenv("HELM")
	if helm == "" {
		if os.Getenv("BAR_REQUIRE_HELM") != "" {
			t.Fatal("$HELM must name helm (hack/install-tool.sh helm)")
		}
		t.Skip("no $HELM: the chart is not pulled by helm")
	}
	home := t.TempDir()
	env := append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	pulled := t.TempDir()
	pull := exec.Command(helm, "pull", "oci://"+res.chartRef, "--plain-http", "--destination", pulled)
	pull.Env = env
	if out, err := pull.CombinedOutput(); err != nil {
		t.Fatalf("helm pull: %v\n%s", err, out)
	}
	// helm pull names a chart pulled by digest after the digest.
	files, _ := filepath.Glob(filepath.Join(pulled, "*.tgz"))
	if len(files) != 1 {
		t.Fatalf("helm pull wrote %v, want one archive", files)
	}
	got, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tgz) {
		t.Error("helm pull by digest got other bytes than the bundle's archive")
	}
	tmpl := exec.Command(helm, "template", "bar-controller", "oci://"+res.chartRef, "--plain-http", "--namespace", "bar-controller")
	tmpl.Env = env
	rendered, err := tmpl.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template oci://: %v\n%s", err, rendered)
	}
	if err := pinnedTo(rendered, img.repository+"@"+img.digest.String()); err != nil {
		t.Errorf("helm template of the chart in the registry: %v", err)
	}
}

// checkChartManifest: what is in the registry at ref is helm push's
// layout of tgz, with Artifact Hub's annotations.
func checkChartManifest(t *testing.T, ref string, tgz []byte, created time.Time) {
	t.Helper()
	r, err := remote.Image(mustTag(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" || len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" {
		t.Fatalf("the manifest is not a Helm chart's: config %s, layers %+v", m.Config.MediaType, m.Layers)
	}
	layers, err := r.Layers()
	if err != nil {
		t.Fatal(err)
	}
	blob, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(blob); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), tgz) {
		t.Error("the chart layer is not the bundle's archive")
	}
	raw, err := r.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var config struct{ Name, Version, AppVersion string }
	if err := json.Unmarshal(raw, &config); err != nil || config.Name != "bar-controller" || config.Version != "1.2.3" || config.AppVersion != "v1.2.3" {
		t.Errorf("the config is %s (%v), want Chart.yaml as JSON", raw, err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":   "bar-controller",
		"org.opencontainers.image.version": "1.2.3",
		"org.opencontainers.image.created": created.Format(time.RFC3339),
		"org.opencontainers.image.source":  "https://github.com/barcontroller/bar-controller",
		"artifacthub.io/prerelease":        "false",
	} {
		if m.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], want)
		}
	}
	var images []artifactHubImage
	if err := yaml.Unmarshal([]byte(m.Annotations["artifacthub.io/images"]), &images); err != nil || len(images) != 1 ||
		!strings.Contains(images[0].Image, ":v1.2.3@sha256:") || !slices.Equal(images[0].Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("artifacthub.io/images: %q (%v), want the release's image by tag and digest, with both platforms", m.Annotations["artifacthub.io/images"], err)
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
