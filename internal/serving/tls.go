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
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/util/cert"
)

// TLSConfig returns the server side of HTTPS for an endpoint. With certDir
// empty, it makes a self-signed certificate for this process: traffic is
// encrypted, and a scraper that trusts the endpoint by its Kubernetes
// identity (the bearer token check) rather than its certificate, as
// kubebuilder's default Prometheus configuration does, works unchanged.
// With certDir, it serves certDir/tls.crt and tls.key, the layout of a
// kubernetes.io/tls Secret, and picks up a renewed pair (cert-manager
// rotates them in place) on the next handshake after the files change.
func TLSConfig(certDir, host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certDir == "" {
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
		return cfg, nil
	}
	r := &pairReloader{cert: filepath.Join(certDir, "tls.crt"), key: filepath.Join(certDir, "tls.key")}
	if _, err := r.get(nil); err != nil {
		return nil, err
	}
	cfg.GetCertificate = r.get
	return cfg, nil
}

// pairReloader serves a certificate and key from files, reloading them
// when either file's modification time changes.
type pairReloader struct {
	cert, key string

	mu      sync.Mutex
	modTime [2]time.Time
	pair    *tls.Certificate
}

func (r *pairReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var mod [2]time.Time
	for i, p := range []string{r.cert, r.key} {
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		mod[i] = info.ModTime()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pair != nil && mod == r.modTime {
		return r.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.pair != nil {
			// Half-written during a rotation: keep serving the old pair.
			return r.pair, nil
		}
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	r.pair, r.modTime = &pair, mod
	return r.pair, nil
}
