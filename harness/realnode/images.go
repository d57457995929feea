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

package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	"github.com/barcontroller/bar-controller/internal/image"
)

// Image is a container image built from a Go package of this repository:
// one static binary, run as a numeric user, the way internal/image builds
// the controller's.
type Image struct {
	// Package is the Go package to build, relative to the module root
	// ("." is bar-controller itself).
	Package string
	// Ref is the name the node knows it by, e.g. "bar-controller:node-test";
	// like Docker, containerd completes a short name to docker.io/library/.
	Ref string
	// User is "uid:gid".
	User string
	// LDFlags are passed to go build (the controller's version stamp).
	LDFlags string
}

// PauseImage is the node's pod sandbox image (test/images/pause), built
// and imported by Start.
var PauseImage = Image{Package: "./test/images/pause", Ref: "bar-realnode/pause:test", User: "65535:65535"}

// BuildArchive builds img into an OCI archive in dir and returns its path.
// The binary is static (CGO_ENABLED=0), built with -trimpath as the
// Dockerfile builds the controller: the image holds nothing else.
func BuildArchive(dir string, img Image) (string, error) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	name := filepath.Base(filepath.Clean(img.Package))
	if name == "." {
		name = "bar-controller"
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w "+img.LDFlags, "-o", bin, img.Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", img.Package, err, out)
	}
	spec := image.Spec{Binary: bin, Path: "/" + name, User: img.User, Architecture: runtime.GOARCH}
	if img.Package == "." {
		spec = image.Controller(bin, runtime.GOARCH)
	}
	built, err := image.Build(spec)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, name+".tar")
	return archive, image.WriteOCIArchive(archive, img.Ref, built)
}

// Import loads OCI archives into the node's containerd, in the namespace
// the CRI plugin (and so the kubelet) uses. Pods name them with
// imagePullPolicy IfNotPresent (the default for a tag other than latest),
// so nothing is ever pulled.
//
// One run in twenty, under load, had ctr give up dialing containerd ("failed
// to dial ... context deadline exceeded") right after containerd had
// imported the pause image. An import that could not reach containerd
// changed nothing, so it is tried again, up to importTries times; each
// miss is reported with what the host saw of containerd's process over
// the following seconds (Verdict), so that a containerd that stalls says
// how.
func (n *Node) Import(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		for try := 1; ; try++ {
			cmd := exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "--namespace", "k8s.io", "images", "import", a)
			out, err := cmd.CombinedOutput()
			if err == nil {
				break
			}
			err = fmt.Errorf("ctr images import %s: %v\n%s", a, err, out)
			if !strings.Contains(string(out), "failed to dial") || try == importTries {
				return err
			}
			fmt.Fprintf(os.Stderr, "realnode: try %d of %d: %v\ncontainerd: %s\n", try, importTries, err, n.containerdVerdict())
		}
	}
	return nil
}

// importTries bounds the imports of one archive that could not reach
// containerd.
const importTries = 3

// containerdVerdict samples containerd's process twice, 2 s apart.
func (n *Node) containerdVerdict() string {
	if len(n.procs) == 0 {
		return "not started"
	}
	a, err := TakeSample(n.procs[0].Pid())
	if err != nil {
		return err.Error()
	}
	time.Sleep(2 * time.Second)
	b, err := TakeSample(n.procs[0].Pid())
	if err != nil {
		return err.Error()
	}
	verdict, _ := Verdict(a, b)
	return verdict
}

// ContainerPID returns the host PID of a running container's main process,
// given the containerID of a Pod's container status ("containerd://<id>").
func (n *Node) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "--namespace", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		return 0, fmt.Errorf("ctr tasks ls: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// TASK PID STATUS
		if f := strings.Fields(line); len(f) == 3 && f[0] == id {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no task for container %s", id)
}
