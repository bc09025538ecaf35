package ipamd

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// fixedInventory is an instance without VPC CIDRs (a cloud that does not
// say), with a node-side link for each ENI.
type fixedInventory struct{ inst cloud.Instance }

func (f fixedInventory) Instance(context.Context) (cloud.Instance, error) { return f.inst, nil }

// TestHostNATAtStartAndEachPass: ipamd writes the plan for its primary
// ENI at start, puts a deleted rule back with a reconcile pass, and
// writes nothing in IPv6 mode.
func TestHostNATAtStartAndEachPass(t *testing.T) {
	n := newNode(t)
	tb := hostnat.NewMemTables()
	settings := hostnat.Config{Randomize: hostnat.RandomPRNG, NodePort: true, Mark: hostnat.DefaultMark, VethPrefix: "eni"}
	d := newDaemon(t, sockPath(t), "m5.large", Config{Kernel: n.h, StandInLinks: true, Reconcile: true,
		HostNAT: &HostNAT{Tables: tb, Rules: settings}}, WithManualLoops())
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	want := settings
	want.PrimaryLink, want.PrimaryIP = "eth0", d.Instance().ENIs[0].PrimaryIP
	want.VPCCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}
	if !slices.Equal(d.Instance().VPCCIDRs, want.VPCCIDRs) {
		t.Fatalf("the instance's VPC CIDRs %v, want the memory cloud's %v", d.Instance().VPCCIDRs, want.VPCCIDRs)
	}
	plan := hostnat.PlanFor(want)
	if c, err := hostnat.Reconcile(tb, plan); err != nil || len(c) != 0 {
		t.Fatalf("after start the tables differ from the plan: %v %v", c, err)
	}
	jump := plan.Builtins[0]
	if err := tb.Delete(jump.Table, jump.Chain, jump.Spec...); err != nil {
		t.Fatal(err)
	}
	d.reconcileOnce(context.Background())
	if c, err := hostnat.Reconcile(tb, plan); err != nil || len(c) != 0 {
		t.Fatalf("a reconcile pass did not put %s back: %v %v", jump, c, err)
	}
	// A pass over unchanged tables, kernel and pool skips the check
	// (syncHostNATUnlessSettled); a rule deleted since is still seen.
	d.reconcileOnce(context.Background())
	for round := range 2 {
		if err := tb.Delete(jump.Table, jump.Chain, jump.Spec...); err != nil {
			t.Fatal(err)
		}
		d.reconcileOnce(context.Background())
		if c, err := hostnat.Reconcile(tb, plan); err != nil || len(c) != 0 {
			t.Fatalf("round %d: a pass after a settled one did not put %s back: %v %v", round, jump, c, err)
		}
	}
}

// TestHostNATVPCFallsBackToSubnets: a cloud that names no VPC CIDR gets
// the ENIs' subnets as the CIDRs not to translate.
func TestHostNATVPCFallsBackToSubnets(t *testing.T) {
	n := newNode(t)
	c := newDaemon(t, sockPath(t), "m5.large", Config{})
	inst := c.Instance()
	inst.VPCCIDRs = nil
	d, err := New(Config{SocketPath: sockPath(t), Inventory: fixedInventory{inst}, Kernel: n.h, StandInLinks: true,
		HostNAT: &HostNAT{Tables: hostnat.NewMemTables(), Rules: hostnat.Config{Randomize: hostnat.RandomNone, Mark: 1, VethPrefix: "eni"}}}, WithManualLoops())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	cfg, err := d.hostNATConfig(d.cfg.HostNAT.Rules)
	if err != nil {
		t.Fatal(err)
	}
	var subnets []netip.Prefix
	for _, e := range inst.ENIs {
		if !slices.Contains(subnets, e.Subnet) {
			subnets = append(subnets, e.Subnet)
		}
	}
	if !slices.Equal(cfg.VPCCIDRs, subnets) || len(subnets) == 0 {
		t.Errorf("VPC CIDRs %v, want the ENIs' subnets %v", cfg.VPCCIDRs, subnets)
	}
}

// TestVPCFields: an IPv4 reply names the VPC's CIDRs, then the SNAT
// exclusions when the node SNATs, as the reference's does.
func TestVPCFields(t *testing.T) {
	excl := []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}
	for _, tc := range []struct {
		nat      *HostNAT
		external bool
		want     []string
	}{
		{nil, false, []string{"10.0.0.0/16"}},
		{&HostNAT{Rules: hostnat.Config{ExcludeCIDRs: excl}}, false, []string{"10.0.0.0/16", "192.168.0.0/16"}},
		{&HostNAT{Rules: hostnat.Config{ExternalSNAT: true, ExcludeCIDRs: excl}}, true, []string{"10.0.0.0/16"}},
	} {
		d := newDaemon(t, sockPath(t), "m5.large", Config{HostNAT: tc.nat})
		var r rpc.AddNetworkReply
		d.vpcFields(&r)
		if !slices.Equal(r.VPCv4CIDRs, tc.want) || r.UseExternalSNAT != tc.external {
			t.Errorf("HostNAT %+v: VPCv4CIDRs %v UseExternalSNAT %v, want %v %v", tc.nat, r.VPCv4CIDRs, r.UseExternalSNAT, tc.want, tc.external)
		}
	}
}
