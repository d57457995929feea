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

package barcontroller

// Every conversion parses a Bar's quantities and writes them again
// (resource.ParseQuantity, Quantity.String), and the controller parses
// them from every Bar it reads. Both cost by what a quantity says, not by
// its bytes: String() takes time that grows with the square of the
// digits (13 s for 256 KiB of them), and a short quantity with a large
// exponent, "1111111111111111111e30000000" (28 bytes), is multiplied out
// to about 10^30000000 in parsing, hundreds of MiB and minutes of CPU
// (issue 39, ninth and tenth reviews). So the CRD accepts, and the
// conversion webhook converts, only quantities that are short and whose
// exponent has at most two digits: the largest real quantity, in bytes
// with a suffix, has about 20 characters, and 1e99 is far past any
// amount a container has.
const (
	// MaxQuantityBytes is the longest quantity accepted (the CRD's
	// maxLength, set by hack/crd-conversion).
	MaxQuantityBytes = 64
	// QuantityPattern is resource.Quantity's grammar, as controller-gen
	// writes it in the CRD, with an exponent of one or two digits.
	QuantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$`
	// MaxResources bounds the entries of v1's spec.template.resources
	// limits and requests, and MaxResourceNameBytes their names (a
	// qualified name: a DNS subdomain of 253 bytes, a slash and 63): the
	// CRD's maxProperties and a validation rule. Without them a Bar the
	// API server accepts could carry 90,000 limits in 922 KB; its weight
	// in the webhook's budget (48 bytes an entry) is then 4.7 times its
	// bytes, more than the largest review (refused alone), and converted
	// to v1alpha1 its resources annotation passes the API server's
	// 256 KiB for all annotations: the one Bar fails every v1alpha1 list
	// in the cluster (issue 39, thirteenth review, M1). A container has a
	// handful of resources; 32 is several times any real one.
	MaxResources         = 32
	MaxResourceNameBytes = 253 + 1 + 63
	// MaxImageBytes is the longest spec.template.image (the maxLength of
	// v1's and v1alpha1's image, by their kubebuilder markers): what the
	// controller's caches keep of a Deployment's image at most
	// (TestMaxImageBytesIsTheCRDs holds the two equal).
	MaxImageBytes = 512
)

// BoundedQuantity says whether s, a quantity as it is written in JSON (a
// string's bytes between its quotes, or a number), is short enough and
// has an exponent small enough for QuantityPattern and MaxQuantityBytes.
// It looks only at what costs: the length, and the digits after an
// exponent's e or E; a quantity with an escape (\) is refused, since its
// bytes are not what it says and the API server writes none. Whether the
// rest is a quantity, parsing says.
func BoundedQuantity(s string) bool {
	if len(s) > MaxQuantityBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			return false
		case 'e', 'E':
			exponent := s[i+1:]
			if s[i] == 'E' && (exponent == "" || exponent == "i") {
				return true // the suffixes E and Ei
			}
			if exponent != "" && (exponent[0] == '+' || exponent[0] == '-') {
				exponent = exponent[1:]
			}
			if len(exponent) < 1 || len(exponent) > 2 {
				return false
			}
			for j := 0; j < len(exponent); j++ {
				if exponent[j] < '0' || exponent[j] > '9' {
					return false
				}
			}
			return true
		}
	}
	return true
}
