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

// Command app is what the Bars in the node tests run: a static program in an
// image built and imported like the controller's, so that a Bar's Pods really
// start, and status.availableReplicas counts containers that run. It answers
// HTTP on :8080 and, on SIGTERM, goes on answering for a moment before it
// exits 0, as a well-behaved workload behind a Service does: the Pod
// leaves the endpoints of its clients only after the kubelet was told to
// stop it, and requests keep arriving until they notice.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// drain is how long the app answers after SIGTERM; well inside the Pod's
// default 30 s grace period.
const drain = 2 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: ":8080", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		fmt.Fprintf(w, "app on %s\n", host)
	})}
	go func() {
		<-ctx.Done()
		time.Sleep(drain)
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
