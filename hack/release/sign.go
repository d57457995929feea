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
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The cosign predicate types of the attestations, as cosign attest and
// cosign verify-attestation name them: SPDX JSON
// (https://spdx.dev/Document) and SLSA provenance v1
// (https://slsa.dev/provenance/v1).
const (
	sbomPredicate       = "spdxjson"
	provenancePredicate = "slsaprovenance1"
)

// sumsFile is the checksums of the bundle (notes.go writes it).
const sumsFile = "SHA256SUMS"

// signatureFile is where cosign sign-blob leaves a file's signature: beside
// it, in the bundle.
func signatureFile(file string) string { return file + ".sig" }

// seal finishes a release in c.registry, where publish pushed the index by
// digest and nothing else: it attaches each platform's SBOM to its image
// (attach.go) and pushes the chart by digest (ocichart.go); with a key it
// signs the index and the chart there, attests each image's SBOM and the
// build's provenance, and signs the chart's file and SHA256SUMS beside
// them in the bundle; and only then tags the chart, and the index last,
// with the version. Any
// failure before the tag leaves the version unpublished (or where an
// earlier run left it), never published without its signatures: a user
// who pulls the version by its tag gets an index whose signature and
// attestations are already there. The bundle's files, the notes and
// SHA256SUMS among them, are written before, so that their signatures
// are of what ships.
func seal(ctx context.Context, c config, idx v1.ImageIndex, binaries []binary, res *result) error {
	if err := attachSBOMs(ctx, c, idx, binaries, res.created); err != nil {
		return err
	}
	if res.chartArtifact != nil {
		if err := pushChart(ctx, res); err != nil {
			return err
		}
	}
	if c.cosignKey != "" {
		if err := signRelease(ctx, c, binaries, res); err != nil {
			return err
		}
	}
	if res.chartArtifact != nil {
		// Before the index's: the version is published when its image
		// is tagged, and its chart is there by then.
		digest, err := res.chartArtifact.Digest()
		if err != nil {
			return err
		}
		if err := tag(ctx, res.chartTag, c.version, res.chartArtifact, digest); err != nil {
			return err
		}
	}
	t, err := versionTag(c)
	if err != nil {
		return err
	}
	return tag(ctx, t, c.version, idx, res.index)
}

// signRelease makes every signature of a release with c.cosignKey, one
// per artifact, each checked by one command of the release notes
// (verifyCommands).
func signRelease(ctx context.Context, c config, binaries []binary, res *result) error {
	index := c.registry + "@" + res.index.String()
	if err := signIndex(ctx, c, index); err != nil {
		return err
	}
	// Each SBOM is attested on its own platform's image, not the index:
	// the arm64 SBOM describes the arm64 image's binary only.
	for _, b := range binaries {
		img := c.registry + "@" + res.images[b.platform].String()
		if err := runCosign(ctx, c, "attest", "--type", sbomPredicate, "--predicate", b.path+".spdx.json", img); err != nil {
			return err
		}
	}
	// The provenance is not a file of the bundle: a predicate without its
	// statement says nothing of what it is about; the registry's
	// attestation, whose subject is the index, is the provenance users
	// read (cosign verify-attestation prints it).
	tmp, err := os.MkdirTemp("", "bar-controller-provenance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	predicate := filepath.Join(tmp, "provenance.json")
	if err := os.WriteFile(predicate, res.provenance, 0o600); err != nil {
		return err
	}
	if err := runCosign(ctx, c, "attest", "--type", provenancePredicate, "--predicate", predicate, index); err != nil {
		return err
	}
	if res.chartRef != "" {
		// The chart in the registry, as helm install oci:// takes it,
		// signed as the index is (with the version); the file in the
		// bundle is signed below.
		if err := signIndex(ctx, c, res.chartRef); err != nil {
			return err
		}
	}
	// Blobs last, SHA256SUMS the very last: its signature vouches for
	// every file it lists. The chart's file is signed too (helm install
	// takes the .tgz): one cosign verify-blob checks exactly that file,
	// with no registry; the copy in the registry is signed above, for
	// those who install from there.
	for _, file := range []string{res.chart, sumsFile} {
		path := filepath.Join(c.out, file)
		if err := runCosign(ctx, c, "sign-blob", "--output-signature", signatureFile(path), path); err != nil {
			return err
		}
		// cosign writes the signature for its owner alone, as if it were
		// a secret; it is published beside the file, as the file is.
		if err := os.Chmod(signatureFile(path), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// signIndex signs the index ref names with the version in the signed
// payload (cosign sign -a version=vX.Y.Z), and verifyCommand checks it: a
// signature says which release the key signed, not only that it signed,
// so an older release's index, under a tag moved back to it or a digest
// passed off as this version's, fails the new version's command. (cosign
// attest takes no annotations; the attestations name the version in their
// predicates, the provenance's externalParameters and each SBOM.)
func signIndex(ctx context.Context, c config, ref string) error {
	return runCosign(ctx, c, "sign", "-a", "version="+c.version, ref)
}

// runCosign runs one cosign signing command (sign, attest, sign-blob) with
// c.cosignKey, which is any key reference cosign takes (a key file,
// env://VAR, a KMS URI), so that a release workflow signs with its own
// identity; a key file's password comes from $COSIGN_PASSWORD, as cosign
// reads it. Signatures and attestations of images are stored in the
// registry beside them (cosign's sha256-<digest>.sig and .att tags), a
// blob's signature in the file signatureFile names.
//
// Nothing is uploaded to a transparency log: this tool runs where only the
// registry can be reached, and the key, not a log entry, is what a user
// checks (every verify command says --insecure-ignore-tlog=true). A
// workflow that wants log entries can sign again with cosign itself; no
// digest changes.
func runCosign(ctx context.Context, c config, command string, args ...string) error {
	args = append([]string{command, "--yes", "--key", c.cosignKey, "--tlog-upload=false"}, args...)
	cmd := exec.CommandContext(ctx, c.cosign, args...)
	// Never ask on a terminal: a missing password must fail the release,
	// not wait for someone to type it.
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), "COSIGN_YES=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// The commands the release notes give users, one per artifact, each with
// the publisher's public key as cosign.pub; TestReleaseVerifies runs them
// as the notes print them.

// verifyCommand verifies the index's signature, and that it was signed
// as version (signIndex).
func verifyCommand(version, ref string) string {
	return "cosign verify --key cosign.pub --insecure-ignore-tlog=true -a version=" + version + " " + ref
}

// verifyAttestationCommand verifies the attestation of predicateType on
// ref, and prints it.
func verifyAttestationCommand(predicateType, ref string) string {
	return "cosign verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type " + predicateType + " " + ref
}

// verifyBlobCommand verifies a file of the bundle by the signature beside
// it.
func verifyBlobCommand(file string) string {
	return "cosign verify-blob --key cosign.pub --insecure-ignore-tlog=true --signature " + signatureFile(file) + " " + file
}
