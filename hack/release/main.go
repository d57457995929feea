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

// Command release builds a release of bar-controller from one commit
// (make release), with no Docker engine:
//
//   - the static binary for each platform, built from the commit's files
//     (git archive), never from uncommitted edits in the working tree;
//   - each platform's image (internal/image, as make image-tar builds it)
//     and one OCI image index over them, pushed to --registry or written
//     as an OCI layout under <out>/oci;
//   - install.yaml, install-conversion-webhook.yaml and
//     install-namespaced.yaml, artifacts/, artifacts/conversion-webhook
//     (with the CRD and its policies) and artifacts/namespaced rendered
//     with kubectl kustomize and naming the image by the index's digest;
//     rollback-conversion-only.yaml (artifacts/conversion-only, what
//     docs/upgrade.md's rollback applies) by the same digest; and
//     monitoring.yaml (artifacts/monitoring: alerts linking to the
//     runbook of the release's tag, scrape, discovery, dashboard);
//   - the Helm chart, charts/bar-controller packaged as
//     bar-controller-X.Y.Z.tgz with the release's version and the image by
//     the same digest (chart.go, no helm needed), and with --registry
//     pushed beside the image as helm push would (ocichart.go);
//   - an SPDX SBOM of each binary's modules, attached in the registry to
//     the image holding the binary (attach.go), the SLSA provenance of the
//     build (provenance.go), release notes from the commits since the last
//     tag, and SHA256SUMS over the bundle;
//   - with --cosign-key, a signature of the index, the SBOMs and the
//     provenance as signed attestations in the registry, and signatures of
//     the chart and SHA256SUMS beside them (sign.go); the release notes
//     give the command that verifies each.
//
// In a registry the index is pushed by digest, and tagged with the
// version only once everything else is pushed and signed (seal), so that
// a failure on the way never leaves the version published unsigned.
//
// Everything is a function of the commit: the binaries are built with
// -trimpath and -buildvcs=false, the images and SBOMs are stamped with the
// commit's time, so a rebuild of a commit gives the same digests and the
// same files (release_test.go builds twice and compares). Only the
// signatures differ from one signing to the next, and SHA256SUMS lists
// none of them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// config is one release to build.
type config struct {
	root     string // the repository
	commit   string // what to release; resolved to a full hash by run
	version  string // vX.Y.Z, the image tag and the binary's version
	registry string // host/repo to push to; empty: an OCI layout in out
	// chartRegistry is where the chart is pushed, as <it>/bar-controller;
	// empty: beside registry (chartRepository).
	chartRegistry string
	repo          string // the repository install.yaml names; default registry
	out           string // the bundle's directory; must not exist or be empty
	kubectl       string // renders the manifests (kubectl kustomize)
	// cosign signs the release with cosignKey, when one is given
	// (sign.go).
	cosign, cosignKey string
	// unsigned lets a release be pushed to registry without cosignKey,
	// said on purpose (a test registry).
	unsigned bool
	// platforms are GOOS/GOARCH pairs, in the order the index lists them.
	platforms []string
}

// result is what a release produced, for the summary and the tests.
type result struct {
	commit string
	index  v1.Hash
	ref    string // repo@sha256:..., what install.yaml runs
	chart  string // the chart archive's file name
	// chartArtifact is the chart as an OCI artifact, chartRef where it is
	// pushed by digest (repo@sha256:...) and chartTag its version's tag,
	// with a registry only (ocichart.go).
	chartArtifact v1.Image
	chartRef      string
	chartTag      name.Tag
	images        map[string]v1.Hash // by platform
	created       time.Time          // the commit's
	// goVersion is the toolchain the binaries were built with, as they
	// record it (the go on $PATH, not necessarily the one running this).
	goVersion string
	// provenance is the SLSA provenance predicate of the build, attested
	// on the index when the release is signed (provenance.go).
	provenance []byte
}

// versionPattern is what a release may be called: a semantic version with
// a v, as Go modules and Kubernetes tag theirs, and nothing an image tag
// cannot hold ("+build" metadata is not allowed in a tag).
var versionPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func main() {
	var cfg config
	var platforms string
	flag.StringVar(&cfg.version, "version", "", "the release's version, vX.Y.Z[-pre]")
	flag.StringVar(&cfg.commit, "commit", "HEAD", "the commit to release")
	flag.StringVar(&cfg.registry, "registry", "", "push the image index to this repository (host/repo); empty: write an OCI layout under --out/oci")
	flag.StringVar(&cfg.chartRegistry, "chart-registry", "", "push the chart to <this>/bar-controller (host/path); default: charts/ beside --registry's repository")
	flag.StringVar(&cfg.repo, "repo", "", "the image repository install.yaml names; default --registry, else bar-controller")
	flag.StringVar(&cfg.out, "out", "_output/release", "the directory to write the bundle to (must not exist, or be empty)")
	flag.StringVar(&cfg.kubectl, "kubectl", "kubectl", "the kubectl that renders the manifests (kubectl kustomize)")
	flag.StringVar(&cfg.cosign, "cosign", "cosign", "the cosign that signs the release (with --cosign-key)")
	flag.StringVar(&cfg.cosignKey, "cosign-key", "", "sign the release with this cosign key reference (a key file, env://VAR, a KMS URI; its password in $COSIGN_PASSWORD): the index, the SBOM and provenance attestations in --registry, the chart and SHA256SUMS")
	flag.BoolVar(&cfg.unsigned, "unsigned", false, "push to --registry without --cosign-key: the version is published, tagged, with nothing to verify it by but SHA256SUMS (a test registry)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "the platforms to build, in the order the index lists them")
	flag.Parse()
	cfg.platforms = strings.Split(platforms, ",")
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	cfg.root = root

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := run(ctx, cfg)
	if err != nil {
		fail(err)
	}
	fmt.Printf("release %s of %s (%s), built in %s:\n", cfg.version, res.commit, res.created.Format(time.RFC3339), time.Since(start).Round(time.Second))
	fmt.Printf("  index        %s\n", res.index)
	for _, p := range cfg.platforms {
		fmt.Printf("  %-12s %s\n", p, res.images[p])
	}
	fmt.Printf("  install.yaml and %s run %s\n", res.chart, res.ref)
	if res.chartRef != "" {
		fmt.Printf("  chart        oci://%s\n", res.chartRef)
	}
	fmt.Printf("  bundle in %s\n", cfg.out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}

func (c *config) validate() error {
	if !versionPattern.MatchString(c.version) {
		return fmt.Errorf("--version %q is not vX.Y.Z[-pre] (make release VERSION=v1.2.3)", c.version)
	}
	if len(c.platforms) == 0 || c.platforms[0] == "" {
		return errors.New("no --platforms")
	}
	for _, p := range c.platforms {
		if !strings.HasPrefix(p, "linux/") {
			return fmt.Errorf("platform %q: the image holds a Linux binary only", p)
		}
	}
	if c.chartRegistry != "" && c.registry == "" {
		return errors.New("--chart-registry needs --registry: the chart is pushed with the image")
	}
	if c.cosignKey != "" && c.registry == "" {
		return errors.New("--cosign-key needs --registry: the signature is stored in the registry, beside the image")
	}
	// A missing key (a CI secret not passed on) would otherwise publish
	// and tag the version unsigned, and its notes would offer nothing to
	// verify it by but SHA256SUMS (issue 39, sixth review, m3).
	if c.registry != "" && c.cosignKey == "" && !c.unsigned {
		return errors.New("--registry without --cosign-key would publish the version unsigned: give a key, or --unsigned to mean it")
	}
	if c.repo == "" {
		c.repo = c.registry
	}
	if c.repo == "" {
		c.repo = "bar-controller"
	}
	entries, err := os.ReadDir(c.out)
	if err == nil && len(entries) > 0 {
		// Not removed here: --out may be any directory, and a stale
		// bundle's files would otherwise end up in SHA256SUMS.
		return fmt.Errorf("%s is not empty; remove it first (make release does)", c.out)
	}
	return nil
}

// run builds the release c describes.
func run(ctx context.Context, c config) (*result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	src, err := os.MkdirTemp("", "bar-controller-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	res := &result{images: map[string]v1.Hash{}}
	if res.commit, res.created, err = checkout(ctx, c.root, c.commit, src); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return nil, err
	}

	binaries, err := buildBinaries(ctx, src, c, res.commit)
	if err != nil {
		return nil, err
	}
	var builds []built
	for _, b := range binaries {
		bb, err := readBuilt(b)
		if err != nil {
			return nil, err
		}
		builds = append(builds, bb)
	}
	res.goVersion = builds[0].info.GoVersion
	idx, err := buildIndex(binaries, c, res)
	if err != nil {
		return nil, err
	}
	if c.registry != "" {
		// Before anything is pushed: a version published already with
		// another index fails here, not after its signing.
		t, err := versionTag(c)
		if err != nil {
			return nil, err
		}
		if _, err := checkTag(ctx, t, c.version, res.index); err != nil {
			return nil, err
		}
	}
	if err := publish(ctx, idx, c); err != nil {
		return nil, err
	}
	res.ref = c.repo + "@" + res.index.String()
	if err := os.WriteFile(filepath.Join(c.out, "image.txt"), []byte(res.ref+"\n"), 0o644); err != nil {
		return nil, err
	}

	if err := renderManifests(ctx, c.kubectl, filepath.Join(src, "artifacts"), c.out, c.repo, c.version, res.index); err != nil {
		return nil, err
	}
	if res.chart, err = packageChart(src, c.out, c.version, chartImage{repository: c.repo, tag: c.version, digest: res.index, platforms: c.platforms}, res.created); err != nil {
		return nil, fmt.Errorf("packaging the chart: %w", err)
	}
	if c.registry != "" {
		if err := prepareChartPush(ctx, c, res); err != nil {
			return nil, err
		}
	}
	for _, b := range binaries {
		if err := writeSBOM(b, c.version, res.created); err != nil {
			return nil, err
		}
	}
	if res.provenance, err = provenance(c, res, builds); err != nil {
		return nil, err
	}
	if err := writeNotes(ctx, c, res); err != nil {
		return nil, err
	}
	if err := writeSums(c.out); err != nil {
		return nil, err
	}
	if c.registry != "" {
		if err := seal(ctx, c, idx, binaries, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}
