package plugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// hostileCase is one crafted prevResult for the victim's DEL.
type hostileCase struct {
	name string
	// victimDevice is the ENI the victim's ADD used (0: table main; 1: table 2).
	victimDevice int
	// craft turns the victim's genuine result into the hostile one (the
	// world is given for the neighbour's address and names).
	craft func(w *hostileWorld, prev map[string]any) any
	want  outcome
	// foreign: more foreign rules, added before the pods.
	foreign []kernel.Rule
}

func ifaces(prev map[string]any) []any { return prev["interfaces"].([]any) }

// itf is interfaces[i]; i < 0 counts from the end (-1: the dummy).
func itf(prev map[string]any, i int) map[string]any {
	l := ifaces(prev)
	if i < 0 {
		i += len(l)
	}
	return l[i].(map[string]any)
}

func setDummy(mac, sandbox string) func(*hostileWorld, map[string]any) any {
	return func(_ *hostileWorld, p map[string]any) any {
		d := itf(p, -1)
		d["mac"] = mac
		if sandbox != "" {
			d["sandbox"] = sandbox
		}
		return p
	}
}

func setTable(mac, dummyMac, dummySandbox string) func(*hostileWorld, map[string]any) any {
	return func(_ *hostileWorld, p map[string]any) any {
		itf(p, 1)["mac"] = mac
		d := itf(p, -1)
		d["mac"] = dummyMac
		if dummySandbox == "-" {
			delete(d, "sandbox")
		} else {
			d["sandbox"] = dummySandbox
		}
		return p
	}
}

func setIPs(ips ...map[string]any) func(*hostileWorld, map[string]any) any {
	return func(_ *hostileWorld, p map[string]any) any {
		l := make([]any, len(ips))
		for i, ip := range ips {
			l[i] = ip
		}
		p["ips"] = l
		return p
	}
}

func ipOn(iface int, addr string) map[string]any {
	return map[string]any{"interface": iface, "address": addr}
}

// padded makes a result of n interfaces: the victim's host veth and eth0,
// then pairs that look like more pods' interfaces (a neighbour's host veth
// name, a container interface in the victim's sandbox claiming table 2)
// whose ips name the neighbour's address and a foreign rule's source, and
// the dummy last.
func padded(n int) func(*hostileWorld, map[string]any) any {
	return func(w *hostileWorld, p map[string]any) any {
		l := ifaces(p)
		out := []any{l[0], l[1]}
		ips := []any{ipOn(1, w.victim.ip+"/32")}
		for i := 0; len(out) < n-1; i++ {
			if i%2 == 0 {
				out = append(out, map[string]any{"name": ownership.HostVeth("eni", "default", neighName)})
				continue
			}
			out = append(out, map[string]any{"name": fmt.Sprintf("mNicIf%d", i), "sandbox": w.victim.netns, "mac": "2"})
			addr := w.neigh.ip + "/32"
			if i%4 == 3 {
				addr = "192.168.7.7/32"
			}
			ips = append(ips, ipOn(len(out)-1, addr))
		}
		p["interfaces"] = append(out, l[len(l)-1])
		p["ips"] = ips
		return p
	}
}

var (
	// rejected: the prevResult is set aside (code 7); the victim is torn
	// down from what ipamd's record and its namespace prove, and nothing
	// else is touched.
	rejected = outcome{code: types.ErrInvalidNetworkConfig, tornDown: true, released: true}
	clean    = outcome{tornDown: true, released: true}
)

// hostileCases is the corpus. Each case states what is legal and why.
var hostileCases = []hostileCase{
	{name: "genuine result (control)", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { return p }, want: clean},

	// The dummy's mac is the VLAN id (0 for a regular pod), its sandbox the
	// device number: only plain decimals in range are read.
	{name: "dummy mac abc", victimDevice: 1, craft: setDummy("abc", ""), want: rejected},
	{name: "dummy mac -5", victimDevice: 1, craft: setDummy("-5", ""), want: rejected},
	{name: "dummy mac 4096 (beyond 802.1Q)", victimDevice: 1, craft: setDummy("4096", ""), want: rejected},
	{name: "dummy mac 99999999999", victimDevice: 1, craft: setDummy("99999999999", ""), want: rejected},
	{name: "dummy mac 153 (VLAN table 253: default)", victimDevice: 1, craft: setTable("", "153", "-"), want: rejected},
	{name: "dummy sandbox 1e9", victimDevice: 1, craft: setDummy("0", "1e9"), want: rejected},

	// The container interface's mac is the route table. default (253) and
	// local (255) are never a pod's; main (254) is device 0's.
	{name: "container mac 253 (default)", victimDevice: 1, craft: setTable("253", "0", "1"), want: rejected},
	{name: "container mac 255 (local)", victimDevice: 1, craft: setTable("255", "0", "1"), want: rejected},
	{name: "container mac 255 with device 0", victimDevice: 0, craft: setTable("255", "0", "0"), want: rejected},
	// A branch pod's table is its VLAN's (vlan+100): main there is forged.
	{name: "container mac 254 on a branch pod (VLAN 7)", victimDevice: 1, craft: setTable("254", "7", "-"), want: rejected},
	// Legal: device 0 is the primary ENI, whose table is main.
	{name: "container mac 254, device 0 (legal)", victimDevice: 0, craft: setTable("254", "0", "0"), want: clean},
	// Accepted, and the node wins: the container mac (v1.20+) says main,
	// but the node shows 10.0.2.11 in eth1's subnet, whose pods use table
	// 2, so the victim's 1536 rule goes too before the address is released.
	{name: "container mac 254, device 1 (the node's table wins)", victimDevice: 1, craft: setTable("254", "0", "1"), want: clean},
	// A wrong but valid pod table: the same. Tearing down only table 100
	// would release the address with its rule 1536 still there.
	{name: "container mac 100 for a pod in table 2 (the node's table wins)", victimDevice: 1, craft: setTable("100", "0", "1"), want: clean},

	// The spec result format where the netconf says reference (the
	// default): real MACs, no dummy. Refused, naming both formats.
	{name: "the spec result format (real MACs, no dummy)", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any {
			itf(p, 0)["mac"] = "0a:58:0a:00:02:0b"
			itf(p, 1)["mac"] = "0a:58:0a:00:02:0c"
			p["interfaces"] = ifaces(p)[:2]
			return p
		}, want: rejected},

	// Size and shape.
	{name: "50 interfaces (addresses on other interfaces are ignored)", victimDevice: 1, craft: padded(50), want: clean},
	{name: "65 interfaces (over the limit of 64)", victimDevice: 1, craft: padded(65), want: rejected},
	{name: "interfaces not an array", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { p["interfaces"] = "eth0"; return p },
		want:  outcome{code: types.ErrDecodingFailure}},
	{name: "ips names interface 7 of 3", victimDevice: 1, craft: setIPs(ipOn(7, "10.0.2.11/32")), want: rejected},
	{name: "ips names interface -1", victimDevice: 1, craft: setIPs(ipOn(-1, "10.0.2.11/32")), want: rejected},
	{name: "ips 10.0.0.0/8 (not a host address)", victimDevice: 1, craft: setIPs(ipOn(1, "10.0.0.0/8")), want: rejected},
	{name: "ips 10.0.2.11/24 (not a host prefix)", victimDevice: 1, craft: setIPs(ipOn(1, "10.0.2.11/24")), want: rejected},
	{name: "ips 127.0.0.1/32", victimDevice: 1, craft: setIPs(ipOn(1, "127.0.0.1/32")), want: rejected},
	{name: "host interface named eth1", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { itf(p, 0)["name"] = "eth1"; return p }, want: rejected},

	// Accepted inputs that name addresses that are not the victim's.
	// IPv6 next to IPv4: both are read; the IPv6 address has no pod rules
	// and no route, so its teardown deletes nothing (the foreign IPv6 rules
	// at 512 and 1536 stay).
	{name: "IPv4 and IPv6 mixed", victimDevice: 1,
		craft: setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "2001:db8::11/128")), want: clean},
	// The neighbour's address: the main-table route says its holder is the
	// neighbour's veth, so its rules are left alone. The victim still goes:
	// its eth0 with the namespace handle, its rules from ipamd's reply.
	{name: "ips names the live neighbour's address", victimDevice: 1,
		craft: func(w *hostileWorld, p map[string]any) any { return setIPs(ipOn(1, w.neigh.ip+"/32"))(w, p) }, want: clean},
	// `1536: from 192.168.7.7 lookup 2` (and its IPv6 twin) has a pod
	// rule's exact shape, and the kernel shows no holder for 192.168.7.7,
	// which is also what a pod whose veth went with its namespace looks
	// like. But no ENI of the node has 192.168.7.7 in its subnet: it is no
	// pod's address here, so the prevResult is refused (code 7) and
	// nothing of the victim either is touched.
	{name: "ips names a pod-shaped foreign rule's address", victimDevice: 1,
		craft: setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "192.168.7.7/32"), ipOn(1, "2001:db8::7/128")), want: rejected},
	// The same, alone, with foreign rules of that address at both pod
	// priorities and a table of the prevResult's choosing.
	{name: "ips names foreign rules' address, table 100", victimDevice: 1,
		foreign: []kernel.Rule{
			{Priority: ownership.PrioToPod, Family: kernel.FamilyV4, Dst: mustNet("10.99.0.5/32"), Table: kernel.TableMain},
			{Priority: ownership.PrioFromPod, Family: kernel.FamilyV4, Src: mustNet("10.99.0.5/32"), Table: 100},
		},
		craft: func(w *hostileWorld, p map[string]any) any {
			return setIPs(ipOn(1, "10.99.0.5/32"))(w, setTable("100", "0", "1")(w, p).(map[string]any))
		},
		want: rejected},
	// The node's own addresses are never a pod's: eth1's primary address
	// with a rule 512 of its shape stays, and so does everything else.
	{name: "ips names the node's own address", victimDevice: 1,
		foreign: []kernel.Rule{{Priority: ownership.PrioToPod, Family: kernel.FamilyV4, Dst: mustNet("10.0.2.10/32"), Table: kernel.TableMain}},
		craft:   setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "10.0.2.10/32")), want: rejected},

	// A genuine result, but a foreign `512: to <victim> iif eth0 lookup
	// main` is listed before the victim's 512 rule: the kernel would take
	// it for the victim's delete request (unset iif is a wildcard). The
	// victim's rule is left, DEL fails with a retryable error naming the
	// foreign rule, and the address is not released while its rule stays.
	{name: "genuine result, a foreign iif rule shadows the victim's 512", victimDevice: 1,
		foreign: []kernel.Rule{{Priority: ownership.PrioToPod, Family: kernel.FamilyV4, Dst: mustNet("10.0.2.11/32"), IifName: "eth0", Table: kernel.TableMain}},
		craft:   func(_ *hostileWorld, p map[string]any) any { return p },
		want: outcome{code: types.ErrTryAgainLater, tornDown: true, eth0Kept: true,
			kept: []string{"rule 512: from all to 10.0.2.11 lookup main", "link eni0761ccbeace veth up mtu 9001",
				"route table main: 10.0.2.11/32 dev eni0761ccbeace scope link"}}},
}

// TestHostilePrevResult runs the corpus through Plugin.Del (the binary's
// entry point) on the kernel model, and proves for each case that nothing
// but what it legitimately removes changed: the foreign rules and routes,
// the main/local/default rules, the neighbour's objects and namespace.
//
// VPCCNI_HOSTILE_MUTANT=no-ownership-check runs it with the ownership check
// removed from the driver: the neighbour case must then fail.
func TestHostilePrevResult(t *testing.T) {
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			w := newHostileWorld(t, hostileDriver(), c.victimDevice, c.foreign...)
			run := w.del(t, c.craft(w, w.genuine()))
			for _, p := range run.problems(c.want) {
				t.Error(p)
			}
			t.Logf("outcome: %s", describe(run.err))
		})
	}
}

// TestHostileCorpusCatchesMutant shows the corpus can fail: with the
// ownership check removed, the neighbour case deletes the neighbour's
// rules, and the comparison says so; with the plugin's own driver it does
// not.
func TestHostileCorpusCatchesMutant(t *testing.T) {
	i := slices.IndexFunc(hostileCases, func(c hostileCase) bool { return c.name == "ips names the live neighbour's address" })
	c := hostileCases[i]

	w := newHostileWorld(t, noOwnershipCheck(), c.victimDevice)
	got := w.del(t, c.craft(w, w.genuine())).problems(c.want)
	lost := "rule 512: from all to " + w.neigh.ip + " lookup main"
	if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, "must keep") && strings.Contains(p, lost) }) {
		t.Fatalf("without the ownership check the corpus reports %q; it must report the neighbour's %q lost", got, lost)
	}

	w = newHostileWorld(t, New(Env{}).env.Driver, c.victimDevice)
	if got := w.del(t, c.craft(w, w.genuine())).problems(c.want); len(got) > 0 {
		t.Fatalf("the plugin's own driver: %q", got)
	}
}

func describe(err error) string {
	if err == nil {
		return "success"
	}
	if e, ok := err.(*types.Error); ok {
		return fmt.Sprintf("CNI error %d %q: %s", e.Code, e.Msg, e.Details)
	}
	return err.Error()
}
