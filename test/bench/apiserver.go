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

package main

import (
	"crypto/tls"
	"net/http"
	"sort"
	"strings"

	"github.com/barcontroller/bar-controller/harness/localcluster"
)

// requests is the API server's own count of requests it served, by
// "VERB resource[/subresource]", from apiserver_request_total: what every
// client did, counted where no client can under-report it.
type requests map[string]float64

func scrapeRequests(c *localcluster.Cluster) (requests, error) {
	m, err := localcluster.Scrape(loopbackClient(), c.Server+"/metrics", c.Config.BearerToken)
	if err != nil {
		return nil, err
	}
	r := requests{}
	f := m["apiserver_request_total"]
	if f == nil {
		return r, nil
	}
	for _, metric := range f.GetMetric() {
		var verb, resource, sub string
		for _, l := range metric.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if sub != "" {
			resource += "/" + sub
		}
		r[verb+" "+resource] += metric.GetCounter().GetValue()
	}
	// A watch that begins with a list (WatchList: an informer's initial
	// list, or a relist) is counted once more when its initial events end.
	for _, metric := range m["apiserver_watch_list_duration_seconds"].GetMetric() {
		for _, l := range metric.GetLabel() {
			if l.GetName() == "resource" {
				r[watchList+" "+l.GetValue()] += float64(metric.GetHistogram().GetSampleCount())
			}
		}
	}
	return r, nil
}

// watchList is the verb requests counts watches that began with a list
// under; the API server's own verb for them is WATCH.
const watchList = "WATCHLIST"

// loopbackClient is for the servers the bench starts on 127.0.0.1: the
// test API server and the controller's metrics endpoint, whose
// certificates are self-signed; the bearer token sent is what matters.
func loopbackClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- self-signed certificates on loopback
}

// since returns r minus before.
func (r requests) since(before requests) requests {
	d := requests{}
	for k, v := range r {
		if v-before[k] > 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// writes sums the writes to resources for which keep is true. The API
// server's own bookkeeping (its identity Lease) is never counted.
func (r requests) writes(keep func(resource string) bool) float64 {
	var total float64
	for k, v := range r {
		verb, resource, _ := strings.Cut(k, " ")
		if writeVerbs[verb] && resource != "leases" && keep(resource) {
			total += v
		}
	}
	return total
}

func (r requests) count(verb string, keep func(resource string) bool) float64 {
	var total float64
	for k, v := range r {
		vb, resource, _ := strings.Cut(k, " ")
		if vb == verb && keep(resource) {
			total += v
		}
	}
	return total
}

// describe lists the writes as "VERB resource n", for the report.
func (r requests) describe() string {
	var parts []string
	for k, v := range r {
		verb, resource, _ := strings.Cut(k, " ")
		if writeVerbs[verb] && resource != "leases" && v > 0 {
			parts = append(parts, k+" "+trimFloat(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
