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

package serving

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// A failed TLS handshake is logged through the endpoint's logger, named,
// not printed by net/http's default logger on stderr.
func TestServerErrorsGoToTheLogger(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("localhost", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := Listen(klog.NewContext(context.Background(), logger), "webhook", "127.0.0.1:0",
		http.NotFoundHandler(), &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Plain HTTP to the HTTPS port: the server's handshake fails.
	client := &http.Client{Timeout: 5 * time.Second}
	if resp, err := client.Get("http://" + addr.String() + "/"); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(lines, "\n")
		mu.Unlock()
		if strings.Contains(got, `"msg"="HTTP server error"`) && strings.Contains(got, `"endpoint"="webhook"`) && strings.Contains(got, "TLS handshake error") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no handshake error in the endpoint's log:\n%s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
