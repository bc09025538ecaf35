package eninet

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

func eni(device int) cloud.ENI {
	b := byte(device + 1)
	return cloud.ENI{ID: "eni-" + string(rune('a'+device)), MAC: "02:00:00:00:0" + string(rune('0'+device)) + ":01", DeviceNumber: device,
		PrimaryIP: netip.AddrFrom4([4]byte{10, 0, b, 10}), Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, b, 0}), 24),
		Gateway: netip.AddrFrom4([4]byte{10, 0, b, 1})}
}

func node(t *testing.T) (*model.Kernel, kernel.API) {
	t.Helper()
	k := model.New()
	if err := k.AddNamespace("node"); err != nil {
		t.Fatal(err)
	}
	h, err := k.Open("node")
	if err != nil {
		t.Fatal(err)
	}
	return k, h
}

func dump(t *testing.T, h kernel.API) []string {
	t.Helper()
	st, err := kernel.Snapshot(h)
	if err != nil {
		t.Fatal(err)
	}
	return st.Lines()
}

// TestSetupSecondary: a secondary ENI found by MAC gets its table with
// the gateway and default route, rule 32765, and no subnet route in main;
// a second Setup (every ipamd start) changes nothing; Teardown removes
// the rule the link would not take with it.
func TestSetupSecondary(t *testing.T) {
	k, h := node(t)
	e := eni(1)
	mac, _ := net.ParseMAC(e.MAC)
	if _, err := k.AddDevice("node", "ens6", 9001, mac); err != nil { // not named eth1: found by MAC
		t.Fatal(err)
	}
	n := &Net{Kernel: h}
	if err := n.Setup(e); err != nil {
		t.Fatal(err)
	}
	got := dump(t, h)
	for _, want := range []string{"rule 32765: from 10.0.2.10 lookup 2", "route table 2: default via 10.0.2.1 dev ens6",
		"route table 2: 10.0.2.1/32 dev ens6 scope link"} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("missing %q in\n%s", want, strings.Join(got, "\n"))
		}
	}
	if slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "route table main: 10.0.2.0/24") }) {
		t.Errorf("subnet route left in main:\n%s", strings.Join(got, "\n"))
	}
	if err := n.Setup(e); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if again := dump(t, h); !slices.Equal(again, got) {
		t.Fatalf("second setup changed the node:\n%v\n%v", got, again)
	}
	if err := n.Teardown(e); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(dump(t, h), func(l string) bool { return strings.Contains(l, "32765") }) {
		t.Fatal("rule 32765 survived teardown")
	}
	if err := n.Teardown(eni(0)); err == nil {
		t.Fatal("tore down the primary ENI")
	}
}

// TestStandIn: with no link for the ENI, a stand-in is made only when
// asked; the primary's gets the OS's address and default route.
func TestStandIn(t *testing.T) {
	_, h := node(t)
	if err := (&Net{Kernel: h}).Setup(eni(1)); err == nil {
		t.Fatal("set up an ENI that has no link")
	}
	n := &Net{Kernel: h, StandIn: true}
	for _, d := range []int{0, 1} {
		if err := n.Setup(eni(d)); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(dump(t, h), "\n")
	for _, want := range []string{"default via 10.0.1.1 dev eth0", "rule 32765: from 10.0.2.10 lookup 2", "vpc1"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if err := n.Teardown(eni(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.LinkByName("eth1"); err == nil {
		t.Fatal("stand-in link left after teardown")
	}
}

// TestMTU: with an MTU set, every ENI's link gets it, the primary's too
// (the reference's AWS_VPC_ENI_MTU); without one, links keep theirs.
func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		name string
		mtu  int
		want int
	}{{"set", 1500, 1500}, {"unset", 0, 9001}} {
		t.Run(tc.name, func(t *testing.T) {
			k, h := node(t)
			n := &Net{Kernel: h, MTU: tc.mtu}
			for _, d := range []int{0, 1} {
				e := eni(d)
				mac, _ := net.ParseMAC(e.MAC)
				if _, err := k.AddDevice("node", LinkName(d), 9001, mac); err != nil {
					t.Fatal(err)
				}
				if err := n.Setup(e); err != nil {
					t.Fatal(err)
				}
				l, err := h.LinkByName(LinkName(d))
				if err != nil {
					t.Fatal(err)
				}
				if l.MTU != tc.want {
					t.Errorf("%s MTU %d, want %d", l.Name, l.MTU, tc.want)
				}
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		k, h := node(t)
		e := eni(1)
		mac, _ := net.ParseMAC(e.MAC)
		if _, err := k.AddDevice("node", "eth1", 9001, mac); err != nil {
			t.Fatal(err)
		}
		err := (&Net{Kernel: h, MTU: 67}).Setup(e)
		if err == nil || !strings.Contains(err.Error(), "MTU 67 on eth1") {
			t.Fatalf("Setup with MTU 67: %v, want an error naming the MTU and the link", err)
		}
	})
}
