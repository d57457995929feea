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

package conversion

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/barcontroller/bar-controller/internal/metrics"
	"github.com/barcontroller/bar-controller/internal/serving"
)

// Issue 39, item 3: two addresses declare bodies as large as the webhook
// takes and send none of them. Reserved by their declared length, they
// held the whole budget (8 MiB) until the read timeout, and every review
// of the API server, from a third address, was refused 429. Reserved as
// their bytes arrive, they hold next to nothing, and the API server's
// review converts. On the webhook's real listener and handler.
func TestStalledBodiesLeaveTheBudgetToOthers(t *testing.T) {
	entered := make(chan string, 64)
	// Signals each request that got past the budget into the Converter.
	inner := NewConverter()
	h := handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Id"); id != "" {
			entered <- id
		}
		inner.ServeHTTP(w, r)
	}), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := serving.Listen(ctx, "conversion-webhook", "127.0.0.1:0", h, nil, listenOptions(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// Each address declares twice the largest review, in two requests
	// (all the budget between the two addresses), and sends no body.
	refused := make(chan int, 64)
	requests := 0
	for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for j := range 2 {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
			conn, err := d.Dial("tcp", addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Id: %d-%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				Path, i, j, maxRequestBytes)
			requests++
			go func() {
				if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
					refused <- resp.StatusCode
				}
			}()
		}
	}
	// Every stalled request is either in the Converter, waiting for its
	// body, or was refused. 10 s is a hang bound: either takes
	// microseconds, and the webhook cuts a stalled body after
	// serving.BodyGrace, answering it: counted once either way.
	for range requests {
		select {
		case <-entered:
		case code := <-refused:
			t.Logf("a stalled request was answered %d before its body", code)
		case <-time.After(10 * time.Second):
			t.Fatal("a stalled request neither reached the Converter nor was refused within 10 s")
		}
	}

	body, _ := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: "api-server", DesiredAPIVersion: "barcontroller.dev/v1",
			Objects: []runtime.RawExtension{{Raw: []byte(alphaBar)}}},
	})
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+addr.String()+Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the API server's review, from another address, while two addresses stall bodies of %d bytes: %d, want 200",
			2*maxRequestBytes, resp.StatusCode)
	}
}

// Two addresses send 3 MiB of a body each, and stop one byte short: they
// hold 6 MiB of the budget for as long as the listener lets a body that
// arrived so fast rest (serving.BodyGrace and 3 s), and the API server's
// largest review no longer fits. Where the operator named the API
// server's addresses, the others together leave it one largest review's
// room, and it converts.
func TestAPIServerRoom(t *testing.T) {
	for _, tc := range []struct {
		name      string
		apiServer []netip.Prefix
		want      int
	}{
		{"API server not named", nil, http.StatusTooManyRequests},
		{"API server named", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr, stop, err := serving.Listen(ctx, "conversion-webhook", "127.0.0.1:0", handler(NewConverter(), tc.apiServer), nil,
				listenOptions(tc.apiServer)...)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			readBefore := conversionMetric(t, "bar_controller_conversion_webhook_request_bytes_total")
			const size = 3 << 20
			refused := make(chan string, 2)
			var sent float64
			for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
				conn, err := d.Dial("tcp", addr.String())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", Path, size)
				go func() {
					if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil && resp.StatusCode == http.StatusTooManyRequests {
						refused <- src
					}
				}()
				if _, err := conn.Write(bytes.Repeat([]byte(" "), size-1)); err != nil {
					t.Logf("%s: %v", src, err) // refused while sending
				}
				sent += size - 1
			}
			// The webhook has read what it kept, and refused the rest. 10 s
			// is a hang bound: on loopback, 6 MiB take milliseconds, far
			// inside the bodies' deadline.
			deadline := time.Now().Add(10 * time.Second)
			want := sent
			for conversionMetric(t, "bar_controller_conversion_webhook_request_bytes_total")-readBefore < want {
				select {
				case src := <-refused:
					t.Logf("%s was refused as it sent its body", src)
					want -= size - 1
					continue
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the webhook neither read nor refused the two bodies within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			code, err := postReview(addr.String(), maxRequestBytes-64<<10)
			if errors.Is(err, syscall.ECONNRESET) && tc.want == http.StatusTooManyRequests {
				// Answered 429 and closed while the client still wrote the
				// body: the reset can reach it before the answer. The API
				// server's client retries either.
				t.Logf("the API server's review: %v", err)
				code = tc.want
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("the API server's review of %d bytes, while two addresses hold 3 MiB each: %d, want %d", maxRequestBytes-64<<10, code, tc.want)
			}
		})
	}
}

// postReview sends a valid ConversionReview of about n bytes (a v1alpha1
// Bar with an annotation that fills it) from 127.0.0.1 and returns the
// answer's status.
func postReview(addr string, n int) (int, error) {
	head := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"big","desiredAPIVersion":"barcontroller.dev/v1",` +
		`"objects":[{"apiVersion":"barcontroller.dev/v1alpha1","kind":"Bar","metadata":{"name":"big","namespace":"default","annotations":{"big":"`
	tail := `"}},"spec":{"deploymentName":"big","image":"nginx"}}]}}`
	body := head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://"+addr+Path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// conversionMetric is a metric of the webhook as this process serves it.
func conversionMetric(t *testing.T, name string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(metrics.NewRegistry(), false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}
