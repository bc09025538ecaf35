// Package hostnat keeps the node's IPv4 SNAT and connmark rules, the
// iptables half of what the reference's aws-node sets up on a node besides
// the ENIs:
//
//   - nat/AWS-SNAT-CHAIN-0, jumped to from POSTROUTING: traffic to the VPC
//     (and to AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS) returns unchanged, the
//     rest leaves SNATed to the primary ENI's address unless it goes out
//     of a branch ENI's VLAN or to a local address. Without it a pod on a
//     secondary ENI could not reach the internet through the primary
//     ENI's public address or a NAT gateway route that only the primary
//     ENI's address may use.
//   - nat/AWS-CONNMARK-CHAIN-0, jumped to from PREROUTING for new
//     connections from pod veths: a connection leaving the VPC is marked
//     (AWS_VPC_K8S_CNI_CONNMARK, 0x80), and the mark is restored on every
//     packet, so that its replies, which arrive on the primary ENI, are
//     routed back by rule 1024 (fwmark lookup main).
//   - mangle/PREROUTING (AWS_VPC_CNI_NODE_PORT_SUPPORT): a connection that
//     came in on the primary ENI to a local address (a NodePort) is
//     marked, and a pod's reply restores the mark, so the reply leaves by
//     the primary ENI too, not by the pod's own ENI whose source check
//     would drop it.
//
// The rules, comments and chain names are the reference's, so a node
// moving from the reference to vpccni (or back) reconciles the rules it
// finds instead of adding a second set. A rule in a built-in chain is
// aws-node's when it carries one of those comments; nothing else there is
// ever deleted. Chains AWS-SNAT-CHAIN-N and AWS-CONNMARK-CHAIN-N are
// aws-node's whole (N > 0 are the reference's older layouts).
//
// In IPv6 mode there is nothing to do: pods have addresses routable from
// the ENI that carries them, as the reference leaves it.
package hostnat

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Tables is what hostnat asks of iptables: the subset of
// github.com/coreos/go-iptables's *IPTables it uses, which satisfies it as
// is. List answers as `iptables -S` does: "-P CHAIN POLICY" for a
// built-in chain or "-N CHAIN" for another, then one "-A CHAIN spec..."
// line per rule, an argument with a space in double quotes.
type Tables interface {
	ListChains(table string) ([]string, error)
	List(table, chain string) ([]string, error)
	ChainExists(table, chain string) (bool, error)
	NewChain(table, chain string) error
	ClearChain(table, chain string) error
	DeleteChain(table, chain string) error
	Append(table, chain string, rulespec ...string) error
	Delete(table, chain string, rulespec ...string) error
}

// Chain and table names, the reference's.
const (
	NAT           = "nat"
	Mangle        = "mangle"
	SNATChain     = "AWS-SNAT-CHAIN-0"
	ConnmarkChain = "AWS-CONNMARK-CHAIN-0"
	PreRouting    = "PREROUTING"
	PostRouting   = "POSTROUTING"
)

// Comments that make a rule in a built-in chain aws-node's.
const (
	commentSNAT      = "AWS SNAT CHAIN"
	commentExclusion = "AWS SNAT CHAIN EXCLUSION"
	commentSNATRule  = "AWS, SNAT"
	commentOutbound  = "AWS, outbound connections"
	commentConnmark  = "AWS, CONNMARK"
	commentCMChain   = "AWS CONNMARK CHAIN"
	commentPrimary   = "AWS, primary ENI"
)

var ownedComments = []string{commentSNAT, commentOutbound, commentConnmark, commentPrimary}

// ownedChain matches the chains aws-node owns whole.
var ownedChain = regexp.MustCompile(`^AWS-(SNAT|CONNMARK)-CHAIN-[0-9]+$`)

// builtins are the built-in chains hostnat puts rules in.
var builtins = [][2]string{{NAT, PreRouting}, {NAT, PostRouting}, {Mangle, PreRouting}}

// Randomize values of AWS_VPC_K8S_CNI_RANDOMIZESNAT.
const (
	RandomNone = "none"       // SNAT picks ports as it likes
	RandomHash = "hashrandom" // --random
	RandomPRNG = "prng"       // --random-fully, the reference's default
)

// DefaultMark is AWS_VPC_K8S_CNI_CONNMARK's default (kube-proxy uses
// 0xc000 and Calico 0xffff0000).
const DefaultMark = 0x80

// Config is what the rules are made of.
type Config struct {
	// ExternalSNAT (AWS_VPC_K8S_CNI_EXTERNALSNAT): something outside the
	// node translates, so no SNAT and no connmark chain.
	ExternalSNAT bool
	// Randomize is RandomNone, RandomHash or RandomPRNG.
	Randomize string
	// NoRandomFully: this iptables cannot --random-fully, so RandomPRNG
	// falls back to --random, as the reference does.
	NoRandomFully bool
	// NodePort (AWS_VPC_CNI_NODE_PORT_SUPPORT): the mangle rules.
	NodePort bool
	// Mark is the connection mark (AWS_VPC_K8S_CNI_CONNMARK).
	Mark uint32
	// VPCCIDRs are not translated; ExcludeCIDRs
	// (AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS) neither.
	VPCCIDRs, ExcludeCIDRs []netip.Prefix
	// VethPrefix is the pods' host veth prefix ("eni").
	VethPrefix string
	// PrimaryLink and PrimaryIP are the primary ENI's link and address.
	PrimaryLink string
	PrimaryIP   netip.Addr
}

// Check refuses a Config the rules cannot be made of.
func (c Config) Check() error {
	switch c.Randomize {
	case RandomNone, RandomHash, RandomPRNG:
	default:
		return fmt.Errorf("SNAT randomization %q: want %s, %s or %s", c.Randomize, RandomNone, RandomHash, RandomPRNG)
	}
	if c.Mark == 0 {
		return fmt.Errorf("connection mark 0: want a non-zero mark")
	}
	if c.VethPrefix == "" || c.PrimaryLink == "" {
		return fmt.Errorf("hostnat: veth prefix %q and primary link %q must both be known", c.VethPrefix, c.PrimaryLink)
	}
	if !c.ExternalSNAT && !c.PrimaryIP.Is4() {
		return fmt.Errorf("hostnat: the primary ENI's IPv4 address is unknown (%v)", c.PrimaryIP)
	}
	for _, p := range slices.Concat(c.VPCCIDRs, c.ExcludeCIDRs) {
		if !p.Addr().Is4() {
			return fmt.Errorf("hostnat: %v is not an IPv4 CIDR", p)
		}
	}
	return nil
}

// Rule is one rule: table, chain and its spec as `iptables -S` prints it.
type Rule struct {
	Table, Chain string
	Spec         []string
}

func (r Rule) String() string {
	return fmt.Sprintf("-t %s -A %s %s", r.Table, r.Chain, quoteSpec(r.Spec))
}

// Plan is the rules a Config wants: the owned chains whole, in order, and
// aws-node's rules in the built-in chains.
type Plan struct {
	Chains   map[[2]string][]Rule // {table, chain} → its rules, in order
	Builtins []Rule
	// MarkRule says whether rule 1024 (fwmark Mark/Mark lookup main) is
	// wanted.
	MarkRule bool
}

// PlanFor is the reference's rule set for c, each spec in the form
// `iptables -S` prints it back, so that a rule once written compares
// equal to what is listed.
func PlanFor(c Config) Plan {
	p := Plan{Chains: map[[2]string][]Rule{}, MarkRule: c.NodePort || !c.ExternalSNAT}
	mark := fmt.Sprintf("%#x", c.Mark)
	restore := []string{"-j", "CONNMARK", "--restore-mark", "--nfmask", mark, "--ctmask", mark}
	if !c.ExternalSNAT {
		snat := Rule{NAT, SNATChain, nil}
		var chain []Rule
		for _, cidr := range c.VPCCIDRs {
			chain = append(chain, Rule{NAT, SNATChain, []string{"-d", cidr.String(), "-m", "comment", "--comment", commentSNAT, "-j", "RETURN"}})
		}
		for _, cidr := range c.ExcludeCIDRs {
			chain = append(chain, Rule{NAT, SNATChain, returnSpec(cidr, commentExclusion)})
		}
		snat.Spec = []string{"!", "-o", "vlan+", "-m", "comment", "--comment", commentSNATRule,
			"-m", "addrtype", "!", "--dst-type", "LOCAL", "-j", "SNAT", "--to-source", c.PrimaryIP.String()}
		switch {
		case c.Randomize == RandomPRNG && !c.NoRandomFully:
			snat.Spec = append(snat.Spec, "--random-fully")
		case c.Randomize != RandomNone:
			snat.Spec = append(snat.Spec, "--random")
		}
		p.Chains[[2]string{NAT, SNATChain}] = append(chain, snat)

		var cm []Rule
		for _, cidr := range slices.Concat(c.VPCCIDRs, c.ExcludeCIDRs) {
			cm = append(cm, Rule{NAT, ConnmarkChain, returnSpec(cidr, commentCMChain)})
		}
		cm = append(cm, Rule{NAT, ConnmarkChain, []string{"-m", "comment", "--comment", commentConnmark,
			"-j", "CONNMARK", "--set-xmark", mark + "/" + mark}})
		p.Chains[[2]string{NAT, ConnmarkChain}] = cm

		p.Builtins = append(p.Builtins,
			Rule{NAT, PostRouting, []string{"-m", "comment", "--comment", commentSNAT, "-j", SNATChain}},
			Rule{NAT, PreRouting, []string{"-i", c.VethPrefix + "+", "-m", "comment", "--comment", commentOutbound,
				"-m", "state", "--state", "NEW", "-j", ConnmarkChain}},
			Rule{NAT, PreRouting, append([]string{"-m", "comment", "--comment", commentConnmark}, restore...)})
	}
	if c.NodePort {
		p.Builtins = append(p.Builtins, Rule{Mangle, PreRouting, []string{"-i", c.PrimaryLink, "-m", "comment", "--comment", commentPrimary,
			"-m", "addrtype", "--dst-type", "LOCAL", "--limit-iface-in", "-j", "CONNMARK", "--set-xmark", mark + "/" + mark}})
	}
	if c.NodePort || !c.ExternalSNAT {
		p.Builtins = append(p.Builtins, Rule{Mangle, PreRouting, append([]string{"-i", c.VethPrefix + "+", "-m", "comment", "--comment", commentPrimary}, restore...)})
	}
	if c.NodePort {
		p.Builtins = append(p.Builtins, Rule{Mangle, PreRouting, append([]string{"-i", "vlan+", "-m", "comment", "--comment", commentPrimary}, restore...)})
	}
	return p
}

// returnSpec returns from the chain for traffic to cidr; 0.0.0.0/0 is
// written without -d, as iptables prints it back.
func returnSpec(cidr netip.Prefix, comment string) []string {
	if cidr.Bits() == 0 {
		return []string{"-m", "comment", "--comment", comment, "-j", "RETURN"}
	}
	return []string{"-d", cidr.String(), "-m", "comment", "--comment", comment, "-j", "RETURN"}
}

// Owned reports whether a rule of a built-in chain is aws-node's: it
// carries one of aws-node's comments.
func Owned(spec []string) bool {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == "--comment" && slices.Contains(ownedComments, spec[i+1]) {
			return true
		}
	}
	return false
}

// OwnedChain reports whether a chain is aws-node's whole.
func OwnedChain(name string) bool { return ownedChain.MatchString(name) }

// quoteSpec joins a spec as iptables -S prints it.
func quoteSpec(spec []string) string {
	out := make([]string, len(spec))
	for i, a := range spec {
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = `"` + strings.ReplaceAll(a, `"`, `\"`) + `"`
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
