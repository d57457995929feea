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
	"cmp"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// The flags' defaults: off; on, the Secret and the Service's names are in
// the Pod's namespace. A local run names an address and a Secret; values
// the webhook could not work with stop the binary at start.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		wantEnabled        bool
		wantSecret         string
		wantNames, wantErr string
		wantPeriods        string // sync/grace; empty: the defaults
	}{
		{args: nil, wantEnabled: false, wantSecret: "ctl-ns/bar-controller-webhook",
			wantNames: "bar-controller-webhook.ctl-ns.svc,bar-controller-webhook.ctl-ns.svc.cluster.local"},
		{args: []string{"--conversion-webhook-bind-address=:9443"}, wantEnabled: true, wantSecret: "ctl-ns/bar-controller-webhook",
			wantNames: "bar-controller-webhook.ctl-ns.svc,bar-controller-webhook.ctl-ns.svc.cluster.local"},
		// The Service's names follow the Secret's namespace.
		{args: []string{"--conversion-webhook-bind-address=:9443", "--conversion-webhook-secret=other/certs"}, wantEnabled: true,
			wantSecret: "other/certs", wantNames: "bar-controller-webhook.other.svc,bar-controller-webhook.other.svc.cluster.local"},
		// make run.
		{args: []string{"--conversion-webhook-bind-address=127.0.0.1:9443", "--conversion-webhook-secret=bar-controller/bar-controller-webhook",
			"--conversion-webhook-cert-names=127.0.0.1, ::1 ,webhook.example.com"}, wantEnabled: true,
			wantSecret: "bar-controller/bar-controller-webhook", wantNames: "127.0.0.1,::1,webhook.example.com"},
		{args: []string{"--conversion-webhook-bind-address=0"}, wantEnabled: false, wantSecret: "ctl-ns/bar-controller-webhook",
			wantNames: "bar-controller-webhook.ctl-ns.svc,bar-controller-webhook.ctl-ns.svc.cluster.local"},
		{args: []string{"--conversion-webhook-bind-address=9443"}, wantErr: "--conversion-webhook-bind-address"},
		// A rollback's converter (artifacts/conversion-only).
		{args: []string{"--conversion-webhook-only", "--conversion-webhook-bind-address=:9443"}, wantEnabled: true, wantSecret: "ctl-ns/bar-controller-webhook",
			wantNames: "bar-controller-webhook.ctl-ns.svc,bar-controller-webhook.ctl-ns.svc.cluster.local"},
		{args: []string{"--conversion-webhook-only"}, wantErr: "needs --conversion-webhook-bind-address"},
		{args: []string{"--conversion-webhook-secret=certs"}, wantErr: "want namespace/name"},
		{args: []string{"--conversion-webhook-secret=/certs"}, wantErr: "want namespace/name"},
		{args: []string{"--conversion-webhook-secret=ns/"}, wantErr: "want namespace/name"},
		{args: []string{"--conversion-webhook-secret=Ns/certs"}, wantErr: "want namespace/name"},
		{args: []string{"--conversion-webhook-cert-names=a.svc,,b.svc"}, wantErr: "neither a DNS name nor an IP address"},
		{args: []string{"--conversion-webhook-cert-names=https://127.0.0.1"}, wantErr: "neither a DNS name nor an IP address"},
		// The keeper's periods (webhookcert.Keeper): a superseded CA must
		// outlast every replica's next read of the Secret.
		{args: []string{"--conversion-webhook-cert-sync-period=0s"}, wantErr: "must be positive"},
		{args: []string{"--conversion-webhook-cert-sync-period=1m", "--conversion-webhook-cert-grace-period=90s"},
			wantErr: "less than twice --conversion-webhook-cert-sync-period"},
		{args: []string{"--conversion-webhook-cert-sync-period=1s", "--conversion-webhook-cert-grace-period=2s"}, wantSecret: "ctl-ns/bar-controller-webhook",
			wantNames: "bar-controller-webhook.ctl-ns.svc,bar-controller-webhook.ctl-ns.svc.cluster.local", wantPeriods: "1s/2s"},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Complete("ctl-ns")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.Enabled() != tc.wantEnabled {
			t.Errorf("%v: enabled %v, want %v", tc.args, o.Enabled(), tc.wantEnabled)
		}
		if got := o.SecretNamespace + "/" + o.SecretName; got != tc.wantSecret {
			t.Errorf("%v: Secret %s, want %s", tc.args, got, tc.wantSecret)
		}
		if got := strings.Join(o.CertNames, ","); got != tc.wantNames {
			t.Errorf("%v: certificate names %s, want %s", tc.args, got, tc.wantNames)
		}
		if got, want := fmt.Sprintf("%v/%v", o.CertSyncPeriod, o.CertGracePeriod), cmp.Or(tc.wantPeriods, "1m0s/5m0s"); got != want {
			t.Errorf("%v: keeper periods %s, want %s", tc.args, got, want)
		}
	}
}

// --conversion-webhook-api-server-cidrs: CIDRs, masked, spaces and empty
// items ignored; a single address needs its /32 or /128; a prefix wider
// than /8 (IPv4) or /32 (IPv6) is refused, as it would trust callers that
// are not the API server (two halves trust every address).
func TestAPIServerCIDRs(t *testing.T) {
	for _, tc := range []struct{ value, want, wantErr string }{
		{value: "", want: ""},
		{value: "10.0.0.5/32, 192.168.7.9/24 ,,fd00::1/64", want: "10.0.0.5/32,192.168.7.0/24,fd00::/64"},
		{value: "10.0.0.5", wantErr: "no '/'"},
		{value: "0.0.0.0/0", wantErr: "wider than /8"},
		{value: "::/0", wantErr: "wider than /32"},
		{value: "0.0.0.0/1,128.0.0.0/1", wantErr: "wider than /8"},
		{value: "10.0.0.0/8,fd00::/32", want: "10.0.0.0/8,fd00::/32"},
		{value: "fd00::/31", wantErr: "wider than /32"},
		{value: "::ffff:10.0.0.11/128", want: "10.0.0.11/32"},
		{value: "::ffff:0.0.0.0/96", wantErr: "wider than /8"},
	} {
		var o Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--conversion-webhook-api-server-cidrs=" + tc.value}); err != nil {
			t.Fatal(err)
		}
		err := o.Complete("ctl-ns")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want an error with %q", tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		var got []string
		for _, p := range o.APIServerCIDRs {
			got = append(got, p.String())
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%q: %v, want %s", tc.value, got, tc.want)
		}
	}
}
