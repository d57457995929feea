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
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

func TestJSONLogging(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w // the JSON handler writes to whatever os.Stderr is now
	err = setupLogging("json")
	os.Stderr = stderr
	if err != nil {
		t.Fatal(err)
	}
	defer klog.ClearLogger()

	klog.Background().Info("Synced Bar", "bar", "default/web")
	w.Close()
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var entry map[string]interface{}
	if err := json.Unmarshal(line, &entry); err != nil {
		t.Fatalf("not JSON: %q: %v", line, err)
	}
	if entry["msg"] != "Synced Bar" || entry["bar"] != "default/web" {
		t.Errorf("log entry %v lacks the message or its key/value", entry)
	}
}

func TestUnknownLoggingFormat(t *testing.T) {
	if err := setupLogging("xml"); err == nil {
		t.Error("setupLogging accepted --logging-format=xml")
	}
}
