package driver

import (
	"errors"
	"github.com/vpccni/vpccni/ownership"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/mocks/mock_kernel"
)

// shadowWorld is a node and a pod namespace on the kernel model, with the
// given rules added to the node before the pod is set up, so that they are
// listed before the pod's rules of the same priority (the order in which a
// delete request meets them).
type shadowWorld struct {
	host, pod kernel.API
	p         Pod
}

func newShadowWorld(t *testing.T, p Pod, before ...kernel.Rule) *shadowWorld {
	t.Helper()
	k := model.New()
	for _, ns := range []string{"node", "pod"} {
		if err := k.AddNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	host, _ := k.Open("node")
	pod, _ := k.Open("pod")
	plugENIs(t, k, "node", host)
	trunk, err := k.AddDevice("node", "eth2", 9001, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.LinkSetUp("eth2"); err != nil {
		t.Fatal(err)
	}
	if p.Branch != nil {
		p.Branch.ParentIndex = trunk
	}
	for _, r := range before {
		if err := host.RuleAdd(r); err != nil {
			t.Fatalf("foreign rule %s: %v", kernel.RuleString(r), err)
		}
	}
	if err := New(nil).Setup(host, pod, p); err != nil {
		t.Fatal(err)
	}
	return &shadowWorld{host: host, pod: pod, p: p}
}

func (w *shadowWorld) rules(t *testing.T) []string {
	t.Helper()
	s, err := kernel.Snapshot(w.host)
	if err != nil {
		t.Fatal(err)
	}
	return s.Rules
}

var (
	v4         = kernel.FamilyV4
	regularPod = Pod{HostVeth: hv, ContainerIf: "eth0", MTU: 9001, MACSeed: "c1", IPs: []PodIP{{Addr: ip1, Table: 2}}}
	shadow512  = "rule 512: from all to 10.0.2.11 lookup main"
	shadow1536 = "rule 1536: from 10.0.2.11 lookup 2"
)

func strictPod() Pod {
	return Pod{HostVeth: bhv, ContainerIf: "eth0", MTU: 9001, MACSeed: "c1", IPs: []PodIP{{Addr: branchIP, Table: 107}},
		Branch: &Branch{VlanID: 7, ENIMAC: branchMAC, SubnetGW: netip.MustParseAddr("10.1.0.1"), Strict: true}}
}

// TestModelDeleteRequestIsAWildcard pins the hazard itself on the model,
// as ipamd/reconcile/realkernel's TestShadowedDeleteHitsTheForeignRule
// pins it on Linux: a delete request carrying the pod rule's exact
// description removes the foreign rule with an extra iif listed before it.
// The guard in deleteRules is only as good as this fidelity.
func TestModelDeleteRequestIsAWildcard(t *testing.T) {
	foreign := kernel.Rule{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), IifName: "eth1", Table: kernel.TableMain}
	w := newShadowWorld(t, regularPod, foreign)
	before := w.rules(t)
	if err := w.host.RuleDel(ownership.ToPodRule(ip1Prefix().Addr())); err != nil {
		t.Fatal(err)
	}
	removed := kernel.Minus(before, w.rules(t))
	if want := []string{kernel.RuleString(foreign)}; !slices.Equal(removed, want) {
		t.Fatalf("the pod rule's delete request removed %q on the model; Linux removes %q", removed, want)
	}
}

func ip1Prefix() netip.Prefix { return netip.PrefixFrom(ip1, 32) }

// TestTeardownLeavesShadowedRule: a foreign rule at a pod priority that the
// delete request of one of the pod's rules would also match, listed before
// it, makes the driver leave the pod's rule in place with an error naming
// the foreign rule; everything else of the pod goes, and the foreign rule
// survives. Once the operator has removed it, a retry finishes the job.
//
// The foreign rules differ by an iif, oif or fwmark: Linux's add compares
// those exactly, so the pod's rule can be added after them. One with an
// extra source or destination instead makes the pod's add EEXIST (the add
// skips address selectors the new rule leaves unset, as the delete does),
// so it can never be listed before a pod rule it shadows.
func TestTeardownLeavesShadowedRule(t *testing.T) {
	cases := []struct {
		name    string
		pod     Pod
		foreign kernel.Rule
		kept    string // the pod's rule left in place
	}{
		{"512 with an iif", regularPod,
			kernel.Rule{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), IifName: "eth1", Table: kernel.TableMain}, shadow512},
		{"512 with a fwmark", regularPod,
			kernel.Rule{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), Mark: 0x1, Mask: 0x1, Table: kernel.TableMain}, shadow512},
		{"512 with an oif", regularPod,
			kernel.Rule{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), OifName: "eth1", Table: kernel.TableMain}, shadow512},
		{"1536 with an iif", regularPod,
			kernel.Rule{Priority: ownership.PrioFromPod, Family: v4, Src: cidr("10.0.2.11/32"), IifName: "eth1", Table: 2}, shadow1536},
		{"strict iif rule with a fwmark", strictPod(),
			kernel.Rule{Priority: ownership.PrioVlanIIF, Family: v4, IifName: bhv, Mark: 0x1, Mask: 0x1, Table: 107}, "rule 10: from all iif " + bhv + " lookup 107"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newShadowWorld(t, c.pod, c.foreign)
			_, err := New(nil).Teardown(w.host, w.pod, c.pod)
			// Every rule of the pod but the refused one is gone; the
			// foreign rule and the refused one stay.
			got := podRules(w.rules(t), c.pod)
			if want := []string{kernel.RuleString(c.foreign), c.kept}; !slices.Equal(got, want) {
				t.Fatalf("rules naming the pod after teardown (error %v):\n got %q\nwant %q", err, got, want)
			}
			var se *ShadowedRuleError
			if !errors.As(err, &se) {
				t.Fatalf("teardown = %v, want a ShadowedRuleError", err)
			}
			if kernel.RuleString(se.Rule) != c.kept || kernel.RuleString(se.Foreign) != kernel.RuleString(c.foreign) {
				t.Fatalf("refusal names %q / %q, want %q / %q", kernel.RuleString(se.Rule), kernel.RuleString(se.Foreign), c.kept, kernel.RuleString(c.foreign))
			}
			if !strings.Contains(err.Error(), kernel.RuleString(c.foreign)) {
				t.Fatalf("the error does not name the foreign rule: %v", err)
			}

			// The operator removes the foreign rule (by its full
			// description: nothing else has its selectors); the retry
			// removes the rest.
			if err := w.host.RuleDel(c.foreign); err != nil {
				t.Fatal(err)
			}
			if _, err := New(nil).Teardown(w.host, w.pod, c.pod); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := podRules(w.rules(t), c.pod); len(got) != 0 {
				t.Fatalf("left after the retry: %q", got)
			}
		})
	}
}

// TestTeardownDeletesUnshadowedRules: rules at pod priorities that a delete
// request of the pod's rules cannot reach (another table, a wider prefix,
// or listed after the pod's rule, where the kernel meets the pod's rule
// first) neither block the teardown nor are touched by it.
func TestTeardownDeletesUnshadowedRules(t *testing.T) {
	before := []kernel.Rule{
		{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableLocal},
		{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.0/24"), Table: kernel.TableMain},
		{Priority: ownership.PrioFromPod, Family: v4, Src: cidr("10.0.2.11/32"), Table: kernel.TableDefault}, // never a pod table
	}
	after := []kernel.Rule{
		{Priority: ownership.PrioToPod, Family: v4, Dst: cidr("10.0.2.11/32"), IifName: "eth1", Table: kernel.TableMain},
		{Priority: ownership.PrioFromPod, Family: v4, Src: cidr("10.0.2.11/32"), Dst: cidr("10.9.0.0/16"), Table: 2},
	}
	w := newShadowWorld(t, regularPod, before...)
	for _, r := range after {
		if err := w.host.RuleAdd(r); err != nil {
			t.Fatal(err)
		}
	}
	want := w.rules(t)
	want = slices.DeleteFunc(want, func(s string) bool { return s == shadow512 || s == shadow1536 })
	if _, err := New(nil).Teardown(w.host, w.pod, regularPod); err != nil {
		t.Fatal(err)
	}
	if got := w.rules(t); !slices.Equal(got, want) {
		t.Fatalf("rules after teardown:\n got %q\nwant %q", got, want)
	}
}

// TestTeardownRefusesLookalikes: two listed rules that read the same are
// not an exact duplicate (Linux refuses those): one has a selector
// kernel.Rule does not carry (ipproto, ports, uidrange, tos, `not`), and
// the kernel would delete whichever comes first. Neither is deleted. The
// model cannot hold such a pair, so a mock kernel lists it.
func TestTeardownRefusesLookalikes(t *testing.T) {
	host := mock_kernel.NewMockAPI(gomock.NewController(t))
	expectTeardownNode(host, kernel.FamilyV4, []kernel.Rule{our512, our512, our1536})
	host.EXPECT().RuleDel(our1536).Return(nil) // no RuleDel of our512: the mock fails the test on one
	_, err := New(nil).Teardown(host, nil, Pod{HostVeth: hv, ContainerIf: "eth0", IPs: []PodIP{{Addr: ip1, Table: 2}}})
	var se *ShadowedRuleError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "reads the same") {
		t.Fatalf("teardown = %v, want a refusal of the look-alikes", err)
	}
}

// TestDelRequestMatches pins the kernel's delete lookup the guard models.
func TestDelRequestMatches(t *testing.T) {
	q := kernel.Rule{Priority: 512, Family: v4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}
	v4mapped := &net.IPNet{IP: net.ParseIP("10.0.2.11"), Mask: net.CIDRMask(128, 128)}
	for _, c := range []struct {
		e    kernel.Rule
		want bool
	}{
		{q, true},
		{kernel.Rule{Priority: 512, Family: v4, Dst: v4mapped, Table: kernel.TableMain}, true},
		{kernel.Rule{Priority: 512, Family: v4, Dst: cidr("10.0.2.11/32"), IifName: "eth0", Table: kernel.TableMain}, true},
		{kernel.Rule{Priority: 512, Family: v4, Src: cidr("10.0.0.0/8"), Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}, true},
		{kernel.Rule{Priority: 512, Family: v4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableLocal}, false},
		{kernel.Rule{Priority: 513, Family: v4, Dst: cidr("10.0.2.11/32"), Table: kernel.TableMain}, false},
		{kernel.Rule{Priority: 512, Family: v4, Dst: cidr("10.0.2.0/24"), Table: kernel.TableMain}, false},
		{kernel.Rule{Priority: 512, Family: v4, Table: kernel.TableMain}, false},
	} {
		if got := ownership.DelRequestMatches(q, c.e); got != c.want {
			t.Errorf("delete of %s reaches %s: %v, want %v", kernel.RuleString(q), kernel.RuleString(c.e), got, c.want)
		}
	}
}

// podRules: the listed rules that name the pod's address or host veth.
func podRules(rules []string, p Pod) []string {
	var out []string
	for _, r := range rules {
		for _, ip := range p.IPs {
			if strings.Contains(r, " "+ip.Addr.String()+" ") || strings.Contains(r, " iif "+p.HostVeth+" ") {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
