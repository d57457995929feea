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

// Package intern keeps one shared copy of strings that many cached objects
// repeat, for the informers' transforms.
package intern

import (
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every decoded object holds its own copy of every string in it: the
// namespace, each label key, the owner's API version and kind, the image,
// the field manager's name. Across the caches the same few strings are
// kept tens of thousands of times, 8 to 32 bytes each plus the allocator's
// rounding. The transforms (the root package's trim.go) replace them with
// one shared copy from a Table.
//
// Only strings of which there are few go in: namespaces, label keys, API
// versions, kinds, images, managers, condition types and reasons. Names,
// UIDs and resourceVersions are one per object and never do; a label
// value is shared only if the table holds it already (a seed, such as the
// managed-by label's value), or with the object's own name when it is
// equal.
//
// Few, but not few by anyone's promise: images, reasons, label keys and
// namespaces are what the cluster's users write, and a user can write
// many distinct ones. So the table holds two sets. The seed, the strings
// the controller itself writes (its labels, API versions, kinds, manager,
// reasons), is shared for the life of the process and takes no room. The
// rest goes in as it comes, up to the limit; at the limit the table
// starts again, empty but for the seed, instead of refusing what comes
// next. Before, it refused: the first strings to arrive were kept for
// good, and a tenant whose 4,096 Bars carried distinct images filled it,
// so that no string seen after (another tenant's namespace, a new image
// everyone moves to) was ever shared again, silently. Starting again
// costs nothing but sharing: an object keeps whatever copy it holds,
// strings are immutable, and a string still in use goes back into the
// table the next time an object carries it. What an unbounded supply of
// distinct strings costs everyone else is one more copy of each of their
// strings per limit's worth of the supply, never the table.
//
// And short: a string longer than MaxBytes is never held. The API server
// bounds no owner reference's kind or API version, nor any image, and a
// table that kept one copy of each string it saw kept 1 MiB kinds of
// Deployments long deleted: twenty at a time, created and deleted again
// and again, took a replica's heap past its memory limit with nothing
// left in the cluster (issue 39, fifteenth review, C1). So the table holds
// at most limit times MaxBytes, whatever it is handed.

// Table is a set of shared strings, safe for concurrent use: the three
// informers' transforms run on their own goroutines.
type Table struct {
	seed map[string]string // read-only after NewTable

	mu     sync.RWMutex
	m      map[string]string
	limit  int
	resets int
}

// NewTable returns a table that holds the seed for good and at most
// limit other strings at a time.
func NewTable(limit int, seed ...string) *Table {
	t := &Table{seed: make(map[string]string, len(seed)), m: map[string]string{}, limit: limit}
	for _, s := range seed {
		t.seed[s] = s
	}
	return t
}

// MaxBytes is the longest string a table holds: longer than any image a
// Bar can name (512 bytes) or any name, kind or label key Kubernetes
// validates.
const MaxBytes = 512

// String returns the shared copy of s, adding s to the table if it is not
// there yet (emptying the table of all but the seed first if it is full);
// a string longer than MaxBytes is returned as it is, and not held.
func (t *Table) String(s string) string {
	if s == "" || len(s) > MaxBytes {
		return s
	}
	if v, ok := t.get(s); ok {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if len(t.m) >= t.limit {
		clear(t.m) // keeps the map's room for what comes next
		t.resets++
	}
	s = strings.Clone(s) // not a slice of some larger buffer the table would keep alive
	t.m[s] = s
	return s
}

// Lookup returns the shared copy of s if the table holds one, and s
// otherwise: for strings that may be one of a kind.
func (t *Table) Lookup(s string) string {
	if v, ok := t.get(s); ok {
		return v
	}
	return s
}

// Resets is how many times the table has started again: how often a
// supply of distinct strings has filled it.
func (t *Table) Resets() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.resets
}

func (t *Table) get(s string) (string, bool) {
	if v, ok := t.seed[s]; ok {
		return v, true
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.m[s]
	return v, ok
}

// ObjectMeta shares the namespace, the label keys (and values equal
// to the object's or its controller's name, or already in the table) and
// the owner references' API versions and kinds (and names equal to the
// object's) of m, in place. The maps and slices it writes must be m's own:
// a transform owns the object it is handed until it returns it.
func (t *Table) ObjectMeta(m *metav1.ObjectMeta) {
	m.Namespace = t.String(m.Namespace)
	owner := ""
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind = t.String(r.APIVersion), t.String(r.Kind)
		if r.Name == m.Name {
			r.Name = m.Name
		}
		if r.Controller != nil && *r.Controller {
			owner = r.Name
		}
	}
	t.Labels(m.Labels, m.Name, owner)
}

// Labels shares the keys of labels, and the values equal to one of
// names or already in the table, in place. Assigning to a key that is
// there already replaces the map's copy of the key too (the runtime does
// so for string keys), so this allocates nothing.
func (t *Table) Labels(labels map[string]string, names ...string) {
	for k, v := range labels {
		labels[t.String(k)] = t.shareValue(v, names)
	}
}

func (t *Table) shareValue(v string, names []string) string {
	for _, n := range names {
		if v == n {
			return n
		}
	}
	return t.Lookup(v)
}

// ManagedFields shares the strings of a managedFields entry and
// drops its timestamp, which nothing reads (the controller's appliedFields
// and isOurWrite read the manager, operation, subresource and fields).
func (t *Table) ManagedFields(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry {
	e.Manager, e.APIVersion, e.FieldsType = t.String(e.Manager), t.String(e.APIVersion), t.String(e.FieldsType)
	e.Operation = metav1.ManagedFieldsOperationType(t.String(string(e.Operation)))
	e.Time = nil
	return e
}
