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
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// TestChartPackage packages the repository's chart from two copies that
// differ in every way the commit does not fix (file times, permissions,
// the directory), and requires the same bytes; then reads the archive as
// helm would and checks what a release's chart must say. With $HELM, helm
// itself lints the archive and renders it.
func TestChartPackage(t *testing.T) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1764000000, 0).UTC()
	img := chartImage{repository: "registry.example/bar-controller", tag: "v1.2.3-rc.1",
		digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}}
	var archives [][]byte
	for i, perm := range []os.FileMode{0o644, 0o600} {
		src := copyChart(t, root, perm, created.Add(time.Duration(i+1)*time.Hour))
		out := t.TempDir()
		file, err := packageChart(src, out, "v1.2.3-rc.1", img, created)
		if err != nil {
			t.Fatal(err)
		}
		if file != "bar-controller-1.2.3-rc.1.tgz" {
			t.Errorf("the archive is %s, want bar-controller-1.2.3-rc.1.tgz (helm package's name)", file)
		}
		data, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, data)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatal("two packagings of the same chart differ")
	}

	files := checkChartArchive(t, archives[0], created, "1.2.3-rc.1", "v1.2.3-rc.1", img)
	// The values keep their comments, which helm show values prints.
	orig, err := os.ReadFile(filepath.Join(root, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bytes.Count(files["values.yaml"], []byte("\n#")), bytes.Count(orig, []byte("\n#")); got != want {
		t.Errorf("the packaged values.yaml has %d comment lines at the top level, the chart's %d", got, want)
	}

	helm := os.Getenv("HELM")
	if helm == "" {
		if os.Getenv("BAR_REQUIRE_HELM") != "" {
			t.Fatal("$HELM must name helm (hack/install-tool.sh helm)")
		}
		t.Log("no $HELM: the archive is not linted or rendered by helm")
		return
	}
	tgz := filepath.Join(t.TempDir(), "bar-controller-1.2.3-rc.1.tgz")
	if err := os.WriteFile(tgz, archives[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(helm, "lint", "--strict", tgz).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict: %v\n%s", err, out)
	}
	out, err := exec.Command(helm, "template", "bar-controller", tgz, "--namespace", "bar-controller").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	images := imageLine.FindAllSubmatch(out, -1)
	if len(images) == 0 {
		t.Fatalf("helm template rendered no image:\n%s", out)
	}
	if err := pinnedTo(out, img.repository+"@"+img.digest.String()); err != nil {
		t.Errorf("helm template of the packaged chart: %v", err)
	}
}

// TestChartPackageRefuses: what the packaging cannot do faithfully, it
// refuses rather than ship something else.
func TestChartPackageRefuses(t *testing.T) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	img := chartImage{repository: "r", tag: "v1.0.0", digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}}
	for name, edit := range map[string]func(dir string) error{
		".helmignore": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, ".helmignore"), []byte("*.md\n"), 0o644)
		},
		"no image.digest line": func(dir string) error {
			return replaceInFile(filepath.Join(dir, "values.yaml"), "\n  digest:", "\n  # digest:")
		},
		"a second version line": func(dir string) error {
			return replaceInFile(filepath.Join(dir, "Chart.yaml"), "\nversion:", "\nversion: 9.9.9\nversion:")
		},
	} {
		src := copyChart(t, root, 0o644, time.Now())
		if err := edit(filepath.Join(src, chartDir)); err != nil {
			t.Fatal(err)
		}
		if _, err := packageChart(src, t.TempDir(), "v1.0.0", img, time.Now()); err == nil {
			t.Errorf("%s: packaged, want an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// checkChartArchive reads a chart archive as helm loads one and checks it:
// one top-level directory, entries in order, stamped with created, the
// release's version and image. It returns the files by path in the chart.
func checkChartArchive(t *testing.T, data []byte, created time.Time, version, appVersion string, img chartImage) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("the gzip header names %q at %v, want neither", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name, ok := strings.CutPrefix(hdr.Name, "bar-controller/")
		if !ok || hdr.Typeflag != tar.TypeReg {
			t.Errorf("entry %q of type %c, want files under bar-controller/", hdr.Name, hdr.Typeflag)
		}
		if !hdr.ModTime.Equal(created) || hdr.Mode != 0o644 || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" {
			t.Errorf("%s: %v, mode %o, owner %d:%d %q; want %v, 0644, root", hdr.Name, hdr.ModTime, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Uname, created)
		}
		if files[name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("entries not in path order: %q", names)
	}
	for _, want := range []string{"Chart.yaml", "values.yaml", "values.schema.json", "templates/deployment.yaml", "templates/crd.yaml", "files/barcontroller.dev_bars.yaml"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the archive lacks %s: %q", want, names)
		}
	}

	var meta struct {
		Name, Version, AppVersion string
		Annotations               map[string]string
	}
	if err := yaml.Unmarshal(files["Chart.yaml"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "bar-controller" || meta.Version != version || meta.AppVersion != appVersion {
		t.Errorf("Chart.yaml: %+v, want version %s, appVersion %s", meta, version, appVersion)
	}
	// Artifact Hub's annotations say which release this is: its image
	// by digest, whether it is a prerelease, its runbook.
	var images []artifactHubImage
	var links []artifactHubLink
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/images"]), &images); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/links"]), &links); err != nil {
		t.Fatal(err)
	}
	if want := img.repository + ":" + img.tag + "@" + img.digest.String(); len(images) != 1 || images[0].Image != want {
		t.Errorf("artifacthub.io/images: %+v, want one, %s", images, want)
	}
	if got, want := meta.Annotations["artifacthub.io/prerelease"], strconv.FormatBool(strings.Contains(appVersion, "-")); got != want {
		t.Errorf("artifacthub.io/prerelease: %q for %s, want %q", got, appVersion, want)
	}
	if !slices.ContainsFunc(links, func(l artifactHubLink) bool {
		return strings.Contains(l.URL, "/blob/"+runbookRef(appVersion)+"/docs/runbook.md")
	}) {
		t.Errorf("artifacthub.io/links: %+v, want the runbook of %s", links, runbookRef(appVersion))
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string }
	}
	if err := yaml.Unmarshal(files["values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != img.repository || values.Image.Tag != img.tag || values.Image.Digest != img.digest.String() {
		t.Errorf("values.yaml image: %+v, want %s:%s@%s", values.Image, img.repository, img.tag, img.digest)
	}
	return files
}

// copyChart copies the repository's chart into a new source tree, each
// file with perm and the time mtime.
func copyChart(t *testing.T, root string, perm os.FileMode, mtime time.Time) string {
	t.Helper()
	src := t.TempDir()
	from := filepath.Join(root, chartDir)
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		to := filepath.Join(src, chartDir, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, data, perm); err != nil {
			return err
		}
		return os.Chtimes(to, mtime, mtime)
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func replaceInFile(path, old, new string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Contains(data, []byte(old)) {
		return errors.New(path + " lacks " + old)
	}
	return os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644)
}
