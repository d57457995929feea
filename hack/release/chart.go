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
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart in the repository.
const chartDir = "charts/bar-controller"

// chartImage is what a release's chart runs: its values' image.
type chartImage struct {
	repository, tag string
	digest          v1.Hash
	// platforms are the index's, for Artifact Hub's images annotation.
	platforms []string
}

// chartVersion is the chart's version for a release's: SemVer without the
// v, as Helm charts are versioned (the file is bar-controller-1.2.3.tgz,
// and helm install --version 1.2.3 finds it in a repository).
func chartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// chartFile is the archive's name, as helm package names it.
func chartFile(version string) string { return "bar-controller-" + chartVersion(version) + ".tgz" }

// packageChart writes the chart in src as the release's chart archive,
// what helm package would make of it, without helm: its Chart.yaml
// carries the release's version and appVersion, its values.yaml the
// release's image by digest (the index that install.yaml runs), and both
// keep their comments, which helm show values prints for users. The
// archive is a function of the commit: entries in path order, each
// stamped with the commit's time, owned by root, mode 0644, and a gzip
// header with no name or time, so that two releases of one commit give the
// same bytes (release_test.go).
func packageChart(src, out, version string, img chartImage, created time.Time) (string, error) {
	dir := filepath.Join(src, filepath.FromSlash(chartDir))
	files := map[string][]byte{} // by path in the chart, with slashes
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".helmignore":
			// helm package would honour it; this does not read it, so
			// a chart that relies on one must not ship silently larger.
			return fmt.Errorf("%s/.helmignore: hack/release packages every file of the chart and reads no ignore file; remove what must not ship instead", chartDir)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s/%s is not a regular file", chartDir, rel)
		}
		files[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return "", err
	}
	if files["Chart.yaml"], err = setChartVersion(files["Chart.yaml"], version); err != nil {
		return "", fmt.Errorf("%s/Chart.yaml: %w", chartDir, err)
	}
	if files["Chart.yaml"], err = setArtifactHub(files["Chart.yaml"], version, img); err != nil {
		return "", fmt.Errorf("%s/Chart.yaml: %w", chartDir, err)
	}
	if files["values.yaml"], err = setImage(files["values.yaml"], img); err != nil {
		return "", fmt.Errorf("%s/values.yaml: %w", chartDir, err)
	}

	var tgz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&tgz, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     path.Join("bar-controller", name),
			Mode:     0o644,
			Size:     int64(len(files[name])),
			ModTime:  created,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	file := chartFile(version)
	return file, os.WriteFile(filepath.Join(out, file), tgz.Bytes(), 0o644)
}

var (
	versionKey    = regexp.MustCompile(`(?m)^version:.*$`)
	appVersionKey = regexp.MustCompile(`(?m)^appVersion:.*$`)
)

// setChartVersion sets version and appVersion in Chart.yaml, in place, and
// checks the result by parsing it.
func setChartVersion(chart []byte, version string) ([]byte, error) {
	for key, re := range map[string]*regexp.Regexp{"version": versionKey, "appVersion": appVersionKey} {
		if n := len(re.FindAll(chart, -1)); n != 1 {
			return nil, fmt.Errorf("%d top-level %s: lines, want one", n, key)
		}
	}
	chart = versionKey.ReplaceAllLiteral(chart, []byte("version: "+chartVersion(version)))
	chart = appVersionKey.ReplaceAllLiteral(chart, []byte("appVersion: "+strconv.Quote(version)))
	var meta struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return nil, err
	}
	if meta.Name != "bar-controller" || meta.Version != chartVersion(version) || meta.AppVersion != version {
		return nil, fmt.Errorf("after setting the version: name %q, version %q, appVersion %q", meta.Name, meta.Version, meta.AppVersion)
	}
	return chart, nil
}

// artifactHubImage is one entry of Artifact Hub's artifacthub.io/images
// annotation: the images a chart runs, which it lists and scans.
type artifactHubImage struct {
	Name      string   `json:"name"`
	Image     string   `json:"image"`
	Platforms []string `json:"platforms,omitempty"`
}

// artifactHubLink is one entry of its artifacthub.io/links annotation.
type artifactHubLink struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// setArtifactHub writes the release into Chart.yaml's Artifact Hub
// annotations: the image by digest with its platforms, prerelease for a
// vX.Y.Z-pre version, and the runbook link pinned to the release's tag
// (runbookRef), as its alerts' links are. It rewrites the annotations
// block, the file's last, and checks by parsing that nothing above it
// changed.
func setArtifactHub(chart []byte, version string, img chartImage) ([]byte, error) {
	head, _, ok := bytes.Cut(chart, []byte("\nannotations:\n"))
	if !ok {
		return nil, errors.New("no top-level annotations: block")
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return nil, err
	}
	var links []artifactHubLink
	if err := yaml.Unmarshal([]byte(meta.Annotations["artifacthub.io/links"]), &links); err != nil {
		return nil, fmt.Errorf("artifacthub.io/links: %w", err)
	}
	for i, l := range links {
		links[i].URL = strings.Replace(l.URL, "/blob/main/", "/blob/"+runbookRef(version)+"/", 1)
	}
	images := []artifactHubImage{{Name: "bar-controller", Image: img.repository + ":" + img.tag + "@" + img.digest.String(), Platforms: img.platforms}}
	set := maps.Clone(meta.Annotations)
	set["artifacthub.io/prerelease"] = strconv.FormatBool(strings.Contains(version, "-"))
	for key, v := range map[string]any{"artifacthub.io/links": links, "artifacthub.io/images": images} {
		out, err := yaml.Marshal(v)
		if err != nil {
			return nil, err
		}
		set[key] = string(out)
	}
	block, err := yaml.Marshal(map[string]any{"annotations": set})
	if err != nil {
		return nil, err
	}
	edited := append(append(bytes.Clone(head), '\n'), block...)

	var before, after map[string]any
	if err := yaml.Unmarshal(chart, &before); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(edited, &after); err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(after["annotations"], anyMap(set)) {
		return nil, errors.New("the annotations block does not read back as written")
	}
	delete(before, "annotations")
	delete(after, "annotations")
	if !reflect.DeepEqual(before, after) {
		return nil, errors.New("rewriting the annotations block changed other fields: it must be the file's last")
	}
	return edited, nil
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// setImage sets image.repository, image.tag and image.digest in values.yaml
// by editing their lines in the top-level image: block, so every comment
// stays, and checks by parsing both that those three values, and nothing
// else, changed.
func setImage(values []byte, img chartImage) ([]byte, error) {
	want := map[string]string{"repository": img.repository, "tag": img.tag, "digest": img.digest.String()}
	lines := strings.SplitAfter(string(values), "\n")
	block := false
	set := map[string]int{}
	for i, line := range lines {
		if strings.TrimRight(line, "\r\n") == "image:" {
			block = true
			continue
		}
		if block && !strings.HasPrefix(line, " ") {
			break // a blank line or the next top-level key or comment
		}
		if !block {
			continue
		}
		key, _, ok := strings.Cut(strings.TrimPrefix(line, "  "), ":")
		if v, mine := want[key]; ok && mine && strings.HasPrefix(line, "  "+key+":") {
			lines[i] = "  " + key + ": " + strconv.Quote(v) + "\n"
			set[key]++
		}
	}
	for key := range want {
		if set[key] != 1 {
			return nil, fmt.Errorf("image.%s set on %d lines of the image: block, want one", key, set[key])
		}
	}
	edited := []byte(strings.Join(lines, ""))

	var before, after map[string]any
	if err := yaml.Unmarshal(values, &before); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(edited, &after); err != nil {
		return nil, err
	}
	image, _ := after["image"].(map[string]any)
	for key, v := range want {
		if image[key] != v {
			return nil, fmt.Errorf("image.%s is %v after the edit, want %q", key, image[key], v)
		}
	}
	// Put back what was set: then the two must be equal.
	orig, _ := before["image"].(map[string]any)
	for key := range want {
		image[key] = orig[key]
	}
	if !reflect.DeepEqual(before, after) {
		return nil, errors.New("editing the image: lines changed other values")
	}
	return edited, nil
}
