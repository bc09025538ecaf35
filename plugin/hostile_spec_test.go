package plugin

import (
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// The hostile-prevResult corpus for resultFormat "spec": the victim's ADD
// wrote a spec-format result (host veth and eth0 with their real MACs, no
// dummy), the netconf of its DEL says "spec", and each case crafts the
// prevResult from that genuine one. The world and the outcomes are the
// reference corpus's (hostile_test.go): a rejected prevResult is set
// aside (code 7) and the victim is torn down from ipamd's record and its
// namespace, touching nothing else.

func setMac(i int, mac string) func(*hostileWorld, map[string]any) any {
	return func(_ *hostileWorld, p map[string]any) any { itf(p, i)["mac"] = mac; return p }
}

func appendIfaces(ifs ...map[string]any) func(*hostileWorld, map[string]any) any {
	return func(_ *hostileWorld, p map[string]any) any {
		for _, i := range ifs {
			p["interfaces"] = append(ifaces(p), i)
		}
		return p
	}
}

// victimDummy is the reference's dummy interface of the victim.
var victimDummy = map[string]any{"name": ownership.Dummy("default", victimName), "mac": "0", "sandbox": "1"}

var hostileSpecCases = []hostileCase{
	{name: "genuine spec result (control)", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { return p }, want: clean},
	// Table main: no rule 1536 to remove, and none is looked for.
	{name: "genuine spec result, device 0 (control)", victimDevice: 0,
		craft: func(_ *hostileWorld, p map[string]any) any { return p }, want: clean},

	// The reference format where the netconf says spec: the runtime cached
	// a result of another netconf, or it is forged.
	{name: "the reference's layout (table in mac, dummy)", victimDevice: 1,
		craft: func(w *hostileWorld, p map[string]any) any {
			delete(itf(p, 0), "mac")
			return appendIfaces(victimDummy)(w, setMac(1, "2")(w, p).(map[string]any))
		}, want: rejected},
	{name: "a dummy interface beside real MACs", victimDevice: 1, craft: appendIfaces(victimDummy), want: rejected},
	{name: "container mac 2 (a route table)", victimDevice: 1, craft: setMac(1, "2"), want: rejected},
	{name: "container mac 254 (table main)", victimDevice: 0, craft: setMac(1, "254"), want: rejected},
	{name: "host veth mac 255", victimDevice: 1, craft: setMac(0, "255"), want: rejected},
	{name: "container mac not a MAC", victimDevice: 1, craft: setMac(1, "zz:zz:zz:zz:zz:zz"), want: rejected},
	{name: "container mac of 8 bytes", victimDevice: 1, craft: setMac(1, "02:00:00:00:00:00:00:01"), want: rejected},
	// Legal: the spec makes mac optional; the pod is found without it.
	{name: "no macs at all (legal)", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any {
			delete(itf(p, 0), "mac")
			delete(itf(p, 1), "mac")
			return p
		}, want: clean},

	// The interfaces.
	{name: "host interface named eth1", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { itf(p, 0)["name"] = "eth1"; return p }, want: rejected},
	{name: "eth0 without a sandbox", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { delete(itf(p, 1), "sandbox"); return p }, want: rejected},
	{name: "65 interfaces (over the limit of 64)", victimDevice: 1,
		craft: func(w *hostileWorld, p map[string]any) any {
			for i := len(ifaces(p)); i < 65; i++ {
				p["interfaces"] = append(ifaces(p), map[string]any{"name": fmt.Sprintf("x%d", i), "mac": "0a:00:00:00:00:01"})
			}
			return p
		}, want: rejected},
	{name: "interfaces not an array", victimDevice: 1,
		craft: func(_ *hostileWorld, p map[string]any) any { p["interfaces"] = "eth0"; return p },
		want:  outcome{code: types.ErrDecodingFailure}},
	// Another interface in the sandbox with the neighbour's address: not
	// the pod's interface, so its address is not read.
	{name: "another interface in the sandbox with the neighbour's address", victimDevice: 1,
		craft: func(w *hostileWorld, p map[string]any) any {
			p = appendIfaces(map[string]any{"name": "net1", "sandbox": w.victim.netns, "mac": "0a:00:00:00:00:02"})(w, p).(map[string]any)
			return setIPs(ipOn(1, w.victim.ip+"/32"), ipOn(2, w.neigh.ip+"/32"))(w, p)
		}, want: clean},

	// The addresses, as in the reference corpus.
	{name: "ips names interface 7 of 2", victimDevice: 1, craft: setIPs(ipOn(7, "10.0.2.11/32")), want: rejected},
	{name: "ips 10.0.0.0/8 (not a host address)", victimDevice: 1, craft: setIPs(ipOn(1, "10.0.0.0/8")), want: rejected},
	{name: "ips 127.0.0.1/32", victimDevice: 1, craft: setIPs(ipOn(1, "127.0.0.1/32")), want: rejected},
	{name: "IPv4 and IPv6 mixed", victimDevice: 1,
		craft: setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "2001:db8::11/128")), want: clean},
	{name: "ips names the live neighbour's address", victimDevice: 1,
		craft: func(w *hostileWorld, p map[string]any) any { return setIPs(ipOn(1, w.neigh.ip+"/32"))(w, p) }, want: clean},
	// The table is unknown, so the node decides it: a pod-shaped foreign
	// rule's address is in no ENI's subnet and is refused.
	{name: "ips names a pod-shaped foreign rule's address", victimDevice: 1,
		craft: setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "192.168.7.7/32")), want: rejected},
	{name: "ips names the node's own address", victimDevice: 1,
		foreign: []kernel.Rule{{Priority: ownership.PrioToPod, Family: kernel.FamilyV4, Dst: mustNet("10.0.2.10/32"), Table: kernel.TableMain}},
		craft:   setIPs(ipOn(1, "10.0.2.11/32"), ipOn(1, "10.0.2.10/32")), want: rejected},
}

// TestHostileSpecPrevResult runs the spec corpus through Plugin.Del on the
// kernel model, with the checks of TestHostilePrevResult.
func TestHostileSpecPrevResult(t *testing.T) {
	for _, c := range hostileSpecCases {
		t.Run(c.name, func(t *testing.T) {
			w := newHostileWorldIn(t, ResultFormatSpec, hostileDriver(), c.victimDevice, c.foreign...)
			if _, ok := itf(w.genuine(), 1)["mac"].(string); !ok || len(ifaces(w.genuine())) != 2 {
				t.Fatalf("the victim's ADD did not write a spec-format result: %v", w.genuine())
			}
			run := w.del(t, c.craft(w, w.genuine()))
			for _, p := range run.problems(c.want) {
				t.Error(p)
			}
			t.Logf("outcome: %s", describe(run.err))
		})
	}
}
