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

package adaptive

import (
	"net/http"
	"strings"
)

// Transport wraps a client's transport (rest.Config.Wrap) so that every
// write's answer reaches l.Observe. It sits below client-go's retries, so
// it sees each 429 as the API server sent it, and it should be the
// innermost wrapper (the first Wrap), so that what it times is the API
// server's answer and not a wait in another wrapper.
//
// Only writes are observed: the controller reads from its caches, and the
// reads a process does make (the informers' watches, which last minutes
// by design, a discovery request) say nothing about how fast a write is
// answered. With Config.Resources, only writes to those resources are.
func (l *Limiter) Transport(rt http.RoundTripper) http.RoundTripper {
	observed := map[string]bool{}
	for _, r := range l.cfg.Resources {
		observed[r] = true
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet || (len(observed) > 0 && !observed[resource(req.URL.Path)]) {
			return rt.RoundTrip(req)
		}
		sent := l.now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			// No answer (a cancelled context, a broken connection): not
			// a measure of the API server's load.
			return resp, err
		}
		throttled := resp.StatusCode == http.StatusTooManyRequests || resp.Header.Get("Retry-After") != ""
		l.Observe(Kind(req.Method, req.URL.Path), sent, l.now().Sub(sent), throttled)
		return resp, err
	})
}

// Kind names a request by its method and what it writes: "PATCH
// deployments", "PATCH bars/status", "POST events". Requests of one kind
// cost the API server alike, so each kind has its own baseline.
func Kind(method, path string) string {
	parts, ok := resourceParts(path)
	if !ok {
		return method + " " + path
	}
	switch len(parts) {
	case 0:
		return method
	case 1, 2:
		return method + " " + parts[0]
	default:
		return method + " " + parts[0] + "/" + parts[2]
	}
}

// resourceParts is RESOURCE[/NAME[/SUBRESOURCE]] of an API path:
// /api/v1/namespaces/NS/..., /apis/GROUP/VERSION/namespaces/NS/..., and
// the same without namespaces/NS for cluster-scoped resources.
func resourceParts(path string) ([]string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return nil, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return parts, true
}

// resource is the resource an API path names, "" for none.
func resource(path string) string {
	if parts, ok := resourceParts(path); ok && len(parts) > 0 {
		return parts[0]
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
