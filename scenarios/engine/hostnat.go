package engine

import (
	"fmt"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/ipamd"
)

// natSettings are the node's SNAT settings in every scenario: the
// reference DaemonSet's defaults (SNAT on the node, node-port support,
// --random-fully, mark 0x80).
func natSettings() hostnat.Config {
	return hostnat.Config{Randomize: hostnat.RandomPRNG, NodePort: true, Mark: hostnat.DefaultMark, VethPrefix: "eni"}
}

// hostNAT is ipamd's host NAT on the node's in-memory iptables, which
// outlive ipamd as the kernel's do. None in IPv6 mode: nothing to
// translate.
func (r *run) hostNAT() *ipamd.HostNAT {
	if r.mode == "ipv6" {
		return nil
	}
	return &ipamd.HostNAT{Tables: r.nat, Rules: natSettings()}
}

// natPlan is what the node's iptables must hold once an ipamd has
// started: the plan for the settings over the instance as the harness
// built it (primary ENI on eth0, the VPC's CIDRs), worked out here, not
// asked of ipamd.
func natPlan(inst cloud.Instance) hostnat.Plan {
	c := natSettings()
	c.PrimaryLink = eniLink(0)
	for _, e := range inst.ENIs {
		if e.DeviceNumber == 0 {
			c.PrimaryIP = e.PrimaryIP
		}
	}
	c.VPCCIDRs = inst.VPCCIDRs
	return hostnat.PlanFor(c)
}

// foreignNAT are another agent's rules in the chains aws-node shares
// (kube-proxy's and a CNI's masquerade, with comments of their own),
// planted before ipamd first starts: every one must survive.
var foreignNAT = []hostnat.Rule{
	{Table: hostnat.NAT, Chain: hostnat.PostRouting, Spec: []string{"-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "MASQUERADE"}},
	{Table: hostnat.Mangle, Chain: hostnat.PreRouting, Spec: []string{"-i", "eni+", "-m", "comment", "--comment", "other agent", "-j", "MARK", "--set-xmark", "0x4000/0x4000"}},
}

// plantForeignNAT writes foreignNAT into the node's tables.
func (r *run) plantForeignNAT() error {
	for _, f := range foreignNAT {
		if err := r.nat.Append(f.Table, f.Chain, f.Spec...); err != nil {
			return fmt.Errorf("plant %s: %w", f, err)
		}
	}
	return nil
}
