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
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// unreadAnswers is a handler whose answers fill any buffer: a caller
// that asks and does not read holds the server's write.
var unreadAnswers = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, strings.Repeat("x", 4<<20))
})

// dialSmall connects from src with a 4 KiB receive buffer, set before the
// connection so that the window it offers stays small, sends req (by
// default one GET) and never reads: what the server writes waits in its
// own buffers.
func dialSmall(t *testing.T, src, addr string, req ...string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: hangBound,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
			}); cerr != nil {
				return cerr
			}
			return err
		}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if len(req) == 0 {
		req = []string{"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"}
	}
	if _, err := io.WriteString(conn, strings.Join(req, "")); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Issue 39, third review, C1: a caller that did not read its answers held
// its connection busy for as long as it liked, and four addresses of 16
// such connections kept the kubelet's probes out. A connection whose
// answer waits for its caller now gives way to a newcomer from an address
// holding fewer, as one waiting for a body does. Before, the newcomer was
// refused.
func TestUnreadAnswersGiveWay(t *testing.T) {
	endpoint := "unread-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	limits := ConnLimits{Total: 4, PerSource: 2}
	a, l := listen(t, endpoint, unreadAnswers, limits)
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		for range limits.PerSource {
			dialSmall(t, src, a)
		}
	}
	waitState(t, l, connWaiting, limits.Total)
	c := dialFrom(t, "127.0.0.4", a)
	if c.conn == nil {
		t.Fatal("127.0.0.4: not connected")
	}
	_ = c.conn.SetDeadline(time.Now().Add(hangBound))
	if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("a newcomer, every connection's answer unread: %v, want its answer", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := listenerCounts(t, endpoint)[`bar_controller_listener_connections_refused_total{reason="evicted"}`]; got != 1 {
		t.Errorf("evicted: %v, want 1", got)
	}
}

// Issue 39, third review, M1: the kernel's buffers of a connection whose
// caller does not read are capped (socketBuffer): left to the kernel, the
// answers waiting in them grew to megabytes a connection, outside the Go
// heap.
func TestUnreadAnswersAreCappedInTheKernel(t *testing.T) {
	endpoint := "kernel-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a, l := listen(t, endpoint, unreadAnswers, ConnLimits{Total: 4, PerSource: 4})
	dialSmall(t, "127.0.0.2", a)
	waitState(t, l, connWaiting, 1)
	var server *limitedConn
	l.mu.Lock()
	for _, conns := range l.bySource {
		server = conns[0]
	}
	l.mu.Unlock()
	// The server's unsent bytes (TIOCOUTQ), once they stop growing.
	queued := func() int {
		var n int32
		rc, err := server.Conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) {
			if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
				t.Fatal(errno)
			}
		}); err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	last := -1
	for deadline := time.Now().Add(hangBound); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := queued()
		if n == last {
			break
		}
		last = n
	}
	if last > 2*socketBuffer {
		t.Errorf("the server holds %d bytes of unread answers in the kernel, want at most %d", last, 2*socketBuffer)
	}
	t.Logf("unsent bytes in the server's socket: %d", last)
}

// The probes' endpoint answers one request a connection: requests
// pipelined behind it are never answered, so no answer can wait there for
// a caller that does not read it.
func TestProbesAnswerOneRequestAConnection(t *testing.T) {
	endpoint := "probes-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a, _ := listen(t, endpoint, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		DefaultConnLimits, ForProbes())
	c := dialFrom(t, "127.0.0.2", a)
	if c.conn == nil {
		t.Fatal("not connected")
	}
	_ = c.conn.SetDeadline(time.Now().Add(hangBound))
	if _, err := io.WriteString(c.conn, strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3)); err != nil {
		t.Fatal(err)
	}
	answers := 0
	for {
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			break // the connection's end
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers++
	}
	if answers != 1 {
		t.Errorf("three pipelined requests: %d answered, want 1 and the connection closed", answers)
	}
}

// Issue 39, fourth review, C1: a connection the server closed with an
// answer its caller had not taken stayed in the kernel as an orphan, its
// unsent bytes with it, for minutes and outside every count of the
// listener. It is reset instead: the caller that reads afterwards gets
// what its own buffer held and then the reset, not the rest and an EOF.
func TestClosedWithUnreadAnswerIsReset(t *testing.T) {
	endpoint := "orphan-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// The answer is far more than the caller's and the server's buffers
	// hold: the server's write waits on the caller with most of it
	// unsent, and the test then ends that write (as a write timeout
	// would), so net/http closes the connection.
	const size = 4 << 20
	a, l := listen(t, endpoint, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", size))
	}), DefaultConnLimits)
	conn := dialSmall(t, "127.0.0.2", a)
	waitState(t, l, connWaiting, 1)
	var server net.Conn
	l.mu.Lock()
	for _, conns := range l.bySource {
		server = conns[0].Conn
	}
	l.mu.Unlock()
	// Bytes in the kernel the caller has not taken: it never reads, so
	// they stay.
	for deadline := time.Now().Add(hangBound); unsent(server) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing of the answer queued after %v", hangBound)
		}
	}
	_ = server.SetWriteDeadline(time.Now())
	for deadline := time.Now().Add(hangBound); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		open := l.open
		l.mu.Unlock()
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still holds the connection after %v", hangBound)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(hangBound))
	n, err := io.Copy(io.Discard, conn)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read %d bytes of a %d-byte answer, then %v: want a reset", n, size, err)
	}
	if got := listenerCounts(t, endpoint)[`bar_controller_listener_unread_resets_total{}`]; got != 1 {
		t.Errorf("unread resets: %v, want 1", got)
	}
}

// Issue 39, sixth review, m1: the metrics endpoint had no write timeout,
// so a connection whose caller read none of its answers held its place
// for as long as the caller stayed. With one, the write ends and the
// connection closes: here with the timeout shortened, since the metrics
// endpoint's own (ForMetrics: a minute) is the same net/http deadline.
func TestUnreadAnswersEndWithTheWriteTimeout(t *testing.T) {
	var s settings
	s.srv = &http.Server{}
	ForMetrics()(&s)
	if s.srv.WriteTimeout != MetricsWriteTimeout {
		t.Errorf("ForMetrics: WriteTimeout %v, want %v", s.srv.WriteTimeout, MetricsWriteTimeout)
	}

	endpoint := "writeend-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, l := listen(t, endpoint, unreadAnswers, ConnLimits{Total: 4, PerSource: 4}, WithWriteTimeout(200*time.Millisecond))
	dialSmall(t, "127.0.0.2", l.Addr().String())
	waitState(t, l, connWaiting, 1)
	for deadline := time.Now().Add(hangBound); ; time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		open := l.open
		l.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection whose caller reads no answer is still open %v after its write timeout", hangBound)
		}
	}
}
