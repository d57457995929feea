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
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/barcontroller/bar-controller/internal/serving"
)

// Issue 39, seventh review, M1: a caller that sent a review and read none
// of its answer held the review's part of the budget until the server's
// write timeout, 15 s (answerTimeout), for the price of one send. Now the
// answer must be taken at serving's pace for a body of its size: for
// 512 KiB, within BodyGrace + 0.5 s = 2.5 s of its first write.
//
// The bound, 8 s, is the time from the budget's growth to its return: the
// 2.5 s the answer is given plus the conversion of a 512 KiB review and
// the handler's wake-up, which take milliseconds idle and under a second
// on a loaded machine under the race detector; it is well under the 15 s
// the part was held before, so the test fails without the pace.
func TestUnreadAnswerGivesBackItsPart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := serving.Listen(ctx, "conversion-webhook", "127.0.0.1:0", handler(NewConverter(), nil), nil, listenOptions(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.7")},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
			}); cerr != nil {
				return cerr
			}
			return err
		}}
	conn, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := reviewBody(512 << 10)
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", Path, len(body), body); err != nil {
		t.Fatal(err)
	}
	// The review is read whole (its part grown past 512 KiB), and the
	// caller reads nothing.
	grown := time.Now()
	for conversionReservedNow(t) < 512<<10 {
		if time.Since(grown) > 10*time.Second { // a hang bound
			t.Fatalf("the review's part did not grow past 512 KiB within 10 s: %v", conversionReservedNow(t))
		}
		time.Sleep(time.Millisecond)
	}
	grown = time.Now()
	for conversionReservedNow(t) != 0 {
		if time.Since(grown) > 8*time.Second {
			t.Fatalf("a review whose answer is not read still holds %v bytes of the budget 8 s on, want none after about 2.5 s", conversionReservedNow(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the budget's part given back %v after it grew", time.Since(grown).Round(time.Millisecond))
}

// answerDeadline: serving's pace for a body of the answer's size, never
// past the write timeout counted from the request's start.
func TestAnswerDeadline(t *testing.T) {
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		now  time.Duration // after start
		n    int
		want time.Duration // after start
	}{
		{0, 0, serving.BodyGrace},
		{time.Second, 1 << 20, time.Second + serving.BodyGrace + time.Second},
		{0, 12 << 20, 2*time.Second + 12*time.Second},
		{5 * time.Second, 12 << 20, answerTimeout},
	} {
		if got := answerDeadline(start, start.Add(tc.now), tc.n).Sub(start); got != tc.want {
			t.Errorf("an answer of %d bytes written %v after the start: deadline %v after it, want %v", tc.n, tc.now, got, tc.want)
		}
	}
}
