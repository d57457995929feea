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

package localcluster

import (
	"context"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// The controller's identity as artifacts/install ships it.
const (
	ControllerNamespace      = "bar-controller"
	ControllerServiceAccount = "bar-controller"
	// ControllerUser is how the API server (its audit log, RBAC, API
	// Priority and Fairness) names that ServiceAccount.
	ControllerUser = "system:serviceaccount:" + ControllerNamespace + ":" + ControllerServiceAccount
)

// InstallServiceAccount applies the shipped namespace, ServiceAccount and
// RBAC (artifacts/install/namespace.yaml and rbac.yaml; not the Deployment:
// the controller runs as a process) from the repository at root, and
// writes to path a kubeconfig that authenticates as that ServiceAccount
// with a TokenRequest token valid for ttl, as a Pod's projected token
// would. A controller run with it has the identity, the permissions and
// the API Priority and Fairness flow (workload-low; the admin is exempt)
// it has in a cluster.
func (c *Cluster) InstallServiceAccount(ctx context.Context, root, path string, ttl time.Duration) (*rest.Config, error) {
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(root, "artifacts", "install", f)); err != nil {
			return nil, err
		}
	}
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	tr, err := kube.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, ControllerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return c.WriteKubeconfig(path, tr.Status.Token)
}
