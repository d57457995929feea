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
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

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
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := serving.Listen(ctx, "conversion-webhook", "127.0.0.1:0", h, nil, listenOptions()...)
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
