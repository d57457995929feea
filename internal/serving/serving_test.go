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
	"io"
	"net"
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
	// Plain HTTP to the HTTPS port: the server's handshake fails. The
	// bounds are hang bounds: the line is logged within milliseconds on an
	// idle machine, and the loop ends as soon as it is.
	client := &http.Client{Timeout: hangBound}
	if resp, err := client.Get("http://" + addr.String() + "/"); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(hangBound)
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

// A body sent a byte at a time is cut off by the read timeout: the
// handler's read fails, and the server closes the connection, instead of
// holding both for as long as the sender likes.
func TestSlowBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		readErr <- err
	})
	addr, stop, err := Listen(context.Background(), "slow", "127.0.0.1:0", h, nil, WithReadTimeout(300*time.Millisecond),
		withReadHeaderTimeout(time.Hour), WithBodies())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The sender keeps going for 10 s or more, and a server without a read
	// timeout would read on; the wait is a hang bound, far past the
	// timeout's 300 ms.
	stopSending := make(chan struct{})
	defer close(stopSending)
	go func() {
		for range 100 {
			select {
			case <-stopSending:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(conn, "x"); err != nil {
				return
			}
		}
	}()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the handler read the whole slow body")
		}
		t.Logf("the handler's read ended with: %v", err)
	case <-time.After(hangBound):
		t.Fatalf("the handler was still reading the slow body after %v", hangBound)
	}
}
