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

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"

	"github.com/barcontroller/bar-controller/harness/localcluster"
	clientset "github.com/barcontroller/bar-controller/pkg/generated/clientset/versioned"
)

// The objects the certificate keeper (internal/webhookcert) keeps, as
// artifacts/ ships them.
const (
	webhookSecret = "bar-controller-webhook"
	barsCRD       = "bars.barcontroller.dev"
)

// keeperGrace is the grace period keeperFlags set.
const keeperGrace = 5 * time.Second

// keeperFlags make the keepers' periods short enough for a test: a pass a
// second once ready, and a grace period of 5 s between a new CA reaching
// the CRD and a certificate it signed being served, and between a CA
// being superseded and leaving the bundle.
var keeperFlags = []string{"--conversion-webhook-cert-sync-period=1s", "--conversion-webhook-cert-grace-period=5s"}

// startCertEnv starts a control plane of the test's own with artifacts/
// installed: the keepers start from the shipped empty Secret and a CRD
// with no caBundle, as on a fresh install, whatever the other tests
// left in the shared one.
func startCertEnv(t *testing.T) *opsEnv {
	t.Helper()
	localcluster.SkipWithoutBinaries(t)
	dir, err := os.MkdirTemp("", "bar-certs-")
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := localcluster.Start(t.Context(), localcluster.Options{Dir: dir})
	t.Cleanup(func() {
		if cluster != nil {
			cluster.Stop()
		}
		if os.Getenv("BAR_KEEP_TEST_DIR") == "" && !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("control-plane logs kept in %s", dir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	env := &opsEnv{cluster: cluster, dir: dir,
		kube: kubernetes.NewForConfigOrDie(cluster.Config),
		bars: clientset.NewForConfigOrDie(cluster.Config)}
	env.install(t)
	return env
}

// keeperState is the Secret and the CRD as the API server has them now.
type keeperState struct {
	secret *corev1.Secret
	crd    *apiextensionsv1.CustomResourceDefinition
}

func readKeeperState(ctx context.Context, env *opsEnv, secretNS string) (keeperState, error) {
	s, err := env.kube.CoreV1().Secrets(secretNS).Get(ctx, webhookSecret, metav1.GetOptions{})
	if err != nil {
		return keeperState{}, err
	}
	crd, err := apiextensionsclient.NewForConfigOrDie(env.cluster.Config).ApiextensionsV1().
		CustomResourceDefinitions().Get(ctx, barsCRD, metav1.GetOptions{})
	if err != nil {
		return keeperState{}, err
	}
	return keeperState{secret: s, crd: crd}, nil
}

func crdBundle(crd *apiextensionsv1.CustomResourceDefinition) []byte {
	if c := crd.Spec.Conversion; c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil {
		return c.Webhook.ClientConfig.CABundle
	}
	return nil
}

// countCAs is the number of certificates in a PEM bundle (0 if none parse).
func countCAs(bundle []byte) int {
	certs, err := cert.ParseCertsPEM(bundle)
	if err != nil {
		return 0
	}
	return len(certs)
}

// fingerprint names a certificate in messages: the start of its SHA-256.
func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:4])
}

// served is what a TLS client that trusts only the CRD's caBundle gets
// from addr when it asks for serverName, as the API server does: the leaf
// certificate, or why the handshake failed.
func served(addr, serverName string, bundle []byte) (*x509.Certificate, error) {
	certs, err := cert.ParseCertsPEM(bundle)
	if err != nil {
		return nil, fmt.Errorf("the CRD's caBundle: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// keeperReplica is a replica that serves the webhook on addr and needs
// its certificate valid for names.
type keeperReplica struct {
	*controllerProcess
	addr  string
	names []string
}

// startKeeperReplica starts a replica that serves the webhook on addr (a
// free port if empty) and needs names (nil: the flags' defaults), and
// returns once it listens: ports are picked free and released again, so
// the next replica picks its own only after this one holds them.
func startKeeperReplica(t *testing.T, name, kubeconfig, addr string, names []string, args ...string) keeperReplica {
	t.Helper()
	if addr == "" {
		addrs, err := localcluster.FreeAddrs(1)
		if err != nil {
			t.Fatal(err)
		}
		addr = addrs[0]
	}
	args = append(slices.Clone(args), "--conversion-webhook-bind-address="+addr)
	if names != nil {
		args = append(args, "--conversion-webhook-cert-names="+strings.Join(names, ","))
	}
	p := startController(t, name, kubeconfig, args...)
	p.waitProbe(t, "/healthz", 200)
	return keeperReplica{controllerProcess: p, addr: addr, names: names}
}

// settled says whether the replicas have settled: every one is ready and
// serves the Secret's one certificate, which is valid for every name any
// of them needs and trusted by the CRD's caBundle; the bundle is the
// Secret's and holds that one CA; no rotation is under way. Otherwise it
// says what is missing.
func settled(ctx context.Context, env *opsEnv, secretNS string, replicas []keeperReplica) (string, error) {
	st, err := readKeeperState(ctx, env, secretNS)
	if err != nil {
		return "", err
	}
	bundle := crdBundle(st.crd)
	switch {
	case len(st.secret.Data["next.crt"]) != 0:
		return "a next certificate waits in the Secret", nil
	case !bytes.Equal(bundle, st.secret.Data["ca.crt"]):
		return "the CRD's caBundle is not the Secret's ca.crt", nil
	case countCAs(bundle) != 1:
		return fmt.Sprintf("the caBundle holds %d CAs", countCAs(bundle)), nil
	}
	leaf, err := cert.ParseCertsPEM(st.secret.Data["tls.crt"])
	if err != nil {
		return "", fmt.Errorf("the Secret's tls.crt: %w", err)
	}
	for _, r := range replicas {
		if code := r.probe("/readyz"); code != 200 {
			return fmt.Sprintf("%s: /readyz %d", r.Name, code), nil
		}
		for _, name := range r.names {
			got, err := served(r.addr, name, bundle)
			if err != nil {
				return fmt.Sprintf("%s as %s: %v", r.Name, name, err), nil
			}
			if !got.Equal(leaf[0]) {
				return fmt.Sprintf("%s serves %s, the Secret holds %s", r.Name, fingerprint(got), fingerprint(leaf[0])), nil
			}
		}
	}
	return "", nil
}

// waitSettled waits for the replicas to settle and returns how long that
// took from start. The minute is the bound (localcluster.Eventually's
// too). Joining replicas settle in two grace periods (10 s: next promoted,
// the old CA retired) and a few passes by construction; measured 12.3-14.6 s
// for TestCertKeeperReplicasWithDifferentNames and 13.4-16.3 s for
// TestCertKeeperConversionOnly, 6 runs each with -race on 2 cores under a
// concurrent CI run (load 5-9): the minute is 3.7 times the slowest.
func waitSettled(t *testing.T, env *opsEnv, secretNS string, start time.Time, h *keeperHistory, replicas ...keeperReplica) time.Duration {
	t.Helper()
	var last string
	err := pollMinute(t.Context(), func(ctx context.Context) (bool, error) {
		for _, r := range replicas {
			select {
			case <-r.Exited():
				return false, fmt.Errorf("%s exited: %v", r.Name, r.State())
			default:
			}
		}
		why, err := settled(ctx, env, secretNS, replicas)
		last = why
		return why == "", err
	})
	if err != nil {
		t.Fatalf("the replicas did not settle within a minute (%v; last: %s); %s", err, last, h.summary())
	}
	return time.Since(start)
}

// checks is how many passes the replica's keeper has made, by its metric.
func (r keeperReplica) checks(t *testing.T) float64 {
	t.Helper()
	v, ok := r.scrape(t).Value("bar_controller_conversion_webhook_certificate_checks_total", nil)
	if !ok {
		t.Fatalf("%s exports no bar_controller_conversion_webhook_certificate_checks_total", r.Name)
	}
	return v
}

// readyzBody is the replica's /readyz answer: its code and its reason.
func (r keeperReplica) readyzBody() (int, string) {
	resp, err := httpClient.Get(r.healthURL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// pollMinute is localcluster.Eventually's poll, returning its error.
func pollMinute(ctx context.Context, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
