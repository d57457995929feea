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
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/barcontroller/bar-controller/internal/apiauth"
	"github.com/barcontroller/bar-controller/internal/version"
)

// TestValidateFlags: --profiling behind plain HTTP would hand the
// process's memory to anyone who reaches the port, so it does not start.
func TestValidateFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--profiling"}, ""},
		{[]string{"--metrics-secure=false"}, ""},
		{[]string{"--profiling", "--metrics-secure=false"}, "--profiling requires --metrics-secure"},
		{[]string{"--gc-headroom-percent=0"}, ""},
		{[]string{"--gc-headroom-percent=100"}, ""},
		{[]string{"--gc-headroom-percent=-1"}, "want 0 (off) to 100"},
		{[]string{"--gc-headroom-percent=101"}, "want 0 (off) to 100"},
		{[]string{"--metrics-secure=false", "--profiling=true"}, "--profiling requires --metrics-secure"},
		{[]string{"--trace=default/*"}, ""},
		{[]string{"--trace=default/[x"}, "--trace=\"default/[x\""},
		{[]string{"--shards=3"}, "requires --leader-elect"},
		{[]string{"--shards=3", "--leader-elect"}, ""},
		{[]string{"--shards=257", "--leader-elect"}, "want 1 to 256"},
	} {
		var o options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v, want no error", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestMetricsAuthConfig: the reviews' client is a copy with a limit of its
// own, whatever the controller's (no client-side limit by default), and a
// user agent of its own; the controller's configuration is left alone. The
// limit is exactly the filter's, every lane's rate and burst summed: below
// it, reviews the filter admitted would wait in client-go until they time
// out (a lane added to the filter but not to this sum did just that).
func TestMetricsAuthConfig(t *testing.T) {
	// As restConfig makes it with the default flags.
	cfg := rest.AddUserAgent(&rest.Config{Host: "https://api.example:6443", QPS: -1, Burst: 400}, "bar-controller/"+version.Version())
	o := apiauth.DefaultOptions()
	c := metricsAuthConfig(cfg, o)
	if c.QPS != float32(o.Rate()) || c.Burst != o.Burst() || c.Timeout != o.Timeout {
		t.Errorf("QPS %v, burst %d, timeout %v: want the filter's %v, %d and the review timeout %v", c.QPS, c.Burst, c.Timeout, o.Rate(), o.Burst(), o.Timeout)
	}
	if !strings.HasSuffix(c.UserAgent, "(metrics-auth)") {
		t.Errorf("user agent %q, want one of its own", c.UserAgent)
	}
	if cfg.QPS != -1 || cfg.Timeout != 0 || strings.Contains(cfg.UserAgent, "metrics-auth") {
		t.Errorf("the controller's configuration changed: QPS %v, timeout %v, user agent %q", cfg.QPS, cfg.Timeout, cfg.UserAgent)
	}
}

// TestDisableCompression: the controller does not accept gzip by default,
// --disable-compression=false lets it, and a kubeconfig that disables
// compression for its cluster is obeyed either way.
func TestDisableCompression(t *testing.T) {
	for _, tc := range []struct {
		name       string
		kubeconfig bool // the kubeconfig's cluster says disable-compression: true
		flag       string
		want       bool
	}{
		{"default", false, "", true},
		{"flag false", false, "--disable-compression=false", false},
		{"flag false, kubeconfig disables", true, "--disable-compression=false", true},
		{"default, kubeconfig disables", true, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			kc := clientcmdapi.NewConfig()
			kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://api.example:6443", DisableCompression: tc.kubeconfig}
			kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
			kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
			kc.CurrentContext = "x"
			if err := clientcmd.WriteToFile(*kc, path); err != nil {
				t.Fatal(err)
			}
			var o options
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			o.addFlags(fs)
			args := []string{"--kubeconfig=" + path}
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			cfg, err := restConfig(o)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DisableCompression != tc.want {
				t.Errorf("DisableCompression %v, want %v", cfg.DisableCompression, tc.want)
			}
		})
	}
}
