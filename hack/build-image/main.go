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

// Command build-image packs a static bar-controller binary into its
// container image, an OCI archive, with no Docker engine and no registry
// (make image-tar). Load it into containerd with
//
//	ctr -n k8s.io images import <archive>
//
// or into Docker with docker load.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/barcontroller/bar-controller/internal/image"
)

func main() {
	binary := flag.String("binary", "", "the static bar-controller binary to ship")
	ref := flag.String("ref", "bar-controller:dev", "the image's name and tag")
	out := flag.String("out", "", "where to write the OCI archive")
	arch := flag.String("arch", runtime.GOARCH, "the architecture the binary was built for")
	flag.Parse()
	if *binary == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: build-image --binary=FILE --out=FILE [--ref=NAME:TAG] [--arch=GOARCH]")
		os.Exit(2)
	}
	if err := run(*binary, *ref, *out, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(binary, ref, out, arch string) error {
	spec := image.Controller(binary, arch)
	// make passes the commit time, so a rebuild of a commit is bit for bit
	// the same.
	created, _, err := image.SourceDateEpoch()
	if err != nil {
		return err
	}
	spec.Created = created
	img, err := image.Build(spec)
	if err != nil {
		return err
	}
	if err := image.WriteOCIArchive(out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", out, ref, digest)
	return nil
}
