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

package metrics

import "github.com/prometheus/client_golang/prometheus"

// What the listeners (internal/serving) refused or cut before a handler
// could: a flood of connections, of slow headers or of stalled bodies
// shows up here, by endpoint (conversion-webhook, metrics, health: one
// per listener the binary opens) and by reason. Never by source address:
// the sources are whoever can reach the Pod, unbounded.

// The "reason" label of bar_controller_listener_connections_refused_total.
const (
	// ListenerRefusedSource: the source address has its maximum of
	// connections open; the new one is closed at once.
	ListenerRefusedSource = "per_source"
	// ListenerRefusedTotal: the listener has its maximum of connections
	// open, and none may give way to the new one (internal/serving's
	// limitListener says which may); the new one is closed at once.
	ListenerRefusedTotal = "total"
	// ListenerEvicted: the listener had its maximum open, and one that
	// waited on its caller (idle, or waiting for its body) was closed to
	// admit a new one from an address holding fewer.
	ListenerEvicted = "evicted"
)

var (
	listenerConnections = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bar_controller_listener_connections",
		Help: "Connections open on each listener (endpoint: conversion-webhook, metrics, health).",
	}, []string{"endpoint"})
	listenerRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_listener_connections_refused_total",
		Help: "Connections a listener closed because of its connection limits, by endpoint and reason (per_source, total: refused at accept; evicted: one waiting on its caller closed to admit a new one).",
	}, []string{"endpoint", "reason"})
	listenerUnserved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_listener_connections_unserved_total",
		Help: "Connections that ended before a request reached a handler: a failed TLS handshake, headers too large (431) or too slow, or nothing sent; by endpoint.",
	}, []string{"endpoint"})
	listenerUnread = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_listener_unread_resets_total",
		Help: "Connections a listener reset as it closed them, because their caller had not taken all that was written to them, by endpoint.",
	}, []string{"endpoint"})
	listenerSlowBodies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bar_controller_listener_slow_bodies_total",
		Help: "Requests whose body arrived slower than the listener's minimum rate and was cut off, by endpoint.",
	}, []string{"endpoint"})
)

func listenerCollectors() []prometheus.Collector {
	return []prometheus.Collector{listenerConnections, listenerRefused, listenerUnserved, listenerUnread, listenerSlowBodies}
}

// SetListenerConnections records how many connections endpoint has open.
func SetListenerConnections(endpoint string, n int) {
	listenerConnections.WithLabelValues(endpoint).Set(float64(n))
}

// RecordListenerRefused counts a connection closed by endpoint's limits.
func RecordListenerRefused(endpoint, reason string) {
	listenerRefused.WithLabelValues(endpoint, reason).Inc()
}

// RecordListenerUnserved counts a connection that ended before any
// request reached a handler.
func RecordListenerUnserved(endpoint string) {
	listenerUnserved.WithLabelValues(endpoint).Inc()
}

// RecordListenerUnread counts a connection reset as it was closed, with
// bytes its caller had not taken.
func RecordListenerUnread(endpoint string) {
	listenerUnread.WithLabelValues(endpoint).Inc()
}

// RecordSlowBody counts a request body cut off for its rate.
func RecordSlowBody(endpoint string) {
	listenerSlowBodies.WithLabelValues(endpoint).Inc()
}
