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

package image

import (
	"fmt"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Index is the multi-platform image: an OCI image index listing imgs,
// each under the platform its config names, so that a node pulls the one
// for its own architecture by the index's one digest. The order of imgs
// and the annotations are part of that digest: callers pass a fixed order.
func Index(imgs []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	adds := make([]mutate.IndexAddendum, 0, len(imgs))
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		if cfg.OS == "" || cfg.Architecture == "" {
			return nil, fmt.Errorf("an image without OS or architecture (%q/%q) cannot be told apart in an index", cfg.OS, cfg.Architecture)
		}
		adds = append(adds, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant},
			},
		})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// WriteLayout writes idx as an OCI image layout directory at dir, which
// must not exist yet (a layout written over an old one would keep the old
// blobs and list both indexes). Its index.json names idx ref, as
// WriteOCIArchive names an image, so that a tar of dir imports into
// containerd under that name.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	annotations, err := refAnnotations(ref)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; an OCI layout is written into a new directory", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(annotations))
}

// SourceDateEpoch is the time $SOURCE_DATE_EPOCH names
// (reproducible-builds.org), the time builds stamp into images instead of
// the clock, so that a rebuild of a commit is bit for bit the same. ok is
// false when the variable is unset.
func SourceDateEpoch() (t time.Time, ok bool, err error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		return time.Time{}, false, nil
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
	}
	return time.Unix(secs, 0).UTC(), true, nil
}
