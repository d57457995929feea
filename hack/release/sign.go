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
	"os"
	"os/exec"
)

// sign signs the index digest in c.registry with cosign and c.cosignKey,
// which is any key reference cosign takes (a key file, env://VAR, a KMS
// URI), so that a release workflow signs with its own identity; a key
// file's password comes from $COSIGN_PASSWORD, as cosign reads it. The
// signature is stored in the registry beside the image (cosign's
// sha256-<digest>.sig tag), and verified with
//
//	cosign verify --key <public key> --insecure-ignore-tlog=true <repo>@<digest>
//
// Nothing is uploaded to a transparency log: this tool runs where only the
// registry can be reached, and the key, not a log entry, is what a user
// checks. A workflow that wants a log entry can sign again with cosign
// itself; the digest does not change.
func sign(ctx context.Context, c config, ref string) error {
	cmd := exec.CommandContext(ctx, c.cosign, "sign", "--yes", "--key", c.cosignKey, "--tlog-upload=false", ref)
	// Never ask on a terminal: a missing password must fail the release,
	// not wait for someone to type it.
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), "COSIGN_YES=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cosign sign %s: %v\n%s", ref, err, out)
	}
	return nil
}

// verifyCommand is the command the release notes give users.
func verifyCommand(ref string) string {
	return "cosign verify --key cosign.pub --insecure-ignore-tlog=true " + ref
}
