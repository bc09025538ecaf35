package ipamd

import (
	"fmt"
	"net/netip"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/ipamd/rpc"
)

// HostNAT configures the node's SNAT and connmark rules (package
// hostnat). Tables is where they go: go-iptables on a node, the kernel
// model's in-memory tables in the scenario harness.
type HostNAT struct {
	Tables hostnat.Tables
	// Rules holds the settings; ipamd fills in the VPC CIDRs and the
	// primary ENI's link and address from the instance.
	Rules hostnat.Config
}

// syncHostNAT makes the node's SNAT and connmark rules what the settings
// and the instance say, and rule 1024 with them. It runs at each start and
// with each reconcile pass, so a rule deleted by hand (or a VPC CIDR
// added) is put right within a pass. IPv4 only: in IPv6 mode there is
// nothing to translate, as in the reference.
func (d *Daemon) syncHostNAT() (err error) {
	if d.hostNATIdle() {
		return nil
	}
	nat := d.cfg.HostNAT
	d.hostNATStarted()
	defer func() { d.hostNATDone(err) }()
	cfg, err := d.hostNATConfig(nat.Rules)
	if err != nil {
		return err
	}
	changes, err := hostnat.Reconcile(nat.Tables, hostnat.PlanFor(cfg))
	if err == nil {
		var more []hostnat.Change
		more, err = hostnat.ReconcileMarkRule(d.cfg.Kernel, cfg.Mark, hostnat.PlanFor(cfg).MarkRule)
		changes = append(changes, more...)
	}
	for _, c := range changes {
		d.log.Info("host NAT rule changed", "change", c.Op, "rule", c.What)
	}
	if err != nil {
		return fmt.Errorf("ipamd: host SNAT and connmark rules: %w", err)
	}
	return nil
}

// hostNATConfig completes the settings with the primary ENI's link and
// address and the VPC's CIDRs (the subnets of the attached ENIs when the
// cloud does not say).
func (d *Daemon) hostNATConfig(cfg hostnat.Config) (hostnat.Config, error) {
	var primary *int
	for i, e := range d.inst.ENIs {
		if e.DeviceNumber == 0 {
			primary = &i
		}
	}
	if primary == nil {
		return cfg, fmt.Errorf("ipamd: host SNAT: instance %s has no primary ENI", d.inst.ID)
	}
	eni := d.inst.ENIs[*primary]
	link, err := d.eni.Link(eni)
	if err != nil {
		return cfg, fmt.Errorf("ipamd: host SNAT: %w", err)
	}
	cfg.PrimaryLink, cfg.PrimaryIP = link.Name, eni.PrimaryIP
	cfg.VPCCIDRs = d.inst.VPCCIDRs
	if len(cfg.VPCCIDRs) == 0 {
		seen := map[netip.Prefix]bool{}
		for _, e := range d.inst.ENIs {
			if e.Subnet.IsValid() && !seen[e.Subnet] {
				seen[e.Subnet] = true
				cfg.VPCCIDRs = append(cfg.VPCCIDRs, e.Subnet)
			}
		}
	}
	return cfg, cfg.Check()
}

// vpcFields fills an IPv4 reply's UseExternalSNAT and VPCv4CIDRs as the
// reference's ipamd does (the VPC's CIDRs, then the SNAT exclusions when
// the node SNATs). vpc-cni does not read them; a plugin of the
// reference's era may.
func (d *Daemon) vpcFields(r *rpc.AddNetworkReply) {
	if d.cfg.IPv6 {
		return
	}
	for _, p := range d.inst.VPCCIDRs {
		r.VPCv4CIDRs = append(r.VPCv4CIDRs, p.String())
	}
	if nat := d.cfg.HostNAT; nat != nil {
		r.UseExternalSNAT = nat.Rules.ExternalSNAT
		if !r.UseExternalSNAT {
			for _, p := range nat.Rules.ExcludeCIDRs {
				r.VPCv4CIDRs = append(r.VPCv4CIDRs, p.String())
			}
		}
	}
}
