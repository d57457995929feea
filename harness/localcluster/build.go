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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
)

// ModuleRoot returns the directory of this repository's go.mod: tests run
// in their package's directory, and artifacts/ and the controller's source
// are found from here.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// BuildController builds bar-controller from this repository into dir and
// returns the binary's path. The real-cluster tests run the controller as
// users do, as its own process with its own flags and signals; built with
// the race detector when the test binary itself is, as under make test.
func BuildController(dir string) (string, error) {
	return buildController(dir, "bar-controller", raceEnabled)
}

// BuildControllerWithoutRace builds bar-controller into dir without the
// race detector, whatever the test binary: for tests that judge the
// process' memory against a Pod's limit, which the race detector's shadow
// memory (several times the heap) would break on its own.
func BuildControllerWithoutRace(dir string) (string, error) {
	return buildController(dir, "bar-controller-norace", false)
}

func buildController(dir, name string, race bool) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	// -w: no DWARF, which nothing reads (the binary's own tables give
	// stack traces and profiles), and a third less link time.
	args := []string{"build", "-o", out, "-ldflags", "-w -X github.com/barcontroller/bar-controller/internal/version.version=test"}
	cmd := exec.Command("go")
	if race {
		// With the test binary's own compiler flags too (make test builds
		// without DWARF): then the controller's packages are the ones the
		// test's build just compiled, not all of them again with other
		// flags (docs/measurements/ci-and-control-plane.md, "A first CI under
		// an hour").
		args = append(args, "-race")
		if gcflags := testGCFlags(); gcflags != "" {
			args = append(args, "-gcflags="+gcflags)
		}
	} else {
		// As the release builds it (hack/release): the binary users run,
		// and a build that shares its compiled packages with
		// TestReleaseIsReproducible's linux/amd64 build instead of
		// compiling all of them again
		// (docs/measurements/ci-and-control-plane.md, "A first CI under an
		// hour").
		args = append(args, "-trimpath")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	cmd.Args = append(cmd.Args, append(args, ".")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build bar-controller: %v\n%s", err, b)
	}
	return out, nil
}

// testGCFlags is the -gcflags the running test binary was built with, as
// its build information records them, or "".
func testGCFlags() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "-gcflags" {
			return s.Value
		}
	}
	return ""
}
