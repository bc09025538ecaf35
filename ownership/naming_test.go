package ownership

import "testing"

// The vectors are the reference's (docs/reference-facts.md#names), so names stay
// interchangeable with it.
func TestPodSuffixVectors(t *testing.T) {
	cases := []struct{ ns, name, want string }{
		{"kube-system", "coredns-57ff979f67-qqbdh", "b5faff8a083"},
		{"default", "sample-pod", "cc21c2d7785"},
		{"", "", "3a52ce78095"},
	}
	for _, c := range cases {
		if got := PodSuffix(c.ns, c.name, 0); got != c.want {
			t.Errorf("PodSuffix(%q,%q) = %q, want %q", c.ns, c.name, got, c.want)
		}
	}
	if got := HostVeth("eni", "kube-system", "coredns-57ff979f67-qqbdh"); got != "enib5faff8a083" {
		t.Errorf("HostVeth = %q", got)
	}
	if got := HostVeth(StrictVethPrefix, "kube-system", "coredns-57ff979f67-qqbdh"); got != "vlanb5faff8a083" {
		t.Errorf("strict HostVeth = %q", got)
	}
	if got := Dummy("", ""); got != "dummy3a52ce78095" {
		t.Errorf("Dummy = %q", got)
	}
	if PodSuffix("default", "p", 1) == PodSuffix("default", "p", 0) {
		t.Errorf("index must change the suffix")
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, ok := range []string{"eni", "vlan", "a"} {
		if err := ValidatePrefix(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "toolong", "a/b", "a b"} {
		if err := ValidatePrefix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
