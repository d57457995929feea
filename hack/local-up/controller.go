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
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/barcontroller/bar-controller/internal/testcluster"
)

// startController runs bar-controller as a separate process, as it would
// run in a real deployment, not inside this program.
func startController(binary, logPath string, args ...string) (*testcluster.Process, error) {
	return testcluster.StartProcess("bar-controller", binary, logPath, nil, args...)
}

// waitControllerReady waits for url to answer 200, so that a controller
// that cannot start says so here rather than as a Bar that never converges.
func waitControllerReady(ctx context.Context, p *testcluster.Process, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return p.WaitReady(ctx, time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}
