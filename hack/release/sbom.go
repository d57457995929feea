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
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx"
	"github.com/spdx/tools-golang/spdx/v2/common"
)

// noAssertion is SPDX's "this document says nothing about it": the Go
// build information records neither licenses nor download locations, and
// an SBOM that guessed them would be worse than one that says so.
const noAssertion = "NOASSERTION"

// writeSBOM writes b.path.spdx.json: an SPDX 2.3 document of the modules
// linked into the binary, read from the binary itself (the build
// information the go command embeds, what go version -m prints), so it
// lists what was linked, not what go.mod would allow. created is the
// commit's time, so that the document is as reproducible as the binary.
func writeSBOM(b binary, version string, created time.Time) error {
	data, err := os.ReadFile(b.path)
	if err != nil {
		return err
	}
	info, err := buildinfo.ReadFile(b.path)
	if err != nil {
		return fmt.Errorf("reading the build information of %s: %w", b.path, err)
	}
	sum := sha256.Sum256(data)
	doc := sbom(info, b, version, hex.EncodeToString(sum[:]), created)
	f, err := os.Create(b.path + ".spdx.json")
	if err != nil {
		return err
	}
	if err := spdxjson.Write(doc, f, spdxjson.Indent("  ")); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sbom describes the binary as one package, the controller, which depends
// on the Go standard library and on every module the build information
// lists, each named by its package URL (pkg:golang/...), which is what
// vulnerability scanners match.
func sbom(info *debug.BuildInfo, b binary, version, sha256hex string, created time.Time) *spdx.Document {
	file := filepath.Base(b.path)
	root := &spdx.Package{
		PackageName:             "bar-controller",
		PackageSPDXIdentifier:   "Package-bar-controller",
		PackageVersion:          version,
		PackageFileName:         file,
		PackageDownloadLocation: noAssertion,
		PackageChecksums:        []spdx.Checksum{{Algorithm: spdx.SHA256, Value: sha256hex}},
		PackageLicenseConcluded: noAssertion,
		PackageLicenseDeclared:  "Apache-2.0", // every source file's header
		PackageCopyrightText:    noAssertion,
		PrimaryPackagePurpose:   "APPLICATION",
		PackageComment:          fmt.Sprintf("The %s binary, built by %s with %s.", b.platform, info.GoVersion, settings(info)),
		PackageExternalReferences: []*spdx.PackageExternalReference{
			purl(info.Main.Path, version),
		},
	}
	doc := &spdx.Document{
		SPDXVersion:    spdx.Version,
		DataLicense:    spdx.DataLicense,
		SPDXIdentifier: "DOCUMENT",
		DocumentName:   file,
		// Unique per binary, as SPDX requires: the binary's own digest.
		DocumentNamespace: fmt.Sprintf("https://barcontroller.dev/spdx/%s/%s-%s", version, file, sha256hex),
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{
				{CreatorType: "Organization", Creator: "bar-controller Authors"},
				{CreatorType: "Tool", Creator: "bar-controller-hack-release-" + version},
			},
			Created: created.UTC().Format(time.RFC3339),
		},
		Packages: []*spdx.Package{root},
		Relationships: []*spdx.Relationship{{
			RefA:         common.MakeDocElementID("", "DOCUMENT"),
			RefB:         common.MakeDocElementID("", string(root.PackageSPDXIdentifier)),
			Relationship: "DESCRIBES",
		}},
	}
	add := func(p *spdx.Package) {
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{
			RefA:         common.MakeDocElementID("", string(root.PackageSPDXIdentifier)),
			RefB:         common.MakeDocElementID("", string(p.PackageSPDXIdentifier)),
			Relationship: "DEPENDS_ON",
		})
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	add(&spdx.Package{
		PackageName:               "stdlib",
		PackageSPDXIdentifier:     spdxID("stdlib", goVersion),
		PackageVersion:            info.GoVersion,
		PackageDownloadLocation:   noAssertion,
		PackageLicenseConcluded:   noAssertion,
		PackageLicenseDeclared:    "BSD-3-Clause",
		PackageCopyrightText:      noAssertion,
		PrimaryPackagePurpose:     "LIBRARY",
		PackageExternalReferences: []*spdx.PackageExternalReference{purl("stdlib", goVersion)},
	})
	for _, m := range info.Deps {
		// A replaced module is linked from its replacement: that is the
		// code in the binary, and the one to match advisories against.
		comment := ""
		if m.Replace != nil {
			comment = fmt.Sprintf("Replaces %s %s. ", m.Path, m.Version)
			m = m.Replace
		}
		if m.Sum != "" {
			// go.sum's hash of the module's files; SPDX has no algorithm
			// for it, so it is kept as a comment for go mod verify.
			comment += "go.sum " + m.Sum
		}
		add(&spdx.Package{
			PackageName:               m.Path,
			PackageSPDXIdentifier:     spdxID(m.Path, m.Version),
			PackageVersion:            m.Version,
			PackageDownloadLocation:   noAssertion,
			PackageLicenseConcluded:   noAssertion,
			PackageLicenseDeclared:    noAssertion,
			PackageCopyrightText:      noAssertion,
			PrimaryPackagePurpose:     "LIBRARY",
			PackageComment:            strings.TrimSpace(comment),
			PackageExternalReferences: []*spdx.PackageExternalReference{purl(m.Path, m.Version)},
		})
	}
	return doc
}

// settings is the build settings that shaped the binary, as go version -m
// prints them (flags, GOOS, GOARCH, ...), in their recorded order.
func settings(info *debug.BuildInfo) string {
	var s []string
	for _, kv := range info.Settings {
		s = append(s, kv.Key+"="+kv.Value)
	}
	return strings.Join(s, " ")
}

func purl(path, version string) *spdx.PackageExternalReference {
	return &spdx.PackageExternalReference{
		Category: "PACKAGE-MANAGER",
		RefType:  "purl",
		Locator:  "pkg:golang/" + path + "@" + version,
	}
}

// notIDChar is what an SPDX element ID may not hold (letters, digits, "."
// and "-" only).
var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(path, version string) common.ElementID {
	return common.ElementID("Package-go-" + notIDChar.ReplaceAllString(path+"-"+version, "-"))
}
