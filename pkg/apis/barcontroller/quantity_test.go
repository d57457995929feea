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

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// controllerGenPattern is the pattern controller-gen writes for a
// resource.Quantity, before QuantityPattern bounds its exponent.
const controllerGenPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// Of what controller-gen's pattern accepts, BoundedQuantity accepts
// exactly what the CRD now does: QuantityPattern, at most
// MaxQuantityBytes.
func TestBoundedQuantityIsTheCRDs(t *testing.T) {
	old, bounded := regexp.MustCompile(controllerGenPattern), regexp.MustCompile(QuantityPattern)
	for _, q := range []string{
		"1", "100m", "64Mi", "1.5", ".5", "5.", "+1", "-1", "1Ki", "1Ei", "2E", "2P", "1e3", "1E3", "1e-9", "1e+18", "1e99",
		"1e100", "1e030", "1111111111111111111e30000000", "1e2147483647", "1e1.5", "1e.5",
		strings.Repeat("9", MaxQuantityBytes), strings.Repeat("9", MaxQuantityBytes+1),
		strings.Repeat("9", MaxQuantityBytes-3) + "e99", strings.Repeat("9", MaxQuantityBytes-2) + "e99",
	} {
		if !old.MatchString(q) {
			t.Fatalf("%q is not a quantity by controller-gen's pattern; the table must hold only quantities", q)
		}
		want := bounded.MatchString(q) && len(q) <= MaxQuantityBytes
		if got := BoundedQuantity(q); got != want {
			t.Errorf("BoundedQuantity(%.40q) = %v, want %v (the CRD's pattern and maxLength)", q, got, want)
		}
	}
	// What the API server writes has no escapes; one that spells a digit
	// or the e is refused by its bytes.
	for _, q := range []string{`1\u0065300000`, `\u0031`} {
		if BoundedQuantity(q) {
			t.Errorf("BoundedQuantity(%q) = true, want false", q)
		}
	}
}

// TestMaxImageBytesIsTheCRDs: MaxImageBytes is the maxLength of every
// version's image in the CRD, which the controller's caches rely on.
func TestMaxImageBytesIsTheCRDs(t *testing.T) {
	crd, err := os.ReadFile("../../../artifacts/crd/barcontroller.dev_bars.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := regexp.MustCompile(`(?s)\n\s+image:\n.*?\n\s+maxLength: (\d+)\n`).FindAllSubmatch(crd, -1)
	if len(found) != 2 {
		t.Fatalf("found %d images with a maxLength in the CRD, want v1's and v1alpha1's", len(found))
	}
	for _, m := range found {
		if got := string(m[1]); got != strconv.Itoa(MaxImageBytes) {
			t.Errorf("an image's maxLength is %s, MaxImageBytes %d", got, MaxImageBytes)
		}
	}
}
