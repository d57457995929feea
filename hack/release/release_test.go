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
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	spdxjson "github.com/spdx/tools-golang/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestReleaseIsReproducible runs the whole release twice from the same
// commit, into two bundles, and requires the same digests and the same
// bytes: the index, each platform's image, the provenance, and every file
// SHA256SUMS lists. Each run builds from its own git archive in its own directory, so
// that a path or a file outside the commit that reached a binary would
// show. The Go build cache may serve both runs' compiles (with -trimpath
// it does not key them by directory); both links are done anew.
//
// With empty Go caches the first run is nearly all of this package's
// time, and that time is the release's own work: the controller's 800
// packages compiled for linux/amd64 and again for linux/arm64, with
// -trimpath and CGO_ENABLED=0, flags no build before it in make test
// uses but the tools', which share little more than amd64's standard
// library (client-go's informers, listers and clients for every API
// group are over 40 % of the rest). That is about 420 CPU-seconds per
// platform; on a busy 2-core machine the package outlasts go test's
// default 10-minute -timeout (make test passes 30m). The second run
// finds every compile in the cache and costs about 30 CPU-seconds: two
// links, kubectl, and the layers' gzip, slow under -race.
//
// It needs kubectl (for kubectl kustomize): make test provides the
// Kubernetes binaries' directory; without it the test is skipped, as the
// real-cluster tests are.
func TestReleaseIsReproducible(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// HEAD once: another commit landing between the runs must not make
	// them differ.
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{
		root:      root,
		commit:    strings.TrimSpace(string(head)),
		version:   "v0.0.0-test.1",
		kubectl:   filepath.Join(os.Getenv(localcluster.BinDirEnv), "kubectl"),
		platforms: []string{"linux/amd64", "linux/arm64"},
	}
	var results []*result
	var dirs []string
	for i := range 2 {
		c := cfg
		c.out = filepath.Join(t.TempDir(), "release")
		start := time.Now()
		res, err := run(t.Context(), c)
		if err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
		t.Logf("release %d: index %s in %s", i+1, res.index, time.Since(start).Round(time.Millisecond))
		results = append(results, res)
		dirs = append(dirs, c.out)
	}

	a, b := results[0], results[1]
	if a.index != b.index {
		t.Errorf("index digests differ: %s, %s", a.index, b.index)
	}
	for _, p := range cfg.platforms {
		if a.images[p] != b.images[p] {
			t.Errorf("%s image digests differ: %s, %s", p, a.images[p], b.images[p])
		}
	}
	if !bytes.Equal(a.provenance, b.provenance) {
		t.Errorf("the provenances differ:\n%s\n%s", a.provenance, b.provenance)
	}
	sums := [2][]byte{}
	for i, dir := range dirs {
		if sums[i], err = os.ReadFile(filepath.Join(dir, "SHA256SUMS")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Errorf("the bundles differ:\n%s\n%s", sums[0], sums[1])
	}
	for _, f := range []string{"install.yaml", "install-namespaced.yaml", "install-conversion-webhook.yaml", "install-sharded.yaml", "RELEASE_NOTES.md", "image.txt",
		"bar-controller-linux-amd64", "bar-controller-linux-arm64",
		"bar-controller-linux-amd64.spdx.json", "bar-controller-linux-arm64.spdx.json", chartFile(cfg.version)} {
		if !bytes.Contains(sums[0], []byte("  "+f+"\n")) {
			t.Errorf("SHA256SUMS does not list %s:\n%s", f, sums[0])
		}
	}

	checkBundle(t, dirs[0], cfg, a)
}

// checkBundle checks what one release holds beyond its reproducibility:
// the layout names the index, the binaries are what they claim, the
// manifests run the index by digest, the SBOMs parse.
func checkBundle(t *testing.T, dir string, cfg config, res *result) {
	t.Helper()
	top, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != res.index {
		t.Errorf("the layout lists %+v, want the index %s", m.Manifests, res.index)
	}

	// The -X names are right: the binary says what it was stamped with.
	out, err := exec.Command(filepath.Join(dir, "bar-controller-linux-amd64"), "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if want := "bar-controller " + cfg.version + "\ncommit: " + res.commit + "\n"; !strings.HasPrefix(string(out), want) {
		t.Errorf("--version printed\n%s\nwant it to start with\n%s", out, want)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		f, err := elf.Open(filepath.Join(dir, "bar-controller-linux-"+arch))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != machine {
			t.Errorf("the %s binary is for %s", arch, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the %s binary asks for a dynamic loader; the image has none", arch)
			}
		}
		f.Close()
	}

	for _, file := range []string{"install.yaml", "install-namespaced.yaml", "install-conversion-webhook.yaml", "install-sharded.yaml", "rollback-conversion-only.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := pinnedTo(data, "bar-controller@"+res.index.String()); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		wantCRD := file == "install.yaml" || file == "install-conversion-webhook.yaml" || file == "install-sharded.yaml"
		if hasCRD := bytes.Contains(data, []byte("\nkind: CustomResourceDefinition\n")); hasCRD != wantCRD {
			t.Errorf("%s holds the CRD: %v", file, hasCRD)
		}
		if file != "rollback-conversion-only.yaml" { // a Deployment, beside an install of its own
			checkUninstallSelector(t, file, data)
		}
	}
	checkMonitoring(t, dir, cfg.version)
	for _, arch := range []string{"amd64", "arm64"} {
		f, err := os.Open(filepath.Join(dir, "bar-controller-linux-"+arch+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := spdxjson.Read(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s SBOM: %v", arch, err)
		}
		if !strings.Contains(doc.Packages[0].PackageComment, "GOARCH="+arch) {
			t.Errorf("the %s SBOM describes %q", arch, doc.Packages[0].PackageComment)
		}
	}
	// The chart runs what install.yaml runs (chart_test.go checks the
	// rest of the packaging, and renders it with helm).
	tgz, err := os.ReadFile(filepath.Join(dir, chartFile(cfg.version)))
	if err != nil {
		t.Fatal(err)
	}
	checkChartArchive(t, tgz, res.created, chartVersion(cfg.version), cfg.version,
		chartImage{repository: "bar-controller", tag: cfg.version, digest: res.index})

	notes, err := os.ReadFile(filepath.Join(dir, "RELEASE_NOTES.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{res.ref, "- " + res.commit[:12] + " ", "helm install bar-controller " + chartFile(cfg.version) + " "} {
		if !bytes.Contains(notes, []byte(want)) {
			t.Errorf("the release notes lack %q:\n%s", want, notes)
		}
	}
}

// uninstallSelector is the label the README's uninstall deletes by:
// kubectl delete -f install.yaml -l app.kubernetes.io/name=bar-controller.
const uninstallSelector = "app.kubernetes.io/name"

// checkUninstallSelector: every object of a manifest carries the label
// but the CRD, so that deleting by it removes the install and keeps the
// CRD, and with it every Bar and the Deployments they own.
func checkUninstallSelector(t *testing.T, file string, data []byte) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	n := 0
	for {
		var obj struct {
			Kind     string
			Metadata struct {
				Name   string
				Labels map[string]string
			}
		}
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj.Kind == "" {
			continue
		}
		n++
		labelled := obj.Metadata.Labels[uninstallSelector] == "bar-controller"
		if labelled == (obj.Kind == "CustomResourceDefinition") {
			t.Errorf("%s: %s %s has %s=bar-controller: %v; want it on everything but the CRD", file, obj.Kind, obj.Metadata.Name, uninstallSelector, labelled)
		}
	}
	if n < 10 {
		t.Errorf("%s: %d objects decoded", file, n)
	}
}
