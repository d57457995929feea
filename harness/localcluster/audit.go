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
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The audit log is how a test counts what a controller running in its own
// process wrote: the API server records every write, with the user that
// made it, before it answers. The policy records writes only, at Metadata
// level (who, what, where; no bodies), once each, when the response is
// complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditFlags writes the policy and returns the API server flags that log
// to path. The log backend's blocking mode writes each event before the
// request returns, so a write is in the log by the time its caller knows
// about it.
func auditFlags(dir, path string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + path,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0", // never rotate: a test reads the whole file
	}, nil
}

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type AuditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	// Received is when the API server got the request, Completed when it
	// had answered it (and so, for a write, made it).
	Received  time.Time `json:"requestReceivedTimestamp"`
	Completed time.Time `json:"stageTimestamp"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// String is "verb resource[/subresource] namespace/name code".
func (e AuditEvent) String() string {
	if e.ObjectRef == nil {
		return e.Verb
	}
	r := e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		r += "/" + e.ObjectRef.Subresource
	}
	code := 0
	if e.ResponseStatus != nil {
		code = e.ResponseStatus.Code
	}
	return fmt.Sprintf("%s %s %s/%s %d", e.Verb, r, e.ObjectRef.Namespace, e.ObjectRef.Name, code)
}

// Writes returns the writes user made in namespace, oldest first, as the
// API server's audit log has them (Options.AuditLog must be set).
func (c *Cluster) Writes(user, namespace string) ([]AuditEvent, error) {
	return c.AuditedWrites(func(e AuditEvent) bool {
		return e.User.Username == user && e.ObjectRef != nil && e.ObjectRef.Namespace == namespace
	})
}

// AuditedWrites returns the writes that keep accepts, in the order the API
// server completed them (Options.AuditLog must be set).
func (c *Cluster) AuditedWrites(keep func(AuditEvent) bool) ([]AuditEvent, error) {
	if c.AuditLog == "" {
		return nil, fmt.Errorf("the cluster was started without Options.AuditLog")
	}
	f, err := os.Open(c.AuditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for s.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			// The last line may be half-written while the server runs.
			continue
		}
		if e.Stage == "ResponseComplete" && keep(e) {
			out = append(out, e)
		}
	}
	return out, s.Err()
}
