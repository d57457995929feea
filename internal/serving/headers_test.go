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
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// request is a GET with lines header lines in all (the request line and
// Host included).
func request(lines int) string {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: x\r\n")
	for i := 2; i < lines; i++ {
		fmt.Fprintf(&b, "X-%d: a\r\n", i)
	}
	b.WriteString("\r\n")
	return b.String()
}

// answers writes raw on one connection and reads answers until the server
// closes it (or hangBound passes), returning their codes.
func answers(t *testing.T, addr, raw string, want int) []int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, raw) // the server may close it before all is written
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	r := bufio.NewReader(conn)
	var codes []int
	for len(codes) <= want {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// A request may have MaxHeaderLines lines; one more is answered 400, and
// its connection closed. The count starts again with each request on a
// kept-alive connection.
func TestHeaderLinesAreBounded(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	addr, _ := listenFor(t, ok, withReadHeaderTimeout(time.Hour))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	r := bufio.NewReader(conn)
	for i := range 3 {
		if _, err := io.WriteString(conn, request(MaxHeaderLines)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("request %d of %d lines on one connection: %v", i+1, MaxHeaderLines, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("request %d of %d lines on one connection: %d, want 200", i+1, MaxHeaderLines, resp.StatusCode)
		}
	}
	if got := answers(t, addr, request(MaxHeaderLines+1), 1); fmt.Sprint(got) != "[400]" {
		t.Errorf("a request of %d lines: answers %v, want [400] and the connection closed", MaxHeaderLines+1, got)
	}
}

// A request sent before the answer to the one before it (pipelined) may
// be read ahead, where its lines are not counted: the connection answers
// what net/http already read (its buffer's 4 KiB at most), then the next
// read closes it. None of the endpoints' callers pipeline.
func TestPipelinedRequestsCloseTheConnection(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	addr, _ := listenFor(t, ok, withReadHeaderTimeout(time.Hour))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	if _, err := io.WriteString(conn, request(3)+request(3)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	answered := 0
	for ; answered < 2; answered++ {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	if answered == 0 {
		t.Fatal("no answer to the first request")
	}
	// The server reads again only for a request after those: it finds
	// the connection refused.
	_, _ = io.WriteString(conn, request(3))
	if resp, err := http.ReadResponse(r, nil); err == nil {
		t.Errorf("after %d pipelined requests answered, another was answered %d; want the connection closed", answered, resp.StatusCode)
	}
}

// "OPTIONS *" is no way around it: net/http answered it itself, without
// the handler that tells the count where the request ends, and a request
// sent behind it was read ahead and served with 696 header lines (a
// fourteenth review).
func TestOptionsStarIsCountedToo(t *testing.T) {
	var most int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		most = max(most, len(r.Header))
		fmt.Fprint(w, "ok")
	})
	addr, _ := listenFor(t, h, withReadHeaderTimeout(time.Hour))
	got := answers(t, addr, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"+request(300), 2) // 3.3 KiB: read ahead whole, in net/http's 4 KiB
	if most > MaxHeaderLines {
		t.Errorf("answers %v; a handler saw %d headers, want at most %d", got, most, MaxHeaderLines)
	}
}

// Where bodies are taken, a body must declare its length: the API server's
// reviews do, and without it the count cannot tell where a body ends.
func TestBodiesDeclareTheirLength(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	addr, _ := listenFor(t, h, WithBodies(), withReadHeaderTimeout(time.Hour))
	chunked := "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	if got := answers(t, addr, chunked, 1); fmt.Sprint(got) != "[411]" {
		t.Errorf("a chunked body: answers %v, want [411] and the connection closed", got)
	}
	declared := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
	if got := answers(t, addr, declared, 0); fmt.Sprint(got) != "[200]" {
		t.Errorf("a body of declared length: answers %v, want [200]", got)
	}
}

// A caller that sends its next request as soon as it has read an answer
// is not pipelining, though net/http's background read may take the next
// request's first byte before the answer's end is recorded, as the API
// server's conversions on a kept-alive connection did (TestUpgradeFromV1alpha1Release
// got an EOF): every request is answered.
func TestKeptAliveRequestsAreNotPipelined(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	})
	addr, _ := listenFor(t, ok, WithBodies(), withReadHeaderTimeout(time.Hour))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	r := bufio.NewReader(conn)
	const n = 500
	for i := range n {
		req := request(3)
		if i%2 == 1 {
			req = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
		}
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatalf("request %d of %d: %v", i+1, n, err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("request %d of %d, each sent after the answer before it: %v", i+1, n, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
}
