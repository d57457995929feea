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

package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// StoredAPIVersions reads etcd itself, not the API server, and counts the
// objects of a custom resource by the apiVersion they are stored in. Only
// etcd can tell: the API server converts every object it returns to the
// version asked for, so "which Bars are still stored as v1alpha1" (what a
// storage migration must bring to zero) has no API. The API server keeps
// a custom resource under /registry/<group>/<resource>/, as JSON.
//
// It asks etcd's JSON gateway (/v3/kv/range), which etcd serves on its
// client URL by default, so the tests need no etcd client library.
func (c *Cluster) StoredAPIVersions(ctx context.Context, group, resource string) (map[string]int, error) {
	if c.EtcdURL == "" {
		return nil, fmt.Errorf("no etcd URL: the cluster was not started by Start")
	}
	prefix := []byte("/registry/" + group + "/" + resource + "/")
	// The end of the range is the prefix with its last byte incremented:
	// every key that starts with the prefix sorts below it.
	end := bytes.Clone(prefix)
	end[len(end)-1]++
	counts := map[string]int{}
	client := &http.Client{Timeout: 30 * time.Second}
	key := prefix
	for {
		// []byte fields marshal as base64, as the gateway wants them.
		body, err := json.Marshal(struct {
			Key      []byte `json:"key"`
			RangeEnd []byte `json:"range_end"`
			Limit    int64  `json:"limit"`
		}{key, end, 200})
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL+"/v3/kv/range", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			KVs []struct {
				Key   []byte `json:"key"`
				Value []byte `json:"value"`
			} `json:"kvs"`
			More bool `json:"more"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading etcd's range answer (%s): %w", resp.Status, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("etcd range: %s", resp.Status)
		}
		for _, kv := range page.KVs {
			var obj struct {
				APIVersion string `json:"apiVersion"`
			}
			if err := json.Unmarshal(kv.Value, &obj); err != nil {
				return nil, fmt.Errorf("%s is not stored as JSON: %w", kv.Key, err)
			}
			counts[obj.APIVersion]++
		}
		if !page.More || len(page.KVs) == 0 {
			return counts, nil
		}
		// Continue just after the last key of this page.
		key = append(bytes.Clone(page.KVs[len(page.KVs)-1].Key), 0)
	}
}
