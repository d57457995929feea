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

// Package version is what a bar-controller binary says of its own build:
// --version, the build-info metric and the User-Agent of its requests.
package version

import (
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"
)

// version and commit are stamped at build time by make build, make
// image-tar and hack/release:
//
//	-ldflags "-X $(PKG).version=v1.2.3 -X $(PKG).commit=<full commit hash>"
//
// where PKG is this package's import path, LDFlagsPackage.
//
// A binary built without them (go build, go test) says "dev" and whatever
// revision the go command recorded, if any (Commit).
var (
	version = "dev"
	commit  = ""
)

// Commit is the commit the binary was built from. The -X value comes
// first: release builds use -buildvcs=false, so that the binary does not
// depend on the state of the checkout it was built in, and then the go
// command records nothing. Without it, a go build inside a git checkout
// still records the revision (and whether the tree was modified), which is
// better than nothing when someone asks a hand-built binary what it is.
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return "unknown"
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
}

// ShortCommit is the commit as the User-Agent carries it: seven characters,
// as client-go's default agent does (kubernetes/<commit[:7]>), enough to
// find the commit and short enough for the audit log's lines.
func ShortCommit() string {
	c := Commit()
	if len(c) > 7 && c != "unknown" {
		return c[:7]
	}
	return c
}

// Print is what --version prints: what a bug report needs to name
// the build, one fact a line so that a script can pick one out.
func Print(w io.Writer) {
	fmt.Fprintf(w, "bar-controller %s\ncommit: %s\ngo: %s\nplatform: %s/%s\n",
		version, Commit(), goruntime.Version(), goruntime.GOOS, goruntime.GOARCH)
}

// UserAgent names the controller in the API server's audit log and request
// metrics, in client-go's own shape (name/version (os/arch) commit), and
// then which replica sent the request (the Pod name), so that the writes
// of two replicas, such as an old and a new leader, can be told apart.
// test/faults tells them apart by the replica at the end.
func UserAgent(replica string) string {
	return fmt.Sprintf("bar-controller/%s (%s/%s) %s %s", version, goruntime.GOOS, goruntime.GOARCH, ShortCommit(), replica)
}

// LDFlagsPackage is the import path the -X flags name: the Makefile,
// the Dockerfile and hack/release spell it out, and their tests build
// with it and read --version back.
const LDFlagsPackage = "github.com/barcontroller/bar-controller/internal/version"

// Version is the version stamped at build time, or "dev".
func Version() string { return version }
