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
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	provenancev1 "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestReleaseVerifies makes a signed release of HEAD for linux/amd64 into
// a registry on loopback, as make release REGISTRY=... COSIGN_KEY=...
// does, and then runs each command of its release notes' Verify section,
// as written there, in the bundle, with the cosign make test builds first
// on $PATH: every command passes with the release's public key as
// cosign.pub; every cosign command fails with another key's; the image's
// fails on an older release's index signed with the same key; the chart's
// and the checksums' fail once the chart has changed by a byte. The notes
// must give one command for each artifact: the checksums and their
// signature, the image, each platform's SBOM attestation, the provenance
// attestation, the chart's file and the chart in the registry. The
// registry records the manifests pushed to
// it: the version's tag comes last, after every signature and
// attestation.
func TestReleaseVerifies(t *testing.T) {
	localcluster.SkipWithoutBinaries(t)
	cosign := cosignBinary(t)
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	reg := startRecordingRegistry(t)
	keys := cosignKeys(t, cosign, "release", "other")
	t.Setenv("COSIGN_PASSWORD", "")
	c := config{
		root:      root,
		commit:    strings.TrimSpace(string(head)),
		version:   "v0.0.0-test.2",
		registry:  reg.repo,
		out:       filepath.Join(t.TempDir(), "release"),
		kubectl:   filepath.Join(os.Getenv(localcluster.BinDirEnv), "kubectl"),
		cosign:    cosign,
		cosignKey: filepath.Join(keys["release"], "cosign.key"),
		platforms: []string{"linux/amd64"},
	}
	start := time.Now()
	res, err := run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the signed release took %s", time.Since(start).Round(time.Millisecond))

	checkTagIsLast(t, reg.manifestPuts(), c, res)

	notes, err := os.ReadFile(filepath.Join(c.out, "RELEASE_NOTES.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := verifyCommands(t, notes, c, res)
	usePublicKey(t, keys["release"], c.out)
	env := offlineCosignEnv(t, cosign)
	start = time.Now()
	printed := map[string][]byte{}
	for _, cmd := range cmds {
		out, err := runCommand(t, c.out, env, cmd.line)
		if err != nil {
			t.Errorf("the %s's command fails with the release's key: %v\n%s", cmd.artifact, err, out)
		}
		printed[cmd.artifact] = out
	}
	t.Logf("%d verify commands in %s", len(cmds), time.Since(start).Round(time.Millisecond))
	// What the attestations' commands print is what they vouch for: each
	// SBOM file of the bundle, on its image; the provenance, on the index.
	for _, p := range c.platforms {
		sbom, err := os.ReadFile(filepath.Join(c.out, "bar-controller-"+strings.ReplaceAll(p, "/", "-")+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		checkAttestation(t, printed["SBOM of "+p], "https://spdx.dev/Document", res.images[p], sbom)
	}
	checkAttestation(t, printed["provenance"], "https://slsa.dev/provenance/v1", res.index, res.provenance)
	checkOlderReleaseFails(t, c, res, cmds, c.out, env)
	checkSBOMReferrers(t, notes, c, res)

	// With another key every signature check must fail: a command that
	// passed without checking the key would pass here too.
	usePublicKey(t, keys["other"], c.out)
	for _, cmd := range cmds {
		if !strings.HasPrefix(cmd.line, "cosign ") {
			continue
		}
		if out, err := runCommand(t, c.out, env, cmd.line); err == nil {
			t.Errorf("the %s's command passes with another key:\n%s", cmd.artifact, out)
		}
	}

	// A chart changed after signing: its signature and the checksums
	// both refuse it.
	usePublicKey(t, keys["release"], c.out)
	chart := filepath.Join(c.out, chartFile(c.version))
	f, err := os.OpenFile(chart, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, cmd := range cmds {
		if cmd.artifact != "chart" && cmd.artifact != "checksums" {
			continue
		}
		if out, err := runCommand(t, c.out, env, cmd.line); err == nil {
			t.Errorf("the %s's command passes with the chart changed:\n%s", cmd.artifact, out)
		}
	}
}

// verifyCmd is one command of the release notes' Verify section, and
// the artifact it verifies.
type verifyCmd struct {
	artifact string
	line     string
}

// verifyCommands reads the commands of the notes' Verify section (its
// indented lines) and names the artifact each verifies; it fails the test
// unless there is exactly one for each of the release's artifacts.
func verifyCommands(t *testing.T, notes []byte, c config, res *result) []verifyCmd {
	t.Helper()
	_, section, ok := strings.Cut(string(notes), "\n## Verify\n")
	if !ok {
		t.Fatalf("the release notes have no Verify section:\n%s", notes)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	index := c.registry + "@" + res.index.String()
	want := []string{"checksums", "SHA256SUMS", "image", "provenance", "chart", "chart in the registry"}
	for _, p := range c.platforms {
		want = append(want, "SBOM of "+p)
	}
	var cmds []verifyCmd
	seen := map[string]bool{}
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "    ") {
			continue
		}
		line = strings.TrimSpace(line)
		f := strings.Fields(line)
		last := f[len(f)-1]
		artifact := ""
		switch {
		case f[0] == "sha256sum" && last == "SHA256SUMS":
			artifact = "checksums"
		case f[0] != "cosign" || len(f) < 3:
		case f[1] == "verify" && last == index:
			artifact = "image"
		case f[1] == "verify" && last == res.chartRef:
			artifact = "chart in the registry"
		case f[1] == "verify-blob" && last == "SHA256SUMS":
			artifact = "SHA256SUMS"
		case f[1] == "verify-blob" && last == chartFile(c.version):
			artifact = "chart"
		case f[1] == "verify-attestation" && slices.Contains(f, "slsaprovenance1") && last == index:
			artifact = "provenance"
		case f[1] == "verify-attestation" && slices.Contains(f, "spdxjson"):
			for _, p := range c.platforms {
				if last == c.registry+"@"+res.images[p].String() {
					artifact = "SBOM of " + p
				}
			}
		}
		switch {
		case artifact == "":
			t.Errorf("the release notes' Verify section has a command for no artifact of the release: %s", line)
		case seen[artifact]:
			t.Errorf("the release notes give two commands for the %s", artifact)
		case strings.HasPrefix(line, "cosign ") && !strings.Contains(line, " --key cosign.pub "):
			t.Errorf("the %s's command does not check the publisher's key, cosign.pub: %s", artifact, line)
		}
		seen[artifact] = true
		cmds = append(cmds, verifyCmd{artifact: artifact, line: line})
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("the release notes give no command to verify the %s", w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return cmds
}

// runCommand runs one line of the release notes as a user would, with bash
// in the bundle's directory.
func runCommand(t *testing.T, dir string, env []string, line string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail", "-c", line)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), fmt.Errorf("%s: %w", line, err)
	}
	return out, nil
}

// offlineCosignEnv is the environment the notes' commands run in: the
// cosign under test first on $PATH, as `cosign`; a HOME of their own (no
// Docker credentials, no Sigstore cache of the machine's); and TUF_MIRROR
// on a loopback server that has nothing. Verifying with a key ignores
// Sigstore's trusted root, but cosign fetches it from the network first
// unless told of another mirror; with one it reads only its (empty) local
// cache, warns, and verifies with the key. The commands stay exactly as
// the notes give them.
func offlineCosignEnv(t *testing.T, cosign string) []string {
	t.Helper()
	mirror := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(mirror.Close)
	return append(os.Environ(),
		"PATH="+filepath.Dir(cosign)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+t.TempDir(),
		"TUF_MIRROR="+mirror.URL,
		"COSIGN_EXPERIMENTAL=",
	)
}

// usePublicKey puts the public half of the key pair in keyDir into the
// bundle as cosign.pub, where the notes' commands read it.
func usePublicKey(t *testing.T, keyDir, bundle string) {
	t.Helper()
	pub, err := os.ReadFile(filepath.Join(keyDir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "cosign.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkAttestation reads what cosign verify-attestation printed, one DSSE
// envelope per line, and requires one in-toto statement of predicateType
// about subject whose predicate is want, as JSON (cosign re-encodes it).
// A provenance must also be what the in-toto framework's types take as
// SLSA provenance v1.
func checkAttestation(t *testing.T, printed []byte, predicateType string, subject v1.Hash, want []byte) {
	t.Helper()
	var statements []json.RawMessage
	for line := range strings.Lines(string(printed)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var envelope struct {
			PayloadType string `json:"payloadType"`
			Payload     []byte `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &envelope); err != nil || envelope.PayloadType != "application/vnd.in-toto+json" {
			t.Fatalf("cosign verify-attestation printed %q (%v), not an in-toto envelope", line, err)
		}
		statements = append(statements, envelope.Payload)
	}
	if len(statements) != 1 {
		t.Fatalf("%d attestations of %s verified, want one:\n%s", len(statements), subject, printed)
	}
	var st intoto.Statement
	if err := protojson.Unmarshal(statements[0], &st); err != nil {
		t.Fatalf("the attestation of %s is no in-toto statement: %v", subject, err)
	}
	if err := st.Validate(); err != nil {
		t.Errorf("the attestation of %s: %v", subject, err)
	}
	if st.GetPredicateType() != predicateType || len(st.GetSubject()) != 1 || st.GetSubject()[0].GetDigest()["sha256"] != subject.Hex {
		t.Errorf("the attestation is of %s about %v, want of %s about %s", st.GetPredicateType(), st.GetSubject(), predicateType, subject)
	}
	got, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	var gotJSON, wantJSON any
	if err := json.Unmarshal(got, &gotJSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &wantJSON); err != nil {
		t.Fatal(err)
	}
	if predicateType != "https://slsa.dev/provenance/v1" {
		if !reflect.DeepEqual(gotJSON, wantJSON) {
			t.Errorf("the attested %s is not the bundle's:\n%s", predicateType, got)
		}
		return
	}
	var attested, made provenancev1.Provenance
	if err := protojson.Unmarshal(got, &attested); err != nil {
		t.Fatalf("the attested provenance: %v\n%s", err, got)
	}
	if err := attested.Validate(); err != nil {
		t.Errorf("the attested provenance: %v", err)
	}
	if err := protojson.Unmarshal(want, &made); err != nil {
		t.Fatal(err)
	}
	// cosign adds an empty metadata object on its way; nothing else may
	// differ.
	attested.GetRunDetails().Metadata, made.GetRunDetails().Metadata = nil, nil
	if !proto.Equal(&attested, &made) {
		t.Errorf("the attested provenance is not the release's:\n%s\nwant\n%s", got, want)
	}
}
