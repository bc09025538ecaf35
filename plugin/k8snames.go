package plugin

import (
	"fmt"
	"strings"
)

// Kubernetes' naming rules for the two CNI_ARGS names the plugin keeps: a
// namespace is a DNS-1123 label, a pod name a DNS-1123 subdomain. They are
// written out here rather than taken from k8s.io/apimachinery, whose
// validation package and what it links cost every plugin process its
// initialisation before main (docs/benchmarks.md); k8snames_test.go holds
// them equal to apimachinery's, which the API server applies.

const (
	dns1123LabelMax     = 63
	dns1123SubdomainMax = 253
)

// dns1123Label says what is wrong with v as a namespace name, "" if
// nothing: lower-case letters, digits and '-', starting and ending with a
// letter or digit, at most 63 bytes.
func dns1123Label(v string) string {
	if len(v) > dns1123LabelMax {
		return fmt.Sprintf("longer than %d characters", dns1123LabelMax)
	}
	if !labelChars(v) {
		return "not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
	}
	return ""
}

// dns1123Subdomain says what is wrong with v as a pod name, "" if
// nothing: DNS-1123 labels (of any length) joined by '.', at most 253
// bytes in all.
func dns1123Subdomain(v string) string {
	if len(v) > dns1123SubdomainMax {
		return fmt.Sprintf("longer than %d characters", dns1123SubdomainMax)
	}
	for label := range strings.SplitSeq(v, ".") {
		if !labelChars(label) {
			return "not a DNS-1123 subdomain (labels of lower-case letters, digits and '-', each starting and ending with a letter or digit, joined by '.')"
		}
	}
	return ""
}

// labelChars: non-empty, [a-z0-9-] only, no '-' at either end.
func labelChars(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
