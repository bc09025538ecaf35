package plugin

import (
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestK8sNamesAsAPIMachinery: the plugin's DNS-1123 checks accept exactly
// what apimachinery's (the API server's) do, on the edge cases and on
// 200000 random strings over the characters that matter.
func TestK8sNamesAsAPIMachinery(t *testing.T) {
	cases := []string{"", "a", "-", "a-", "-a", "a.b", "a..b", ".a", "a.", "A", "a_b", "a-b", "0", "a.-b", "a-.b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253), strings.Repeat("a", 254),
		strings.Repeat("a", 63) + "." + strings.Repeat("b", 70), "é", "a\x00"}
	r := rand.New(rand.NewPCG(1, 2))
	const chars = "ab09-.A_ \xff"
	for range 200000 {
		n := r.IntN(12)
		if r.IntN(50) == 0 {
			n = 60 + r.IntN(200)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		cases = append(cases, string(b))
	}
	for _, v := range cases {
		if ours, theirs := dns1123Label(v) == "", len(validation.IsDNS1123Label(v)) == 0; ours != theirs {
			t.Errorf("label %q: ours valid=%v, apimachinery valid=%v", v, ours, theirs)
		}
		if ours, theirs := dns1123Subdomain(v) == "", len(validation.IsDNS1123Subdomain(v)) == 0; ours != theirs {
			t.Errorf("subdomain %q: ours valid=%v, apimachinery valid=%v", v, ours, theirs)
		}
	}
}
