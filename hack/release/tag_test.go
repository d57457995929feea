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
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/barcontroller/bar-controller/internal/image"
)

// TestTagNeverMoves: a published version is never moved. In a registry on
// loopback, the version is tagged on one index; tagging it again on the
// same index (a re-run of the identical release) pushes nothing and
// succeeds; tagging it on another index (a re-run of another commit, a
// mistaken VERSION) fails, naming both digests, and leaves the tag where
// it was.
func TestTagNeverMoves(t *testing.T) {
	reg := startRecordingRegistry(t)
	c := config{registry: reg.repo, repo: reg.repo, version: "v1.2.3"}
	published := testIndex(t, c, "published")
	other := testIndex(t, c, "other")
	publishedDigest, _ := published.Digest()
	otherDigest, _ := other.Digest()
	vt, err := versionTag(c)
	if err != nil {
		t.Fatal(err)
	}

	if err := tag(t.Context(), vt, c.version, published, publishedDigest); err != nil {
		t.Fatal(err)
	}
	if err := tag(t.Context(), vt, c.version, published, publishedDigest); err != nil {
		t.Errorf("tagging the version again on the index it names: %v; want a no-op", err)
	}
	tagPuts := func() (n int) {
		for _, p := range reg.manifestPuts() {
			if p == c.version {
				n++
			}
		}
		return n
	}
	if n := tagPuts(); n != 1 {
		t.Errorf("the tag was pushed %d times for two taggings of the same index; want once", n)
	}

	err = tag(t.Context(), vt, c.version, other, otherDigest)
	if err == nil || !strings.Contains(err.Error(), publishedDigest.String()) || !strings.Contains(err.Error(), otherDigest.String()) {
		t.Errorf("tagging the published version on another index: %v; want an error naming both digests", err)
	}
	got, err := remote.Head(mustTag(t, reg.repo+":"+c.version))
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != publishedDigest {
		t.Errorf("the tag %s names %s, want the published index %s", c.version, got.Digest, publishedDigest)
	}
	if n := tagPuts(); n != 1 {
		t.Errorf("the tag was pushed %d times; want once", n)
	}
}

// testIndex pushes, by digest, an index of one image holding a stand-in
// binary whose content is content.
func testIndex(t *testing.T, c config, content string) v1.ImageIndex {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bar-controller")
	writeTestFile(t, bin, "\x7fELF "+content)
	img, err := image.Build(image.Controller(bin, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := image.Index([]v1.Image{img}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(t.Context(), idx, c); err != nil {
		t.Fatal(err)
	}
	return idx
}

// checkOlderReleaseFails: the notes' command for the image, run with an
// older release's index in place of this one's, fails; otherwise a tag
// moved back to an older signed index, or an older digest passed off as
// this version's, would verify. The older releases are in the same
// registry, signed with the same key: one as its version's release signs
// (with that version in the signature), one as releases signed before the
// signature named a version. Each older digest verifies under its own
// version's command (the failure is the version's, nothing else's).
func checkOlderReleaseFails(t *testing.T, c config, res *result, cmds []verifyCmd, dir string, env []string) {
	t.Helper()
	var line string
	for _, cmd := range cmds {
		if cmd.artifact == "image" {
			line = cmd.line
		}
	}
	older := c
	older.version = "v0.0.0-test.1"
	for _, annotated := range []bool{true, false} {
		idx := testIndex(t, c, "older, annotated: "+strconv.FormatBool(annotated))
		digest, _ := idx.Digest()
		ref := c.registry + "@" + digest.String()
		args := []string{"sign", ref}
		if annotated {
			args = []string{"sign", "-a", "version=" + older.version, ref}
		}
		if err := runCosign(t.Context(), older, args[0], args[1:]...); err != nil {
			t.Fatal(err)
		}
		moved := strings.ReplaceAll(line, res.index.String(), digest.String())
		if out, err := runCommand(t, dir, env, moved); err == nil {
			t.Errorf("the image's command passes on an older release's index (signed with a version: %v):\n%s\n%s", annotated, moved, out)
		}
		if !annotated {
			continue
		}
		own := strings.ReplaceAll(moved, "version="+c.version, "version="+older.version)
		if out, err := runCommand(t, dir, env, own); err != nil {
			t.Errorf("the older release's index fails its own version's command: %v\n%s", err, out)
		}
	}
}
