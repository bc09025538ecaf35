package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/driver"
)

// specPods are web-1 in each mode, with the state its spec-format result
// must decode to (host veth, table, VLAN).
var specPods = []struct {
	name     string
	pod      fzPod
	hostVeth string
	table    int
	vlan     int
}{
	{"IPv4 on device 1", fzOwnPod, testHostVeth, ownership.TableUnknown, 0},
	{"IPv4 on device 0", fzPod{ns: "default", name: "web-1", netns: testNetns, reply: fzV4Reply("10.0.1.11", 0)}, testHostVeth, ownership.TableUnknown, 0},
	{"IPv6", fzPod{ns: "default", name: "web-1", netns: testNetns, reply: fzV6Reply("2600:1f14:a::5")}, testHostVeth, ownership.TableUnknown, 0},
	{"branch, strict", fzPod{ns: "default", name: "web-1", netns: testNetns, mode: ModeStrict, reply: fzVlanReply("10.1.0.23", 8)}, "vlan0761ccbeace", 108, 8},
	{"branch, standard", fzPod{ns: "default", name: "web-1", netns: testNetns, mode: ModeStandard, reply: fzVlanReply("10.1.0.23", 8)}, testHostVeth, 108, 8},
}

// TestSpecResultLayout: in every mode and CNI version the spec-format
// result holds what the kernel has, in the fields the spec gives it: each
// mac is the link's real MAC (and parses as one, as podman parses it),
// the container interface's sandbox is the netns, nothing is named that
// the ADD did not make; and it decodes back to the pod's teardown state.
func TestSpecResultLayout(t *testing.T) {
	for _, c := range specPods {
		for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
			t.Run(c.name+" "+v, func(t *testing.T) {
				k, trunk := fzNewKernel(t)
				res := fzAddPodIn(t, k, trunk, c.pod, v, ownership.DefaultVethPrefix, ResultFormatSpec)
				if res.Version() != v {
					t.Fatalf("result version %s, want %s", res.Version(), v)
				}
				r, err := current.NewResultFromResult(res)
				if err != nil {
					t.Fatal(err)
				}
				host, _ := k.Open(fzNodeNS)
				pod, _ := k.Open(testNetns)
				defer host.Close()
				defer pod.Close()
				want := []string{c.hostVeth + "|" + linkMAC(t, host, c.hostVeth) + "|", "eth0|" + linkMAC(t, pod, "eth0") + "|" + testNetns}
				if c.vlan != 0 {
					want = append(want, ownership.VlanLink(c.vlan)+"|"+linkMAC(t, host, ownership.VlanLink(c.vlan))+"|")
				}
				var got []string
				for _, itf := range r.Interfaces {
					got = append(got, itf.Name+"|"+itf.Mac+"|"+itf.Sandbox)
					if m, err := net.ParseMAC(itf.Mac); err != nil || len(m) != 6 {
						t.Errorf("interface %s: mac %q is not a MAC address (%v)", itf.Name, itf.Mac, err)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("interfaces %q\nwant %q", got, want)
				}
				if len(r.IPs) != 1 || r.IPs[0].Interface == nil || *r.IPs[0].Interface != 1 {
					t.Fatalf("ips %+v", r.IPs)
				}
				gw := driver.GatewayV4
				if r.IPs[0].Address.IP.To4() == nil {
					gw = driver.GatewayV6
				}
				if r.IPs[0].Gateway.String() != gw.String() || len(r.Routes) != 1 || r.Routes[0].GW.String() != gw.String() {
					t.Fatalf("gateway %v, routes %+v: want the pod's gateway %s", r.IPs[0].Gateway, r.Routes, gw)
				}
				if ones, _ := r.Routes[0].Dst.Mask.Size(); ones != 0 {
					t.Fatalf("route %v is not the default route", r.Routes[0])
				}

				b, _ := json.Marshal(res)
				st, err := DecodeResult(b, ResultFormatSpec, "eth0", "default", "web-1", ownership.DefaultVethPrefix)
				if err != nil {
					t.Fatal(err)
				}
				if st.Pod.HostVeth != c.hostVeth || st.Pod.ContainerIf != "eth0" || st.DeviceNumber != -1 || st.VlanID != c.vlan || st.FromDummy ||
					len(st.Pod.IPs) != 1 || st.Pod.IPs[0].Table != c.table || (c.vlan != 0) != (st.Pod.Branch != nil) {
					t.Fatalf("decoded %+v (pod %+v)", st, st.Pod)
				}
			})
		}
	}
}

func linkMAC(t *testing.T, k kernel.API, name string) string {
	t.Helper()
	l, err := k.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.HardwareAddr.String()
}

// TestResultFormatMismatch: a prevResult in the other format than the
// netconf's is a bad prevResult (code 7) saying which format it is in and
// which the netconf says, never read as the other.
func TestResultFormatMismatch(t *testing.T) {
	k, trunk := fzNewKernel(t)
	ref := fzAddPodIn(t, k, trunk, fzOwnPod, "1.0.0", ownership.DefaultVethPrefix, ResultFormatReference)
	k, trunk = fzNewKernel(t)
	spec := fzAddPodIn(t, k, trunk, fzOwnPod, "1.0.0", ownership.DefaultVethPrefix, ResultFormatSpec)
	for _, c := range []struct {
		prev      types.Result
		netconf   string
		got, want string
	}{
		{ref, ResultFormatSpec, ResultFormatReference, ResultFormatSpec},
		{spec, ResultFormatReference, ResultFormatSpec, ResultFormatReference},
		{spec, "", ResultFormatSpec, ResultFormatReference},
	} {
		extra := map[string]any{"prevResult": c.prev}
		if c.netconf != "" {
			extra["resultFormat"] = c.netconf
		}
		conf, err := LoadNetConf(netconf(t, extra))
		if err != nil {
			t.Fatal(err)
		}
		_, err = decodeCleanupState(conf.PrevResult, "eth0", "default", "web-1", "eni")
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig ||
			!strings.Contains(ce.Details, `in the "`+c.got+`" result format`) || !strings.Contains(ce.Details, `netconf says resultFormat "`+c.want+`"`) {
			t.Errorf("a %s-format prevResult, netconf %q: %v; want code 7 naming both formats", c.got, c.netconf, err)
		}
		b, _ := json.Marshal(c.prev)
		if _, err := DecodeResult(b, c.want, "eth0", "default", "web-1", "eni"); !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("DecodeResult of a %s-format result as %s: %v, want code 7", c.got, c.want, err)
		}
	}
}

// vlanIpamd answers as ipamd does for a branch pod: AddNetwork with its
// branch ENI, DelNetwork with the VLAN and the address, ListAllocations
// with nothing (ipamd keeps no record of a branch pod).
type vlanIpamd struct{ add *rpc.AddNetworkReply }

func (f vlanIpamd) AddNetwork(context.Context, *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	return f.add, nil
}

func (f vlanIpamd) DelNetwork(context.Context, *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	return &rpc.DelNetworkReply{Success: true, PodVlanId: f.add.PodVlanId, IPAllocationMetadata: f.add.IPAllocationMetadata}, nil
}

// TestSpecBranchPodDel: a branch pod's DEL with its spec-format result
// leaves the node as it was before the ADD, VLAN link and iif rules
// included, and succeeds the first time, in both enforcing modes.
func TestSpecBranchPodDel(t *testing.T) {
	for _, c := range specPods[3:] {
		t.Run(c.name, func(t *testing.T) {
			k, trunk := fzNewKernel(t)
			before := fzSnapshotAll(t, k)[fzNodeNS]
			p := New(Env{Kernel: k.Opener(fzNodeNS), Version: "test",
				Dial: func(string) (rpc.CNIBackendClient, io.Closer, error) {
					return vlanIpamd{add: c.pod.reply(trunk)}, nopCloser{}, nil
				},
				DialInventory: emptyInventory,
				IsHostNS:      func(path string) (bool, error) { return path == fzNodeNS, nil }})
			fzMust(t, k.AddNamespace(testNetns))
			conf := map[string]any{"cniVersion": "1.0.0", "name": "aws-cni", "type": "vpc-cni", "podSGEnforcingMode": c.pod.mode,
				"resultFormat": ResultFormatSpec}
			stdin, _ := json.Marshal(conf)
			res, err := p.Add(&skel.CmdArgs{ContainerID: "c1", Netns: testNetns, IfName: "eth0", Args: testArgs, StdinData: stdin})
			fzMust(t, err)
			if len(fzSnapshotAll(t, k)[fzNodeNS]) <= len(before) {
				t.Fatal("the ADD made nothing on the node")
			}
			conf["prevResult"] = res
			stdin, _ = json.Marshal(conf)
			if err := p.Del(&skel.CmdArgs{ContainerID: "c1", Netns: testNetns, IfName: "eth0", Args: testArgs, StdinData: stdin}); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			added, removed := kernel.Diff(kernel.State{Links: before}, kernel.State{Links: fzSnapshotAll(t, k)[fzNodeNS]})
			if len(added)+len(removed) > 0 {
				t.Fatalf("the node after the DEL: left %q, lost %q", added, removed)
			}
		})
	}
}

// TestCheckSpecFormat: CHECK reads a spec-format prevResult, decides the
// unknown table from the node, and names a missing rule 1536; a
// reference-format prevResult under a spec netconf is code 7.
func TestCheckSpecFormat(t *testing.T) {
	for _, device := range []int{0, 1} {
		w := newHostileWorldIn(t, ResultFormatSpec, driver.New(nil), device)
		check := func(prev any) error {
			return w.p.Check(w.victim.cmdArgs(hostileConf(t, w, ResultFormatSpec, prev)))
		}
		if err := check(w.genuine()); err != nil {
			t.Fatalf("device %d: CHECK of a genuine spec-format result: %v", device, err)
		}
		if device == 0 {
			continue
		}
		dropRule(t, w.k, w.node, ownership.PrioFromPod, w.victim.ip)
		err := check(w.genuine())
		wantCode(t, err, ErrCheckFailed)
		if !strings.Contains(err.Error(), "rule 1536 from "+w.victim.ip+"/32 lookup 2 is missing") {
			t.Fatalf("CHECK without rule 1536: %v", err)
		}
	}
	w := newHostileWorld(t, driver.New(nil), 1)
	wantCode(t, w.p.Check(w.victim.cmdArgs(hostileConf(t, w, ResultFormatSpec, w.genuine()))), types.ErrInvalidNetworkConfig)
}

// dropRule deletes the node's rule of the priority whose selector is ip.
func dropRule(t *testing.T, _ *model.Kernel, node kernel.API, prio int, ip string) {
	t.Helper()
	rules, err := node.RuleList(kernel.FamilyV4)
	fzMust(t, err)
	for _, r := range rules {
		if r.Priority == prio && ((r.Src != nil && r.Src.IP.String() == ip) || (r.Dst != nil && r.Dst.IP.String() == ip)) {
			fzMust(t, node.RuleDel(r))
			return
		}
	}
	t.Fatalf("no rule %d of %s", prio, ip)
}
