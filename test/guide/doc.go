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

// Package guide holds the proofs of docs/informer-internals.md,
// docs/informer-topics.md and docs/writing-handlers.md: one test per
// behavioural claim about client-go or the API server, each quoting the
// claim in its doc comment, each cited next to the claim as
// "(proof: `TestName` in `test/guide/x_test.go`)". hack/verify-docs.sh
// fails when a cited test does not exist; make test runs them all.
//
// They run against the client-go of go.mod: fake clientsets and
// in-memory ListerWatchers where the behaviour is the client's alone, a
// real kube-apiserver (harness/localcluster, one per test binary) where
// it depends on the server.
package guide
