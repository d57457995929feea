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
	"encoding/base64"
	"encoding/hex"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	provenancev1 "github.com/in-toto/attestation/go/predicates/provenance/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// testProvenance is the provenance of a release whose binaries, one per
// platform of c, were linked as this test binary was: its build
// information is the one at hand.
func testProvenance(t *testing.T, c config, res *result) []byte {
	t.Helper()
	info, ok := debug.ReadBuildInfo()
	if !ok || len(info.Deps) == 0 {
		t.Fatal("the test binary has no build information")
	}
	var builds []built
	for i, p := range c.platforms {
		builds = append(builds, built{
			binary: binary{platform: p, path: "/x/bar-controller-" + strings.ReplaceAll(p, "/", "-")},
			info:   info,
			sha256: strings.Repeat(string("0123456789"[i]), 64),
		})
	}
	out, err := provenance(c, res, builds)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProvenance: the provenance says which commit was built into which
// version, with which toolchain, flags and modules, and which binaries
// came out; the in-toto framework's types read it back as valid SLSA
// provenance v1; and it is the same bytes every time.
func TestProvenance(t *testing.T) {
	info, _ := debug.ReadBuildInfo()
	c := config{version: "v1.2.3", repo: "r.example/bar", registry: "r.example/bar", platforms: []string{"linux/amd64", "linux/arm64"}}
	res := &result{commit: strings.Repeat("ab", 20), goVersion: info.GoVersion, created: time.Unix(1700000000, 0),
		index: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}}
	raw := testProvenance(t, c, res)
	if again := testProvenance(t, c, res); !bytes.Equal(raw, again) {
		t.Errorf("two provenances of the same release differ:\n%s\n%s", raw, again)
	}
	var p provenancev1.Provenance
	if err := protojson.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	def, run := p.GetBuildDefinition(), p.GetRunDetails()
	if def.GetBuildType() != provenanceBuildType || run.GetBuilder().GetId() != provenanceBuilderID || run.GetBuilder().GetVersion()["go"] != info.GoVersion {
		t.Errorf("build type %q, builder %v", def.GetBuildType(), run.GetBuilder())
	}
	ext := def.GetExternalParameters().AsMap()
	if ext["commit"] != res.commit || ext["version"] != c.version || ext["source"] != sourceURI || ext["repository"] != c.repo {
		t.Errorf("external parameters %v", ext)
	}
	internal := def.GetInternalParameters().AsMap()
	flags, _ := internal["goBuildFlags"].([]any)
	if len(flags) == 0 || !strings.Contains(flags[len(flags)-1].(string), "internal/version.commit="+res.commit) || internal["goVersion"] != info.GoVersion {
		t.Errorf("internal parameters %v", internal)
	}
	settings, _ := internal["goRecordedSettings"].(map[string]any)
	if len(settings) != len(c.platforms) {
		t.Errorf("recorded settings for %d platforms, want %d: %v", len(settings), len(c.platforms), settings)
	}

	deps := def.GetResolvedDependencies()
	if len(deps) == 0 || deps[0].GetUri() != sourceURI || deps[0].GetDigest()["gitCommit"] != res.commit {
		t.Fatalf("the first dependency is %v, want the commit", deps[:min(1, len(deps))])
	}
	dirHash := map[string]string{} // by package URL
	for _, d := range deps[1:] {
		dirHash[d.GetUri()] = d.GetDigest()["dirHash"]
	}
	for _, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		got, ok := dirHash["pkg:golang/"+m.Path+"@"+m.Version]
		if !ok {
			t.Errorf("%s@%s, linked in, is no dependency", m.Path, m.Version)
			continue
		}
		sum, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(m.Sum, "h1:"))
		if got != hex.EncodeToString(sum) {
			t.Errorf("%s@%s: dirHash %q, go.sum %s", m.Path, m.Version, got, m.Sum)
		}
	}
	if len(dirHash) != len(info.Deps) {
		t.Errorf("%d modules, want the %d linked", len(dirHash), len(info.Deps))
	}
	var names []string
	for _, b := range run.GetByproducts() {
		names = append(names, b.GetName())
	}
	if !slices.Equal(names, []string{"bar-controller-linux-amd64", "bar-controller-linux-arm64"}) || run.GetByproducts()[1].GetDigest()["sha256"] != strings.Repeat("1", 64) {
		t.Errorf("byproducts %v", run.GetByproducts())
	}
}
