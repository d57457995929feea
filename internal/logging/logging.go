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

// Package logging selects the log format: klog's text, or JSON lines.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// Setup picks the log format. Text is klog's own. JSON goes through
// log/slog, one object per line, for log pipelines; klog's -v still sets
// the verbosity (logr's V(n) is slog level -n).
func Setup(format string) error {
	switch format {
	case "text":
		return nil
	case "json":
		verbosity := 0
		if f := flag.Lookup("v"); f != nil {
			verbosity, _ = strconv.Atoi(f.Value.String())
		}
		klog.SetLogger(NewJSONLogger(os.Stderr, verbosity))
		return nil
	default:
		return fmt.Errorf("--logging-format=%q: want text or json", format)
	}
}

// NewJSONLogger logs one JSON object per line to w, up to verbosity.
func NewJSONLogger(w io.Writer, verbosity int) logr.Logger {
	return logr.FromSlogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.Level(-verbosity)}))
}
