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
	"errors"
	"testing"

	"k8s.io/client-go/tools/cache"
)

type fakeRVStore struct{ rv string }

func (s *fakeRVStore) LastStoreSyncResourceVersion() string { return s.rv }

func TestWriteTracker(t *testing.T) {
	// Deployments are read from two caches (whole and metadata-only).
	deployments, deploymentMeta, bars := &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}, &fakeRVStore{rv: "100"}
	tr := newWriteTracker(map[string][]rvStore{"deployments": {deployments, deploymentMeta}, "bars": {bars}})
	key := cache.ObjectName{Namespace: "default", Name: "test"}
	var stale *staleCacheError

	if err := tr.caughtUp(key); err != nil {
		t.Fatalf("no writes yet: %v", err)
	}
	tr.wrote(key, "uid-1", "deployments", "105")
	tr.wrote(key, "uid-1", "bars", "107")
	tr.wrote(key, "uid-1", "deployments", "103") // an older answer must not lower the mark
	if err := tr.caughtUp(key); !errors.As(err, &stale) {
		t.Fatalf("caches at 100 after writes at 105/107: got %v, want a staleCacheError", err)
	}
	deployments.rv, deploymentMeta.rv = "105", "106"
	if err := tr.caughtUp(key); !errors.As(err, &stale) || stale.resource != "bars" {
		t.Fatalf("only the Deployment caches caught up: got %v, want bars to be stale", err)
	}
	bars.rv, deploymentMeta.rv = "1000", "100" // longer numbers are larger, not lexically smaller
	if err := tr.caughtUp(key); !errors.As(err, &stale) || stale.resource != "deployments" {
		t.Fatalf("one Deployment cache still behind: got %v, want deployments to be stale", err)
	}
	deploymentMeta.rv = "106"
	if err := tr.caughtUp(key); err != nil {
		t.Fatalf("all caches caught up: %v", err)
	}
	if len(tr.writes) != 0 {
		t.Errorf("caught-up Bars must be forgotten, still tracking %v", tr.writes)
	}

	// A new Bar with the same name does not inherit the old one's writes.
	tr.wrote(key, "uid-1", "deployments", "2000")
	tr.wrote(key, "uid-2", "bars", "900")
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("after the Bar was recreated: %v", err)
	}

	// Resource versions that do not compare (an empty cache) never block.
	tr.wrote(key, "uid-2", "bars", "5000")
	bars.rv = ""
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("with an unreadable cache version: %v", err)
	}

	tr.wrote(key, "uid-2", "bars", "9000")
	tr.forget(key)
	if err := tr.caughtUp(key); err != nil {
		t.Errorf("after forget: %v", err)
	}
}
