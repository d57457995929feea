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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// manifest is one rendered install: a kustomization in artifacts/, files
// of artifacts/ rendered with it, and the file it becomes.
type manifest struct {
	base, file, apply string
	// with are files of artifacts/ that are no kustomization's
	// (artifacts/kustomization.yaml is the only one that can name the CRD,
	// being the only one above it), copied into the overlay so that
	// kustomize's load restrictions allow them.
	with []string
	// monitoring: the Prometheus Operator's objects, which run no image;
	// their alerts' runbook links name the release's tag (runbookRef).
	monitoring bool
}

// manifests are what a release ships to apply. install.yaml is
// artifacts/, the CRD and the controller (what kubectl apply -k artifacts/
// applies); install-namespaced.yaml is the namespaced overlay, which
// leaves out the cluster-wide CRD by design (artifacts/namespaced says
// why); install-conversion-webhook.yaml is what a cluster admin applies
// once for namespaced installs: the CRD, its admission policies, and the
// conversion webhook that keeps its caBundle (artifacts/conversion-webhook);
// install-sharded.yaml is install.yaml with every replica active
// (artifacts/sharded: 3 replicas, 6 shards), the CRD and its policies
// added as install.yaml has them, which the overlay cannot name.
var manifests = []manifest{
	{base: "", file: "install.yaml", apply: "kubectl apply --server-side -f install.yaml"},
	{base: "conversion-webhook", file: "install-conversion-webhook.yaml",
		apply: "kubectl apply --server-side -f install-conversion-webhook.yaml  # once per cluster, for namespaced installs",
		with:  []string{"crd/barcontroller.dev_bars.yaml", "admission/bars.barcontroller.dev.yaml", "admission/crd-changes.barcontroller.dev.yaml"}},
	{base: "namespaced", file: "install-namespaced.yaml", apply: "kubectl apply --server-side -f install-namespaced.yaml  # after install-conversion-webhook.yaml"},
	{base: "sharded", file: "install-sharded.yaml",
		apply: "kubectl apply --server-side -f install-sharded.yaml  # in place of install.yaml: 3 replicas share 6 shards of the Bars (docs/sharding.md)",
		with:  []string{"crd/barcontroller.dev_bars.yaml", "admission/bars.barcontroller.dev.yaml", "admission/crd-changes.barcontroller.dev.yaml"}},
	// What docs/upgrade.md's rollback and docs/runbook.md's alerts apply,
	// so that an operator needs nothing of the repository but the release.
	{base: "conversion-only", file: "rollback-conversion-only.yaml",
		apply: "kubectl apply --server-side -f rollback-conversion-only.yaml  # rolling back to a release without the webhook (docs/upgrade.md)"},
	{base: "monitoring", file: "monitoring.yaml", monitoring: true,
		apply: "kubectl apply --server-side -f monitoring.yaml  # with the Prometheus Operator's CRDs: alerts, scrape, discovery, dashboard"},
}

// describeSuffix is what git describe adds to a tag for a later commit.
var (
	releaseTag     = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)
	describeSuffix = regexp.MustCompile(`-[0-9]+-g[0-9a-f]+$`)
)

// runbookRef is the git ref the alerts' runbook links name: the release's
// tag (vX.Y.Z, vX.Y.Z-rc.N), whose runbook says what that release does, or
// main for any other version (an untagged commit's git describe, dev). The
// chart's prometheusrule.yaml has the same rule for its appVersion.
func runbookRef(version string) string {
	if releaseTag.MatchString(version) && !describeSuffix.MatchString(version) {
		return version
	}
	return "main"
}

// imageLine is an image a rendered manifest runs.
var imageLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*(\S+)\s*$`)

// renderManifests renders each manifest the way the project's tests apply
// artifacts/ (test/node): an overlay whose only change is the image, here
// the repository and the index's digest, rendered by kubectl kustomize, so
// that what a release ships is what the real-cluster tests applied. A
// digest rather than the tag: a tag can be moved, and every node of a
// cluster must run the same bytes as the index that was built, signed and
// described by the SBOM.
func renderManifests(ctx context.Context, kubectl, artifacts, out, repo, version string, digest v1.Hash) error {
	ref := repo + "@" + digest.String()
	for _, m := range manifests {
		overlay, err := os.MkdirTemp("", "release-overlay-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(overlay)
		// kustomize takes a base by a relative path only.
		base, err := filepath.Rel(overlay, filepath.Join(artifacts, m.base))
		if err != nil {
			return err
		}
		// The files first, as kubectl apply -f takes them: the CRD before
		// the policies that name it.
		var resources strings.Builder
		for _, f := range m.with {
			data, err := os.ReadFile(filepath.Join(artifacts, f))
			if err != nil {
				return err
			}
			name := filepath.Base(f)
			if err := os.WriteFile(filepath.Join(overlay, name), data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(&resources, "- %s\n", name)
		}
		fmt.Fprintf(&resources, "- %s", base)
		kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
%s
images:
- name: bar-controller
  newName: %s
  digest: %s
`, resources.String(), repo, digest)
		if m.monitoring {
			kustomization = fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n%s\n", resources.String())
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, kubectl, "kustomize", overlay)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		rendered, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("kubectl kustomize %s: %v: %s", m.base, err, stderr.Bytes())
		}
		if m.monitoring {
			if imageLine.Match(rendered) {
				return fmt.Errorf("%s runs an image", m.file)
			}
			rendered = bytes.ReplaceAll(rendered, []byte(runbookBase+"main/"), []byte(runbookBase+runbookRef(version)+"/"))
		} else if err := pinnedTo(rendered, ref); err != nil {
			return fmt.Errorf("%s: %w", m.file, err)
		}
		header := fmt.Sprintf("# bar-controller, rendered from artifacts/%s; the image by digest.\n#   %s\n---\n", m.base, m.apply)
		if err := os.WriteFile(filepath.Join(out, m.file), append([]byte(header), rendered...), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runbookBase is where artifacts/monitoring's runbook links point, before
// the ref.
const runbookBase = "https://github.com/barcontroller/bar-controller/blob/"

// pinnedTo fails unless every image the manifests run is ref: an image
// left out of the kustomization's images (a new container, an init
// container) would otherwise ship by tag, or as bar-controller:dev, which
// exists nowhere.
func pinnedTo(rendered []byte, ref string) error {
	found := imageLine.FindAllSubmatch(rendered, -1)
	if len(found) == 0 {
		return fmt.Errorf("no image in the rendered manifests")
	}
	for _, m := range found {
		if string(m[1]) != ref {
			return fmt.Errorf("image %s is not the release's %s", m[1], ref)
		}
	}
	return nil
}
