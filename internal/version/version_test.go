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

package version

import (
	"bytes"
	goruntime "runtime"
	"testing"
)

// stamp sets version and commit as -ldflags -X would, for one test.
func stamp(t *testing.T, v, c string) {
	t.Helper()
	oldVersion, oldCommit := version, commit
	version, commit = v, c
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
}

const testCommit = "3e7b7e1c0ffee0123456789abcdef0123456789a"

// TestPrintVersion: --version names the version, the full commit and the
// Go toolchain, one per line. hack/release's test runs a binary built with
// the release's -ldflags, which this cannot: that the -X names are right.
func TestPrintVersion(t *testing.T) {
	stamp(t, "v1.2.3", testCommit)
	var b bytes.Buffer
	Print(&b)
	want := "bar-controller v1.2.3\n" +
		"commit: " + testCommit + "\n" +
		"go: " + goruntime.Version() + "\n" +
		"platform: " + goruntime.GOOS + "/" + goruntime.GOARCH + "\n"
	if b.String() != want {
		t.Errorf("--version printed\n%s\nwant\n%s", b.String(), want)
	}
}

// TestUserAgent: client-go's shape with the commit cut to seven
// characters, then the replica, which test/faults reads to tell two
// replicas' writes apart.
func TestUserAgent(t *testing.T) {
	stamp(t, "v1.2.3", testCommit)
	want := "bar-controller/v1.2.3 (" + goruntime.GOOS + "/" + goruntime.GOARCH + ") 3e7b7e1 replica-a"
	if got := UserAgent("replica-a"); got != want {
		t.Errorf("user agent %q, want %q", got, want)
	}
}

// TestCommitUnstamped: without -X, the commit is the go command's
// record of the checkout, or "unknown"; never empty, which would leave a
// blank label and a User-Agent with a hole in it.
func TestCommitUnstamped(t *testing.T) {
	stamp(t, "dev", "")
	if c := Commit(); c == "" {
		t.Error("buildCommit is empty without -X of the commit")
	}
	stamp(t, "dev", "abc")
	if c := ShortCommit(); c != "abc" {
		t.Errorf("short commit of a short value %q, want it whole", c)
	}
}
