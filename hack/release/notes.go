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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// previousTag is the newest release tag (by version) the commit contains,
// other than the one being released: what the notes count changes from.
// By version rather than by date: a tag made later on an older commit (a
// patch release of an older line) is not the previous release of this
// one's line. Empty when there is none.
func previousTag(ctx context.Context, root, commit, version string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "tag", "--list", "--merged", commit, "--sort=-v:refname").Output()
	if err != nil {
		return "", fmt.Errorf("git tag --merged %s: %w", commit, err)
	}
	for tag := range strings.FieldsSeq(string(out)) {
		if tag != version && versionPattern.MatchString(tag) {
			return tag, nil
		}
	}
	return "", nil
}

// writeNotes writes RELEASE_NOTES.md: what the release is (commit, image by
// digest, one digest per platform), how to install and verify it, and the
// subjects of the commits since the previous tag, all of them when there
// is no tag yet. Only git's record goes in, no clock: the notes are
// reproducible like the rest.
func writeNotes(ctx context.Context, c config, res *result) error {
	prev, err := previousTag(ctx, c.root, res.commit, c.version)
	if err != nil {
		return err
	}
	rev := res.commit
	if prev != "" {
		rev = prev + ".." + res.commit
	}
	// Full hashes, shortened here: git's %h grows with the objects a
	// clone happens to hold and with core.abbrev, and the notes must be
	// the same in every clone.
	out, err := exec.CommandContext(ctx, "git", "-C", c.root, "log", "--no-merges", "--format=%H %s", rev).Output()
	if err != nil {
		return fmt.Errorf("git log %s: %w", rev, err)
	}
	var log bytes.Buffer
	changes := 0
	for line := range strings.Lines(string(out)) {
		fmt.Fprintf(&log, "- %s %s", line[:12], line[41:])
		changes++
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "# bar-controller %s\n\n", c.version)
	fmt.Fprintf(&b, "Commit %s (%s), built with %s.\n\n", res.commit, res.created.Format(time.RFC3339), res.goVersion)
	fmt.Fprintf(&b, "## Image\n\n    %s\n\n| platform | image |\n| --- | --- |\n", res.ref)
	for _, p := range c.platforms {
		fmt.Fprintf(&b, "| %s | %s |\n", p, res.images[p])
	}
	b.WriteString("\n## Install\n\n")
	b.WriteString("    kubectl apply --server-side -f install.yaml\n")
	b.WriteString("    kubectl -n bar-controller rollout status deployment/bar-controller\n\n")
	b.WriteString("`install.yaml` is the CRD and the controller (`artifacts/`). `install-namespaced.yaml` ")
	b.WriteString("confines the controller to one namespace, `bar-apps`, and holds no CRD and no access to it; ")
	b.WriteString("the cluster's admin applies `install-conversion-webhook.yaml` once first, the CRD, its admission ")
	b.WriteString("policies and its conversion webhook in `bar-controller` (`artifacts/conversion-webhook`):\n\n")
	b.WriteString("    kubectl apply --server-side -f install-conversion-webhook.yaml   # once per cluster\n")
	b.WriteString("    kubectl apply --server-side -f install-namespaced.yaml           # per namespace\n\n")
	b.WriteString("`install-sharded.yaml` is `install.yaml` with every replica active: 3 replicas share the Bars in 6 shards, ")
	b.WriteString("each caching and syncing its own (`docs/sharding.md`: when to shard, and the API server's ShardedListAndWatch gate); ")
	b.WriteString("apply it in place of `install.yaml`:\n\n")
	b.WriteString("    kubectl apply --server-side -f install-sharded.yaml\n\n")
	b.WriteString("Or with Helm, into a namespace labelled for Pod Security as `install.yaml` labels its own:\n\n")
	b.WriteString("    kubectl create namespace bar-controller\n")
	b.WriteString("    kubectl label namespace bar-controller pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted\n")
	fmt.Fprintf(&b, "    helm install bar-controller %s --namespace bar-controller\n\n", res.chart)
	fmt.Fprintf(&b, "`%s` runs the same image by digest; `helm upgrade` upgrades the CRD too, and `helm uninstall` keeps it and every Bar (`charts/bar-controller/README.md`).\n\n", res.chart)
	if res.chartRef != "" {
		fmt.Fprintf(&b, "The same chart is in the registry, pushed as `helm push` would (tag `%s`); by digest, with Helm 3.18 or later:\n\n", res.chartTag.TagStr())
		fmt.Fprintf(&b, "    helm install bar-controller oci://%s --namespace bar-controller\n\n", res.chartRef)
	}
	b.WriteString("`monitoring.yaml` is the alerts (each linking to this release's runbook), the ServiceMonitor, ")
	b.WriteString("Prometheus's discovery grant and the Grafana dashboard (`artifacts/monitoring`), for a cluster with the ")
	b.WriteString("Prometheus Operator's CRDs; `rollback-conversion-only.yaml` serves conversion without the controller, ")
	b.WriteString("for rolling back to a release without the webhook (`docs/upgrade.md`, \"Rolling back\"):\n\n")
	b.WriteString("    kubectl apply --server-side -f monitoring.yaml\n")
	b.WriteString("    kubectl apply --server-side -f rollback-conversion-only.yaml\n\n")
	b.WriteString("## Verify\n\n")
	if c.cosignKey != "" {
		// One command per artifact, each printed as a user types it:
		// TestReleaseVerifies runs these lines, as they are, against a
		// release in a registry.
		b.WriteString("Each artifact is signed with cosign (v2), with no transparency log entry. With the publisher's public key as `cosign.pub`, ")
		b.WriteString("each command below verifies one artifact, and fails unless that key made its signature.\n\n")
		fmt.Fprintf(&b, "`%s`, then every file by it:\n\n    %s\n    sha256sum -c %s\n\n", sumsFile, verifyBlobCommand(sumsFile), sumsFile)
		fmt.Fprintf(&b, "The image, the index `install.yaml` and the chart run, signed as %s:\n\n    %s\n\n", c.version, verifyCommand(c.version, c.registry+"@"+res.index.String()))
		fmt.Fprintf(&b, "The same command with `:%s` in place of the digest checks the tag: it fails on an index signed for any other version.\n\n", c.version)
		b.WriteString("The SBOM of each platform's image (the table above), a signed attestation on that image, which the command prints:\n\n")
		for _, p := range c.platforms {
			fmt.Fprintf(&b, "    %s\n", verifyAttestationCommand(sbomPredicate, c.registry+"@"+res.images[p].String()))
		}
		fmt.Fprintf(&b, "\nThe build's SLSA provenance (the commit, the Go toolchain, the build flags, every module linked), a signed attestation on the index, which the command prints:\n\n    %s\n\n",
			verifyAttestationCommand(provenancePredicate, c.registry+"@"+res.index.String()))
		fmt.Fprintf(&b, "The Helm chart, the file `helm install` takes:\n\n    %s\n\n", verifyBlobCommand(res.chart))
		if res.chartRef != "" {
			fmt.Fprintf(&b, "The chart in the registry, signed as %s:\n\n    %s\n\n", c.version, verifyCommand(c.version, res.chartRef))
		}
	} else {
		fmt.Fprintf(&b, "    sha256sum -c %s\n\n", sumsFile)
	}
	fmt.Fprintf(&b, "The image's digest in a registry (`crane digest %s:%s`) must be `%s`; ", c.repo, c.version, res.index)
	b.WriteString("each `bar-controller-linux-*.spdx.json` is the SPDX SBOM of the binary of that name, ")
	b.WriteString("the one its platform's image holds")
	if c.registry != "" {
		fmt.Fprintf(&b, "; in the registry each is also attached to its image as an OCI artifact of type `%s` (`oras discover %s@<image digest>`)", sbomMediaType, c.registry)
	}
	b.WriteString(".\n\n")
	if c.registry != "" {
		b.WriteString("That artifact is not signed: it is there to be found through the registry's referrers API, by tools that look for SBOMs there. ")
		if c.cosignKey != "" {
			b.WriteString("The signed SBOM is the attestation above. ")
		}
		b.WriteString("Its blob is the bundle's file, byte for byte, under the same name (`oras pull` writes it so), so `sha256sum -c --ignore-missing SHA256SUMS` checks a copy taken from the registry.\n\n")
	}
	if prev != "" {
		fmt.Fprintf(&b, "## Changes since %s (%d commits)\n\n", prev, changes)
	} else {
		fmt.Fprintf(&b, "## Changes (all %d commits: there is no earlier release tag)\n\n", changes)
	}
	b.Write(log.Bytes())
	return os.WriteFile(filepath.Join(c.out, "RELEASE_NOTES.md"), b.Bytes(), 0o644)
}

// writeSums writes SHA256SUMS over the bundle's files, in sha256sum's own
// format, so that sha256sum -c checks a download. The OCI layout is not
// listed: it is content-addressed already, and image.txt names its digest.
// Nor are the signatures, made after it (seal): a signature differs at
// each signing, and SHA256SUMS stays a function of the commit.
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == sumsFile {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), e.Name())
	}
	return os.WriteFile(filepath.Join(dir, sumsFile), b.Bytes(), 0o644)
}
