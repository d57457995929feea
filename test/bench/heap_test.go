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
	"reflect"
	"testing"

	"github.com/google/pprof/profile"
)

// summarize counts inuse_space only (not the allocation columns next to
// it), charges each sample to the first function above the runtime, and
// keeps the largest holders.
func TestSummarize(t *testing.T) {
	fn := func(name string) *profile.Location {
		return &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: name}}}}
	}
	malloc, trim, decode, index := fn("runtime.mallocgc"), fn("main.trimDeployment"), fn("json.literalStore"), fn("cache.addKeyToIndex")
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_space"}, {Type: "inuse_space"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{malloc, trim}, Value: []int64{9000, 300}},
			{Location: []*profile.Location{decode}, Value: []int64{9000, 200}},
			{Location: []*profile.Location{malloc, trim, decode}, Value: []int64{9000, 100}},
			{Location: []*profile.Location{index}, Value: []int64{9000, 50}},
		},
	}
	got, err := summarize(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := heapSummary{Live: 650, Top: []holder{{"main.trimDeployment", 400}, {"json.literalStore", 200}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if _, err := summarize(&profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space"}}}, 2); err == nil {
		t.Errorf("a profile without inuse_space: no error")
	}
}

// parseHeapAlloc reads the MemStats block a text heap profile ends with,
// and says so when it is missing.
func TestParseHeapAlloc(t *testing.T) {
	text := "heap profile: 3: 96 [3: 96] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 26305560\n# TotalAlloc = 90\n# Sys = 1\n# Lookups = 0\n# Mallocs = 7\n# Frees = 2\n# HeapAlloc = 26305560\n# HeapSys = 3\n"
	if got, err := parseHeapAlloc([]byte(text)); err != nil || got != 26305560 {
		t.Errorf("parseHeapAlloc = %d, %v; want 26305560", got, err)
	}
	if _, err := parseHeapAlloc([]byte("heap profile: 0: 0 [0: 0] @ heap/1048576\n")); err == nil {
		t.Error("parseHeapAlloc without a HeapAlloc line: no error")
	}
}
