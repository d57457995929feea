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

package faults

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// What a flood can take from the syncs, read from the API server's audit
// log rather than from the wall clock. What the controller's identity
// costs the API server while it syncs is there: its writes (localcluster's
// policy logs every write, at ResponseComplete, with
// requestReceivedTimestamp and stageTimestamp), its Lease renewals, and
// the metrics endpoint's TokenReviews and SubjectAccessReviews, which are
// creates too; not its reads, which after the caches' first lists and
// watches come from the caches. API
// Priority and Fairness sits inside the audit filter, so a request it
// rejects is logged with 429, and one it admits with the time from its
// receipt to its answer: the time it held its seat, and a little more
// (authentication, the audit write), so a sum of them errs on the side of
// charging the reviews too much.

// runAudit is one run's share of the audit log: the installed
// ServiceAccount's requests received between the run's first and last
// moment, and its writes in the run's namespace.
type runAudit struct {
	// Reviews the API server answered (not rejected with 429), and their
	// user agents. reviewAttempts counts the rejected ones too: client-go
	// sends a rejected review again after the Retry-After.
	tokenReviews, accessReviews, reviewAttempts int
	reviewAgents                                map[string]int
	// reviewSeat is the time the answered reviews spent in the API server,
	// summed: the seat-time they were charged in the controller's
	// priority level. syncSeat is the same for the controller's writes.
	reviewSeat, syncSeat time.Duration
	// writes counts the controller's writes that succeeded, by "verb
	// resource[/subresource]"; attempts counts every one of them, and
	// rejected those API Priority and Fairness answered with 429.
	writes             map[string]int
	attempts, rejected int
	// displaced counts the rejected writes that arrived while an answered
	// review was in the API server: the syncs the reviews turned away.
	// With one seat, a sync's write that comes while a review holds it is
	// rejected and waits out a Retry-After; with many seats this also
	// counts writes that were turned away for other reasons, so it is an
	// upper bound on what the reviews took.
	displaced int
	// renewals counts the Lease's successful renewals in the run; the
	// longest gap includes the run's edges, so a stall at its start or end
	// shows too.
	renewals    int
	maxRenewGap time.Duration
}

// auditRun reads the log once the run's controller has exited: from is
// before the run's first request, stopAt when the controller was told to
// stop (its Lease release, which follows, is no renewal), to after it
// exited.
func auditRun(t *testing.T, c *localcluster.Cluster, ns string, from, stopAt, to time.Time) runAudit {
	t.Helper()
	events, err := c.AuditedWrites(func(ev localcluster.AuditEvent) bool {
		return ev.User.Username == localcluster.ControllerUser && ev.ObjectRef != nil &&
			!ev.Received.Before(from) && !ev.Received.After(to)
	})
	if err != nil {
		t.Fatal(err)
	}
	a := runAudit{reviewAgents: map[string]int{}, writes: map[string]int{}}
	var reviews, turnedAway []localcluster.AuditEvent
	var renewedAt []time.Time
	for _, ev := range events {
		code := 0
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		seat := ev.Completed.Sub(ev.Received)
		switch res := ev.ObjectRef.Resource; {
		case res == "tokenreviews" || res == "subjectaccessreviews":
			a.reviewAttempts++
			a.reviewAgents[ev.UserAgent]++
			if code == http.StatusTooManyRequests {
				continue
			}
			if res == "tokenreviews" {
				a.tokenReviews++
			} else {
				a.accessReviews++
			}
			a.reviewSeat += seat
			reviews = append(reviews, ev)
		case res == "leases" && ev.ObjectRef.Name == leaseName && ev.Verb == "update":
			if code < 300 && ev.Completed.Before(stopAt) {
				a.renewals++
				renewedAt = append(renewedAt, ev.Completed)
			}
		case ev.ObjectRef.Namespace == ns:
			a.attempts++
			switch {
			case code == http.StatusTooManyRequests:
				a.rejected++
				turnedAway = append(turnedAway, ev)
			case code < 300:
				a.syncSeat += seat
				r := res
				if ev.ObjectRef.Subresource != "" {
					r += "/" + ev.ObjectRef.Subresource
				}
				a.writes[ev.Verb+" "+r]++
			}
		}
	}
	for _, w := range turnedAway {
		for _, r := range reviews {
			if !w.Received.Before(r.Received) && !w.Received.After(r.Completed) {
				a.displaced++
				break
			}
		}
	}
	last := from
	for _, at := range append(renewedAt, stopAt) {
		a.maxRenewGap = max(a.maxRenewGap, at.Sub(last))
		last = at
	}
	return a
}

// String lists the counts in a fixed order, for the log.
func (a runAudit) String() string {
	kinds := make([]string, 0, len(a.writes))
	for k, n := range a.writes {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("writes [%s] in %d attempts (%d rejected, %d of them while a review held a seat), seat %v; "+
		"reviews %d token + %d access (%d attempts), seat %v; Lease renewals %d, longest gap %v",
		strings.Join(kinds, ", "), a.attempts, a.rejected, a.displaced, a.syncSeat.Round(time.Millisecond),
		a.tokenReviews, a.accessReviews, a.reviewAttempts, a.reviewSeat.Round(time.Millisecond),
		a.renewals, a.maxRenewGap.Round(10*time.Millisecond))
}

// levelSeats is the priority level's nominal seats, by the API server's
// metrics: the seats its requests share.
func (e *env) levelSeats(t *testing.T, level string) float64 {
	t.Helper()
	client, err := rest.HTTPClientFor(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	m, err := localcluster.Scrape(client, e.cluster.Server+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	seats, _ := m.Value("apiserver_flowcontrol_nominal_limit_seats", map[string]string{"priority_level": level})
	if seats < 1 {
		t.Fatalf("priority level %s has %v seats", level, seats)
	}
	return seats
}

// waitEventsWritten waits until the controller has written an Event for
// every Bar in the run's namespace (the third write per Bar, sent after
// the sync that caused it), so that the run is stopped with nothing of its
// work still under way and its write counts are whole. A hang bound, not a
// performance claim: in the 10 runs measured, convergence to the
// controller's exit took at most 4.2 s without a flood (5.6 s with one,
// its stop included); if the minute runs out, the counts compared
// afterwards say what is missing.
func waitEventsWritten(t *testing.T, c *localcluster.Cluster, ns string, want int) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		events, err := c.AuditedWrites(func(ev localcluster.AuditEvent) bool {
			return ev.User.Username == localcluster.ControllerUser && ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns &&
				ev.ObjectRef.Resource == "events" && ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
		})
		return err == nil && len(events) >= want, nil
	})
}
