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
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	provenancev1 "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// module is the controller's module path; the source it names is the
	// repository a release is built from.
	module = "github.com/barcontroller/bar-controller"

	// provenanceBuilderID names the builder the provenance speaks for:
	// this command, run by make release wherever the release's key is. It
	// claims SLSA Build level 1 only (the provenance exists and is
	// signed); nothing hosted or hardened runs it.
	provenanceBuilderID = "https://" + module + "/tree/main/hack/release"

	// provenanceBuildType is where the build the provenance describes is
	// written down, its parameters among it: make release's row of the
	// development guide.
	provenanceBuildType = "https://" + module + "/blob/main/docs/development.md#make-targets"

	// sourceURI is the git repository of the commit released, in SLSA's
	// git+https form; the commit itself is the descriptor's digest.
	sourceURI = "git+https://" + module
)

// built is what the provenance says of one binary: what the go command
// recorded in it (go version -m) and its digest.
type built struct {
	binary
	info   *debug.BuildInfo
	sha256 string
}

func readBuilt(b binary) (built, error) {
	info, err := buildinfo.ReadFile(b.path)
	if err != nil {
		return built{}, fmt.Errorf("reading the build information of %s: %w", b.path, err)
	}
	data, err := os.ReadFile(b.path)
	if err != nil {
		return built{}, err
	}
	sum := sha256.Sum256(data)
	return built{binary: b, info: info, sha256: hex.EncodeToString(sum[:])}, nil
}

// provenance is the SLSA v1 provenance predicate of the release (the
// in-toto attestation framework's own types, validated by them): what was
// asked for (the commit, the version, the platforms, where it goes), how
// it was built (the Go toolchain, the flags and environment hack/release
// gives go build, and each binary's settings as the go command recorded
// them), from what (the git commit and every module linked into a binary,
// by go.sum's hash), and the binaries made on the way. cosign attest wraps
// it in an in-toto statement whose subject is the index. Nothing in it
// depends on the clock or the machine, so a rebuild of a commit gives the
// same bytes (TestReleaseIsReproducible).
func provenance(c config, res *result, builds []built) ([]byte, error) {
	external, err := structpb.NewStruct(map[string]any{
		"source":     sourceURI,
		"commit":     res.commit,
		"version":    c.version,
		"platforms":  anySlice(c.platforms),
		"repository": c.repo,
		"registry":   c.registry,
	})
	if err != nil {
		return nil, err
	}
	settings := map[string]any{}
	for _, b := range builds {
		recorded := map[string]any{}
		for _, s := range b.info.Settings {
			recorded[s.Key] = s.Value
		}
		settings[b.platform] = recorded
	}
	internal, err := structpb.NewStruct(map[string]any{
		"goVersion":          res.goVersion,
		"goBuildFlags":       anySlice(buildFlags(c.version, res.commit)),
		"goBuildEnv":         anySlice(buildEnv),
		"goRecordedSettings": settings,
	})
	if err != nil {
		return nil, err
	}

	deps := []*intoto.ResourceDescriptor{{
		Uri:    sourceURI,
		Digest: map[string]string{"gitCommit": res.commit},
	}}
	modules, err := linkedModules(builds)
	if err != nil {
		return nil, err
	}
	deps = append(deps, modules...)
	var byproducts []*intoto.ResourceDescriptor
	for _, b := range builds {
		byproducts = append(byproducts, &intoto.ResourceDescriptor{
			Name:   filepath.Base(b.path),
			Digest: map[string]string{"sha256": b.sha256},
		})
	}

	p := &provenancev1.Provenance{
		BuildDefinition: &provenancev1.BuildDefinition{
			BuildType:            provenanceBuildType,
			ExternalParameters:   external,
			InternalParameters:   internal,
			ResolvedDependencies: deps,
		},
		RunDetails: &provenancev1.RunDetails{
			Builder: &provenancev1.Builder{
				Id:      provenanceBuilderID,
				Version: map[string]string{"go": res.goVersion},
			},
			Byproducts: byproducts,
		},
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("the provenance: %w", err)
	}
	raw, err := protojson.Marshal(p)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose, from build to build, so
	// that nobody relies on its bytes; the provenance must be a function
	// of the release, so it is compacted (maps are in key order already).
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// linkedModules are the modules linked into any of the binaries, in path
// order, each by its package URL and the hash go.sum holds for it, which
// the in-toto digest set calls dirHash (the same SHA-256, in hex rather
// than base64). A replaced module is named by its replacement, the code
// that was linked; one replaced by a directory has no hash.
func linkedModules(builds []built) ([]*intoto.ResourceDescriptor, error) {
	byURI := map[string]*intoto.ResourceDescriptor{}
	for _, b := range builds {
		for _, m := range b.info.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			rd := &intoto.ResourceDescriptor{Uri: "pkg:golang/" + m.Path + "@" + m.Version}
			if m.Sum != "" {
				h1, ok := strings.CutPrefix(m.Sum, "h1:")
				sum, err := base64.StdEncoding.DecodeString(h1)
				if !ok || err != nil || len(sum) != sha256.Size {
					return nil, fmt.Errorf("module %s@%s: go.sum hash %q is not h1:<SHA-256>", m.Path, m.Version, m.Sum)
				}
				rd.Digest = map[string]string{"dirHash": hex.EncodeToString(sum)}
			}
			byURI[rd.Uri] = rd
		}
	}
	var out []*intoto.ResourceDescriptor
	for _, uri := range slices.Sorted(maps.Keys(byURI)) {
		out = append(out, byURI[uri])
	}
	return out, nil
}

// anySlice is a string slice as structpb takes lists.
func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
