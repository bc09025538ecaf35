package main

import (
	"flag"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/internal/awsenv"
	"github.com/vpccni/vpccni/ipamd"
)

// The reference's SNAT and connmark variables.
const (
	envExternalSNAT = "AWS_VPC_K8S_CNI_EXTERNALSNAT"
	envRandomize    = "AWS_VPC_K8S_CNI_RANDOMIZESNAT"
	envExcludeSNAT  = "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS"
	envConnmark     = "AWS_VPC_K8S_CNI_CONNMARK"
	envNodePort     = "AWS_VPC_CNI_NODE_PORT_SUPPORT"
)

// natFlags are the host SNAT and connmark settings.
type natFlags struct {
	external, nodePort bool
	randomize          string
	exclude            string // comma-separated CIDRs
	mark               string // a number in Go syntax: 0x80, 128
	command            string // the iptables command; "" finds iptables on PATH
}

// register adds the flags, their defaults from the environment. A
// malformed switch is refused here; the others when checked.
func (n *natFlags) register(fs *flag.FlagSet, getenv func(string) string) error {
	external, err := awsenv.Bool(getenv, envExternalSNAT)
	if err != nil {
		return err
	}
	nodePort, err := awsenv.Bool(getenv, envNodePort)
	if err != nil {
		return err
	}
	fs.BoolVar(&n.external, "external-snat", external, "")
	fs.BoolVar(&n.nodePort, "node-port-support", nodePort, "")
	fs.StringVar(&n.randomize, "randomize-snat", awsenv.Str(getenv, envRandomize), "")
	fs.StringVar(&n.exclude, "exclude-snat-cidrs", awsenv.Str(getenv, envExcludeSNAT), "")
	fs.StringVar(&n.mark, "connmark", awsenv.Str(getenv, envConnmark), "")
	fs.StringVar(&n.command, "iptables", "", "")
	return nil
}

// rules checks the settings and returns them as hostnat's. Where the
// reference logs a bad value and takes its default, this refuses it,
// naming the flag and its variable.
func (n *natFlags) rules(vethPrefix string) (hostnat.Config, error) {
	c := hostnat.Config{ExternalSNAT: n.external, NodePort: n.nodePort, Randomize: n.randomize, VethPrefix: vethPrefix}
	switch n.randomize {
	case hostnat.RandomNone, hostnat.RandomHash, hostnat.RandomPRNG:
	default:
		return c, usageError{fmt.Errorf("--randomize-snat (%s) %q: want %s, %s or %s", envRandomize, n.randomize,
			hostnat.RandomPRNG, hostnat.RandomHash, hostnat.RandomNone)}
	}
	mark, err := strconv.ParseInt(strings.TrimSpace(n.mark), 0, 64)
	if err != nil || mark <= 0 || mark > math.MaxUint32 {
		return c, usageError{fmt.Errorf("--connmark (%s) %q: want a mark from 1 to 0xffffffff (0x80, the default, or decimal)", envConnmark, n.mark)}
	}
	c.Mark = uint32(mark)
	for _, s := range strings.Split(n.exclude, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return c, usageError{fmt.Errorf("--exclude-snat-cidrs (%s): %q is not an IPv4 CIDR", envExcludeSNAT, s)}
		}
		c.ExcludeCIDRs = append(c.ExcludeCIDRs, p.Masked())
	}
	return c, nil
}

// hostNAT is the daemon's host NAT on the real iptables (IPv4), found on
// PATH as the reference's image has it.
func (n *natFlags) hostNAT(vethPrefix string) (*ipamd.HostNAT, error) {
	rules, err := n.rules(vethPrefix)
	if err != nil {
		return nil, err
	}
	// go-iptables' option type is unexported: the two calls are spelt out.
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4))
	if n.command != "" {
		ipt, err = iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Path(n.command))
	}
	if err != nil {
		return nil, fmt.Errorf("iptables %s, for the host SNAT and connmark rules (%s=true and %s=false need none): %w",
			n.command, envExternalSNAT, envNodePort, err)
	}
	rules.NoRandomFully = !ipt.HasRandomFully()
	return &ipamd.HostNAT{Tables: ipt, Rules: rules}, nil
}
