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

package shards

import (
	"errors"
	"fmt"
	"strings"
)

// What a replica tells about the shards it holds: /readyz and its status.

// Held lists the shards this replica holds, in order.
func (c *Coordinator) Held() []Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held []Shard
	for k := range c.count {
		if r := c.runners[k]; r != nil && r.leading {
			held = append(held, Shard{k, c.count})
		}
	}
	return held
}

// Ready is this replica's readiness: it sees the Leases, and every shard
// it holds has synced its caches. A replica holding no shard is ready: it
// stands by, as a standby does with one Lease.
func (c *Coordinator) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return errors.New("shard Leases not yet seen")
	}
	var syncing []string
	for k := range c.count {
		if r := c.runners[k]; r != nil && r.leading && !r.ready {
			syncing = append(syncing, Shard{k, c.count}.String())
		}
	}
	if len(syncing) > 0 {
		return fmt.Errorf("caches of shards %s not synced", strings.Join(syncing, ", "))
	}
	return nil
}

// Status names the shards held, for /readyz.
func (c *Coordinator) Status() string {
	var held []string
	for _, s := range c.Held() {
		held = append(held, s.String())
	}
	if len(held) == 0 {
		return "ok: holding no shard (standing by)"
	}
	return "ok: holding shards " + strings.Join(held, ", ")
}
