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
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakePortFlag makes the test binary a fake component: it listens on the
// port the flag names and serves /healthz, or fails as a component whose
// port is taken does ("bind: address already in use").
const fakePortFlag = "--fake-component-port="

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && strings.HasPrefix(os.Args[1], fakePortFlag) {
		l, err := net.Listen("tcp", "127.0.0.1:"+strings.TrimPrefix(os.Args[1], fakePortFlag))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// startFake runs startOnFreePort on the fake component, the test binary
// itself, beginning at port, and returns the ports it tried.
func startFake(t *testing.T, port string) ([]string, string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, logDir := t.TempDir(), t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "fake")); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: t.TempDir(), binDir: bin}
	t.Cleanup(c.Stop)
	var tried []string
	first, err := strconv.Atoi(port)
	if err != nil {
		first = -1 // not a port: the fake fails for another reason
	}
	err = c.startOnFreePort(context.Background(), logDir, "fake", first,
		func(p int) []string {
			arg := strconv.Itoa(p)
			if p < 0 {
				arg = port
			}
			tried = append(tried, arg)
			return []string{fakePortFlag + arg}
		},
		func(p int) func(context.Context) error {
			return httpCheck(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", p), "")
		})
	return tried, logDir, err
}

// A component whose port another process took between the pick and its
// bind starts again on a new port, and the lost attempt's log is kept.
func TestStartOnFreePortRetriesATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// Held by a server of some other kind, as another test's component
	// would hold it: the health check gets an answer, not a hang.
	go func() {
		_ = http.Serve(taken, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
	}()
	_, port, _ := net.SplitHostPort(taken.Addr().String())
	tried, logDir, err := startFake(t, port)
	if err != nil {
		t.Fatal(err)
	}
	if len(tried) != 2 || tried[0] != port || tried[1] == port {
		t.Errorf("tried ports %v, want %s and then another", tried, port)
	}
	log, err := os.ReadFile(filepath.Join(logDir, "fake.log.port-taken-1"))
	if err != nil || !strings.Contains(string(log), "bind: address already in use") {
		t.Errorf("the first attempt's log: %q, %v", log, err)
	}
}

// Any other failure is the component's own, and is not retried.
func TestStartOnFreePortDoesNotRetryOtherFailures(t *testing.T) {
	tried, _, err := startFake(t, "not-a-port")
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Errorf("start: %v, want the fake's exit", err)
	}
	if len(tried) != 1 {
		t.Errorf("tried %v, want one attempt", tried)
	}
}
