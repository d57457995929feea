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

package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONLogging(t *testing.T) {
	var buf bytes.Buffer
	logger := NewJSONLogger(&buf, 2)
	logger.Info("Synced Bar", "bar", "default/web")
	logger.V(2).Info("Applied Deployment")
	logger.V(3).Info("too verbose for -v=2")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines at -v=2, got %d: %q", len(lines), lines)
	}
	var entry map[string]interface{}
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("not JSON: %q: %v", lines[0], err)
	}
	if entry["msg"] != "Synced Bar" || entry["bar"] != "default/web" {
		t.Errorf("log entry %v lacks the message or its key/value", entry)
	}
}

func TestUnknownLoggingFormat(t *testing.T) {
	if err := Setup("xml"); err == nil {
		t.Error("setupLogging accepted --logging-format=xml")
	}
}
