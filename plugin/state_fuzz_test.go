package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
)

// fzFakeIpamd answers AddNetwork with a fixed reply and DelNetwork with
// "unknown pod": the incident's ipamd, which has forgotten the pod, so DEL
// has nothing but the prevResult to go by.
type fzFakeIpamd struct{ add *rpc.AddNetworkReply }

func (f fzFakeIpamd) AddNetwork(context.Context, *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	return f.add, nil
}

func (fzFakeIpamd) DelNetwork(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	return nil, status.Error(codes.NotFound, unknownPodText)
}

// fzNodeNS is the node namespace of the fuzz node.
const fzNodeNS = "node"

// fzModelPlugin is the real plugin (real driver) on a kernel model, with an
// ipamd that gives the reply to ADD.
func fzModelPlugin(k *model.Kernel, reply *rpc.AddNetworkReply) *Plugin {
	return New(Env{Kernel: k.Opener(fzNodeNS), Version: "test",
		Dial: func(string) (rpc.CNIBackendClient, io.Closer, error) {
			return fzFakeIpamd{add: reply}, nopCloser{}, nil
		},
		IsHostNS: func(path string) (bool, error) { return path == fzNodeNS, nil }})
}

// fzNewKernel is a node with a trunk ENI (eth2, for branch pods) and a
// secondary ENI (eth1) whose own objects, as ipamd makes them, a pod's
// teardown fzMust never touch.
func fzNewKernel(tb testing.TB) (*model.Kernel, int) {
	tb.Helper()
	k := model.New()
	fzMust(tb, k.AddNamespace(fzNodeNS))
	host, err := k.Open(fzNodeNS)
	fzMust(tb, err)
	defer host.Close()
	eth1, err := k.AddDevice(fzNodeNS, "eth1", 9001, nil)
	fzMust(tb, err)
	trunk, err := k.AddDevice(fzNodeNS, "eth2", 9001, nil)
	fzMust(tb, err)
	fzMust(tb, host.LinkSetUp("eth1"))
	fzMust(tb, host.LinkSetUp("eth2"))
	fzMust(tb, host.AddrAdd(eth1, &net.IPNet{IP: net.ParseIP("10.0.2.10").To4(), Mask: net.CIDRMask(24, 32)}))
	fzMust(tb, host.RouteAdd(kernel.Route{Table: 2, Gw: net.ParseIP("10.0.2.1").To4(), LinkIndex: eth1, Family: kernel.FamilyV4}))
	fzMust(tb, host.RuleAdd(kernel.Rule{Priority: 32765, Src: &net.IPNet{IP: net.ParseIP("10.0.2.10").To4(), Mask: net.CIDRMask(32, 32)}, Table: 2}))
	return k, trunk
}

func fzMust(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// fzPod is one pod the fuzz node may hold.
type fzPod struct {
	ns, name, netns string
	mode            string // podSGEnforcingMode
	reply           func(trunk int) *rpc.AddNetworkReply
}

func fzV4Reply(ip string, device int32) func(int) *rpc.AddNetworkReply {
	return func(int) *rpc.AddNetworkReply {
		return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{
			{IPv4Addr: ip, DeviceNumber: device, RouteTableId: int32(fzDatastoreTable(device))}}}
	}
}

func fzV6Reply(ip string) func(int) *rpc.AddNetworkReply {
	return func(int) *rpc.AddNetworkReply {
		return &rpc.AddNetworkReply{Success: true, IPAllocationMetadata: []*rpc.IPAllocationMetadata{
			{IPv6Addr: ip, DeviceNumber: 0, RouteTableId: kernel.TableMain}}}
	}
}

func fzVlanReply(ip string, vlan int32) func(int) *rpc.AddNetworkReply {
	return func(trunk int) *rpc.AddNetworkReply {
		return &rpc.AddNetworkReply{Success: true, PodVlanId: vlan, PodENIMAC: fmt.Sprintf("0a:bb:00:00:00:%02x", vlan),
			PodENISubnetGW: "10.1.0.1", ParentIfIndex: int32(trunk),
			IPAllocationMetadata: []*rpc.IPAllocationMetadata{{IPv4Addr: ip, DeviceNumber: -1}}}
	}
}

// fzDatastoreTable is ipamd's table of a device (main for 0, device+1).
func fzDatastoreTable(device int32) int {
	if device == 0 {
		return kernel.TableMain
	}
	return int(device) + 1
}

// fzAddPod runs the plugin's real ADD for the pod on the model and returns
// the result, in cniVersion, as the runtime caches it.
func fzAddPod(tb testing.TB, k *model.Kernel, trunk int, p fzPod, cniVersion, vethPrefix string) types.Result {
	tb.Helper()
	return fzAddPodIn(tb, k, trunk, p, cniVersion, vethPrefix, ResultFormatReference)
}

// fzAddPodIn is fzAddPod with the netconf's resultFormat.
func fzAddPodIn(tb testing.TB, k *model.Kernel, trunk int, p fzPod, cniVersion, vethPrefix, format string) types.Result {
	tb.Helper()
	if !k.HasNamespace(p.netns) {
		fzMust(tb, k.AddNamespace(p.netns))
	}
	conf := map[string]any{"cniVersion": cniVersion, "name": "aws-cni", "type": "vpc-cni", "vethPrefix": vethPrefix, "resultFormat": format}
	if p.mode != "" {
		conf["podSGEnforcingMode"] = p.mode
	}
	stdin, err := json.Marshal(conf)
	fzMust(tb, err)
	res, err := fzModelPlugin(k, p.reply(trunk)).Add(&skel.CmdArgs{ContainerID: "c-" + p.name, Netns: p.netns, IfName: "eth0",
		Args:      fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", p.ns, p.name),
		StdinData: stdin})
	if err != nil {
		tb.Fatalf("ADD %s/%s: %v", p.ns, p.name, err)
	}
	return res
}

// The pod under test is default/web-1 in testNetns (testArgs); its
// neighbours on the node are one pod of every kind a forged prevResult
// could try to hit: same ENI, primary ENI, IPv6, a strict and a standard
// branch pod.
var (
	fzOwnPod     = fzPod{ns: "default", name: "web-1", netns: testNetns, reply: fzV4Reply("10.0.2.11", 1)}
	fzNeighbours = []fzPod{
		{ns: "default", name: "web-2", netns: "/var/run/netns/pod-2", reply: fzV4Reply("10.0.2.12", 1)},
		{ns: "default", name: "web-0", netns: "/var/run/netns/pod-0", reply: fzV4Reply("10.0.1.12", 0)},
		{ns: "default", name: "v6-0", netns: "/var/run/netns/pod-v6", reply: fzV6Reply("2600:1f14:a::7")},
		{ns: "default", name: "sg-7", netns: "/var/run/netns/pod-sg7", mode: ModeStrict, reply: fzVlanReply("10.1.0.21", 7)},
		{ns: "default", name: "sg-9", netns: "/var/run/netns/pod-sg9", mode: ModeStandard, reply: fzVlanReply("10.1.0.22", 9)},
	}
)

// fzSeedResults are real results of web-1 in every mode and CNI version:
// the plugin's ADD run on the kernel model, in the given resultFormat.
func fzSeedResults(tb testing.TB, format string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, p := range []fzPod{
		fzOwnPod,
		{ns: "default", name: "web-1", netns: testNetns, reply: fzV4Reply("10.0.1.11", 0)},
		{ns: "default", name: "web-1", netns: testNetns, reply: fzV6Reply("2600:1f14:a::5")},
		{ns: "default", name: "web-1", netns: testNetns, mode: ModeStrict, reply: fzVlanReply("10.1.0.23", 8)},
		{ns: "default", name: "web-1", netns: testNetns, mode: ModeStandard, reply: fzVlanReply("10.1.0.23", 8)},
	} {
		for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			k, trunk := fzNewKernel(tb)
			res := fzAddPodIn(tb, k, trunk, p, v, ownership.DefaultVethPrefix, format)
			b, err := json.Marshal(res)
			fzMust(tb, err)
			out = append(out, b)
		}
	}
	return out
}

// FuzzDecodeCleanupState: a prevResult is a file anyone with access to the
// runtime's cache can write. DEL parses it into the state it tears down
// from; this target checks that, whatever the prevResult says,
//   - a rejected one is a CNI error with a code (and DEL touches nothing);
//   - a decoded state names only pod tables (never local 255, default
//     253 or unspec 0, except TableUnknown for a result that recorded no
//     table at all), VLANs 1..4094 other than 153 and 155, only /32 and
//     /128 pod addresses the result gave the pod's own interface, and the
//     pod's own host veth (<a valid veth prefix><the pod's hash>);
//   - the whole DEL (real driver, kernel model, an ipamd that has
//     forgotten the pod) removes nothing that was on the node before the
//     pod was added: not a neighbour pod's rules, routes, veth or VLAN,
//     not ipamd's ENI objects.
//
// Inputs are the prevResult JSON, the netconf's cniVersion, vethPrefix
// and resultFormat, and CNI_IFNAME; the seeds are real results of the
// plugin's ADD in both formats (see fzSeedResults), each also under the
// other format's netconf, and the hand-made files in testdata/fuzz.
func FuzzDecodeCleanupState(f *testing.F) {
	for _, format := range []string{ResultFormatReference, ResultFormatSpec} {
		for _, b := range fzSeedResults(f, format) {
			var v struct {
				CNIVersion string `json:"cniVersion"`
			}
			fzMust(f, json.Unmarshal(b, &v))
			for _, netconfFormat := range []string{ResultFormatReference, ResultFormatSpec} {
				f.Add(b, v.CNIVersion, ownership.DefaultVethPrefix, netconfFormat, "eth0")
			}
		}
	}
	// Forged spec-format results: VLAN links that are no branch ENI's
	// (153: table 253, default) or two of them, a dummy beside real MACs.
	for _, ifs := range []string{
		`{"name":"vlan.eth.153","mac":"0a:bb:00:00:00:99"}`,
		`{"name":"vlan.eth.7","mac":"0a:bb:00:00:00:07"},{"name":"vlan.eth.8","mac":"0a:bb:00:00:00:08"}`,
		`{"name":"dummy0761ccbeace","mac":"0","sandbox":"1"}`,
	} {
		f.Add([]byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eni0761ccbeace","mac":"0a:58:00:00:00:01"},`+
			`{"name":"eth0","mac":"0a:58:00:00:00:02","sandbox":"/var/run/netns/pod-1"},`+ifs+`],`+
			`"ips":[{"interface":1,"address":"10.0.2.11/32"}]}`), "1.0.0", ownership.DefaultVethPrefix, ResultFormatSpec, "eth0")
	}

	// The node, once per process: the neighbours, then web-1. What the
	// node had before web-1 is what no DEL of web-1 may remove.
	base, trunk := fzNewKernel(f)
	for _, p := range fzNeighbours {
		fzAddPod(f, base, trunk, p, "1.0.0", ownership.DefaultVethPrefix)
	}
	before := fzSnapshotAll(f, base)
	fzAddPod(f, base, trunk, fzOwnPod, "1.0.0", ownership.DefaultVethPrefix)
	after := fzSnapshotAll(f, base)
	protected := map[string][]string{}
	for ns, lines := range before {
		if ns == testNetns {
			continue
		}
		for _, l := range lines {
			// A line web-1's ADD changed (none today) is not the
			// neighbours' any more.
			if slices.Contains(after[ns], l) {
				protected[ns] = append(protected[ns], l)
			}
		}
	}

	f.Fuzz(func(t *testing.T, prev []byte, cniVersion, vethPrefix, resultFormat, ifName string) {
		if validateIfName(ifName) != nil || !json.Valid(prev) {
			// The plugin rejects such a CNI_IFNAME before it looks at the
			// prevResult; a prevResult that is not JSON makes the whole
			// netconf a decoding failure (FuzzLoadNetConf's domain).
			return
		}
		stdin, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": "aws-cni", "type": "vpc-cni",
			"vethPrefix": vethPrefix, "resultFormat": resultFormat, "prevResult": json.RawMessage(prev)})
		if err != nil {
			return
		}
		k := base.Clone()
		p := fzModelPlugin(k, nil)
		args := &skel.CmdArgs{ContainerID: "c-web-1", Netns: testNetns, IfName: ifName, Args: testArgs, StdinData: stdin}
		r, err := p.PrepareDel(args)
		if err != nil {
			fzCniErrorCode(t, "rejected DEL", err)
			if now := fzSnapshotAll(t, k); !maps.EqualFunc(now, after, slices.Equal) {
				t.Fatalf("a rejected DEL changed the node: %v", err)
			}
			return
		}
		if r.State != nil {
			conf, err := LoadNetConf(stdin)
			if err != nil {
				t.Fatalf("PrepareDel accepted a netconf LoadNetConf rejects: %v", err)
			}
			fzCheckCleanupState(t, r.State, conf, ifName)
		}
		err = p.Delete(r)
		r.Close()
		if err != nil {
			fzCniErrorCode(t, "failed DEL", err)
		}
		fzCheckProtected(t, k, protected, "after DEL")
	})
}

// fzCheckCleanupState states what a decoded state may name.
func fzCheckCleanupState(t *testing.T, st *CleanupState, conf *NetConf, ifName string) {
	t.Helper()
	res, err := current.NewResultFromResult(conf.NetConf.PrevResult)
	if err != nil {
		t.Fatalf("decoded a prevResult that does not convert: %v", err)
	}
	if st.Pod.ContainerIf != ifName {
		t.Fatalf("state names container interface %q, CNI_IFNAME is %q", st.Pod.ContainerIf, ifName)
	}
	fzCheckHostVeth(t, st.Pod.HostVeth, conf.VethPrefix)
	if st.DeviceNumber < -1 || st.DeviceNumber > maxDeviceNumber {
		t.Fatalf("state names device %d", st.DeviceNumber)
	}
	if st.VlanID != 0 {
		if st.VlanID < 1 || st.VlanID > 4094 || !ownership.IsPodTable(st.VlanID+ownership.VlanTableOffset) {
			t.Fatalf("state names VLAN %d (table %d)", st.VlanID, st.VlanID+ownership.VlanTableOffset)
		}
		if st.Pod.Branch == nil || st.Pod.Branch.VlanID != st.VlanID {
			t.Fatalf("VLAN %d but branch %+v", st.VlanID, st.Pod.Branch)
		}
	} else if st.Pod.Branch != nil {
		t.Fatalf("no VLAN but branch %+v", st.Pod.Branch)
	}
	// The pod's own interface is the first one named CNI_IFNAME with a
	// sandbox, as the plugin writes it.
	ci := slices.IndexFunc(res.Interfaces, func(i *current.Interface) bool { return i != nil && i.Name == ifName && i.Sandbox != "" })
	if ci < 0 {
		t.Fatalf("decoded a result without interface %q", ifName)
	}
	var given []netip.Addr
	for _, ipc := range res.IPs {
		if ipc == nil || ipc.Interface == nil || *ipc.Interface != ci {
			continue
		}
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		ones, bits := ipc.Address.Mask.Size()
		if ones != bits || ones != a.Unmap().BitLen() {
			t.Fatalf("decoded a result whose address %s is not a host address", ipc.Address.String())
		}
		given = append(given, a.Unmap())
	}
	if len(given) != len(st.Pod.IPs) {
		t.Fatalf("state has %d addresses, the result gave interface %d %d", len(st.Pod.IPs), ci, len(given))
	}
	for i, ip := range st.Pod.IPs {
		if ip.Addr != given[i] || !ownership.ValidPodAddr(ip.Addr) {
			t.Fatalf("state address %s: the result gave %s", ip.Addr, given[i])
		}
		switch {
		case st.VlanID != 0:
			if ip.Table != st.VlanID+ownership.VlanTableOffset {
				t.Fatalf("branch pod on VLAN %d: %s", st.VlanID, ip)
			}
		case ip.Table == ownership.TableUnknown && conf.ResultFormat == ResultFormatSpec:
			// A spec-format result records no table: the node decides.
			if st.DeviceNumber != -1 || st.FromDummy {
				t.Fatalf("a spec-format result decoded to device %d, dummy %v", st.DeviceNumber, st.FromDummy)
			}
		case ip.Table == ownership.TableUnknown:
			// Only a result that recorded neither the table (container
			// mac) nor the device (dummy sandbox): a reference before
			// v1.12.1. Teardown then matches the pod's own 1536 rules
			// in pod tables only.
			if res.Interfaces[ci].Mac != "" || st.DeviceNumber >= 0 {
				t.Fatalf("table unknown although the result says mac %q, device %d", res.Interfaces[ci].Mac, st.DeviceNumber)
			}
		case !ownership.IsPodTable(ip.Table) || ip.Table == kernel.TableLocal || ip.Table == kernel.TableDefault:
			t.Fatalf("state names table %d for %s", ip.Table, ip.Addr)
		}
	}
}

// fzCheckHostVeth: the host veth is the pod's: <prefix><the pod's hash>
// within IFNAMSIZ. The prefix is the netconf's or the strict "vlan" when
// the result records none; a recorded one may carry any valid prefix (the
// vethPrefix may have changed since ADD; teardown finds the pod's veth
// through the pod namespace, not by this name, so the name only serves
// CHECK and the logs).
func fzCheckHostVeth(t *testing.T, hv, vethPrefix string) {
	t.Helper()
	suffix := ownership.PodSuffix("default", "web-1", 0)
	prefix, ok := strings.CutSuffix(hv, suffix)
	switch {
	case hv == ownership.HostVeth(vethPrefix, "default", "web-1"), hv == ownership.HostVeth(ownership.StrictVethPrefix, "default", "web-1"):
	case !ok || len(hv) > kernel.MaxLinkNameLen || ownership.ValidatePrefix(prefix) != nil:
		t.Fatalf("state names host veth %q; the pod's is <prefix>%s with a valid prefix (%q here, or %q)", hv, suffix, vethPrefix, ownership.StrictVethPrefix)
	}
}

// fzSnapshotAll is every namespace's state, by path.
func fzSnapshotAll(tb testing.TB, k *model.Kernel) map[string][]string {
	tb.Helper()
	out := map[string][]string{}
	for _, ns := range k.Namespaces() {
		h, err := k.Open(ns)
		fzMust(tb, err)
		s, err := kernel.Snapshot(h)
		h.Close()
		fzMust(tb, err)
		out[ns] = s.Lines()
	}
	return out
}

// fzCheckProtected: every line that predates the pod is still there.
func fzCheckProtected(t *testing.T, k *model.Kernel, protected map[string][]string, when string) {
	t.Helper()
	now := fzSnapshotAll(t, k)
	var lost []string
	for ns, lines := range protected {
		if _, ok := now[ns]; !ok {
			t.Fatalf("%s: namespace %s is gone", when, ns)
		}
		for _, l := range lines {
			if !slices.Contains(now[ns], l) {
				lost = append(lost, ns+": "+l)
			}
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Fatalf("%s: objects that were not the pod's are gone:\n\t%s", when, strings.Join(lost, "\n\t"))
	}
}
