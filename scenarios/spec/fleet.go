package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/cloud/memory"
)

// Fleet is a fleet scenario: node groups launched into one VPC, pods
// created and deleted at a rate, the cluster autoscaler draining nodes
// (evicting aws-node first, as when it is misconfigured) and cancelling
// or terminating, ipamd restarting now and then, all on one simulated
// clock and deterministic from Seed. A fleet file says "fleet:" where a
// scenario says "timeline:"; the two never mix.
type Fleet struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Seed makes every choice of the run (which node drains, which pod
	// goes); the same seed gives the same run.
	Seed int64 `json:"seed"`
	// Duration is the simulated time the fleet runs (up to 24h).
	Duration Duration `json:"duration"`
	// VPC is the VPC the nodes launch into; absent means one block,
	// 10.0.0.0/16 (validate fills it in).
	VPC        *FleetVPC   `json:"vpc,omitempty"`
	NodeGroups []NodeGroup `json:"nodeGroups"`
	Pods       PodChurn    `json:"pods"`
	Drains     Drains      `json:"drains,omitempty"`
	Faults     FleetFaults `json:"faults,omitempty"`
	// Expect maps a delete policy to what the fleet must show under it:
	// [clean], or the finding kinds it must include (misroute, leak,
	// stranded, …). The fleet runs under exactly these policies.
	Expect map[string][]string `json:"expect"`

	File string `json:"-"`
	// SHA256 is the hex SHA-256 of the file's content (LoadFleet's): the
	// shards of one sharded run (replay fleet --shard) must have read the
	// same file, wherever it lay on each machine.
	SHA256 string `json:"-"`
}

// FleetVPC is the fleet's VPC: its IPv4 CIDR blocks, the primary first.
// One /16 holds 65,531 addresses; a fleet needing more lists secondary
// blocks, as a VPC on EC2 associates them (up to 5 blocks in all).
type FleetVPC struct {
	CIDRs []string `json:"cidrs"`
	// Blocks are CIDRs parsed, in order (validate fills them in).
	Blocks []netip.Prefix `json:"-"`
}

// VPCBlocks are the fleet's VPC blocks, the primary first: 10.0.0.0/16
// alone for a fleet that was not validated or names none.
func (f *Fleet) VPCBlocks() []netip.Prefix {
	if f.VPC == nil || len(f.VPC.Blocks) == 0 {
		return []netip.Prefix{memory.VPCCIDR}
	}
	return f.VPC.Blocks
}

// maxVPCBlocks is EC2's default quota of IPv4 blocks per VPC, the
// primary included.
const maxVPCBlocks = memory.MaxSecondaryCIDRs + 1

// NodeGroup is a set of like nodes (an auto scaling group).
type NodeGroup struct {
	Name string `json:"name"`
	// Nodes is how many nodes the group starts with; a terminated node is
	// replaced (the group scales up again for the pods it must place).
	Nodes int `json:"nodes"`
	// Node is the nodes' instance type, warm pool and kubelet settings.
	// They start fresh (the primary ENI alone): warmPool is required.
	Node Node `json:"node"`
	// MaxPods caps the pods the scheduler places on one node (kubelet's
	// max-pods); default: as many as the instance type has addresses.
	MaxPods int `json:"maxPods,omitempty"`
}

// PodChurn is the pods' life: PerNode pods per node at the start, then
// pods created and deleted at a rate across the fleet.
type PodChurn struct {
	PerNode       int `json:"perNode"`
	CreatePerHour int `json:"createPerHour,omitempty"`
	DeletePerHour int `json:"deletePerHour,omitempty"`
	// RampUp spreads the first PerNode pods of every node evenly over its
	// first RampUp, as workloads scaling up do; zero places them all at
	// the start, on nodes whose warm pools are still empty (each pod's ADD
	// then fails and is retried until ipamd has grown the pool).
	RampUp Duration `json:"rampUp,omitempty"`
}

// Drains are the cluster autoscaler's scale-downs: PerHour drains across
// the fleet. A drain evicts aws-node first when EvictAwsNodeFirst (the
// misconfiguration of the incident), then every pod of the node (each is
// rescheduled on another node); after Takes it is cancelled (aws-node
// starts again, its checkpoint as Memory says) for CancelPercent of the
// drains, or the node's instance is terminated and a new node joins
// (unless Replace is false: the group shrinks, as a scale-down that is
// not followed by a scale-up leaves it).
type Drains struct {
	PerHour           int      `json:"perHour,omitempty"`
	EvictAwsNodeFirst bool     `json:"evictAwsNodeFirst,omitempty"`
	CancelPercent     int      `json:"cancelPercent,omitempty"`
	Takes             Duration `json:"takes,omitempty"`
	Memory            string   `json:"memory,omitempty"`
	Replace           *bool    `json:"replace,omitempty"`
}

// Replaces reports whether a terminated node is replaced (the default).
func (d Drains) Replaces() bool { return d.Replace == nil || *d.Replace }

// FleetFaults are faults beyond the autoscaler's: ipamd crashing and
// restarting on a random node, its checkpoint as Memory says; and ipamd
// dying in the middle of attaching an ENI on a random node, the next
// time it attaches one there: between creating and attaching it (the
// ENI is left available), or between attaching it and marking it
// DeleteOnTermination (it outlives the instance), one or the other at
// random.
type FleetFaults struct {
	IpamdRestartsPerHour    int    `json:"ipamdRestartsPerHour,omitempty"`
	Memory                  string `json:"memory,omitempty"`
	ENIAttachCrashesPerHour int    `json:"eniAttachCrashesPerHour,omitempty"`
}

// FleetVerdicts are what a fleet's expect may list: clean, or finding
// kinds (the single node's, and stranded: an ENI or address left in EC2
// after its node is gone).
var FleetVerdicts = append(append([]string{}, KnownVerdicts...), "stranded")

var groupName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// LoadFleet reads and validates a fleet file.
func LoadFleet(path string) (*Fleet, error) { return loadFile(path, ParseFleet) }

func (f *Fleet) setSource(path string, content []byte) {
	f.File = path
	sum := sha256.Sum256(content)
	f.SHA256 = hex.EncodeToString(sum[:])
}

// ParseFleet decodes a fleet file strictly and validates it.
func ParseFleet(b []byte) (*Fleet, error) {
	var top map[string]any
	if err := yaml.Unmarshal(b, &top); err == nil && top["timeline"] != nil {
		return nil, fmt.Errorf("a single-node scenario (it has a timeline), not a fleet: run it with replay run")
	}
	return decodeStrict[Fleet](b, "fleet")
}

func (f *Fleet) validate() error {
	if f.Name == "" {
		return fmt.Errorf("name is missing")
	}
	if f.Duration.Duration <= 0 {
		return fmt.Errorf("duration is missing (e.g. 1h)")
	}
	if len(f.NodeGroups) == 0 {
		return fmt.Errorf("nodeGroups is empty")
	}
	seen := map[string]bool{}
	total := 0
	for i := range f.NodeGroups {
		g := &f.NodeGroups[i]
		if !groupName.MatchString(g.Name) || seen[g.Name] {
			return fmt.Errorf("nodeGroups[%d]: name %q: want a unique lower-case name (letters, digits, -)", i, g.Name)
		}
		seen[g.Name] = true
		if g.Nodes < 1 || g.Nodes > 5000 {
			return fmt.Errorf("nodeGroups[%d] (%s): nodes %d is not between 1 and 5000", i, g.Name, g.Nodes)
		}
		total += g.Nodes
		if err := g.validateNode(); err != nil {
			return fmt.Errorf("nodeGroups[%d] (%s): %w", i, g.Name, err)
		}
		if g.MaxPods < 0 || g.MaxPods > 250 {
			return fmt.Errorf("nodeGroups[%d] (%s): maxPods %d is not between 1 and 250", i, g.Name, g.MaxPods)
		}
	}
	if f.Pods.PerNode < 0 || f.Pods.CreatePerHour < 0 || f.Pods.DeletePerHour < 0 {
		return fmt.Errorf("pods: counts and rates cannot be negative")
	}
	if f.Pods.RampUp.Duration < 0 || f.Pods.RampUp.Duration >= f.Duration.Duration {
		return fmt.Errorf("pods.rampUp %s is not between 0 and the duration %s", f.Pods.RampUp, f.Duration)
	}
	if err := f.validateDrains(total); err != nil {
		return err
	}
	if err := f.validateVPC(); err != nil {
		return err
	}
	if f.Faults.IpamdRestartsPerHour < 0 {
		return fmt.Errorf("faults.ipamdRestartsPerHour cannot be negative")
	}
	if f.Faults.ENIAttachCrashesPerHour < 0 {
		return fmt.Errorf("faults.eniAttachCrashesPerHour cannot be negative")
	}
	if f.Faults.Memory == "" {
		f.Faults.Memory = "kept"
	}
	if !contains(KnownMemory, f.Faults.Memory) {
		return fmt.Errorf("faults.memory %q is not one of %s", f.Faults.Memory, strings.Join(KnownMemory, ", "))
	}
	if len(f.Expect) == 0 {
		return fmt.Errorf("expect is empty: say what each policy should give ([clean], or the kinds it must show)")
	}
	for pol, kinds := range f.Expect {
		if len(kinds) == 0 {
			return fmt.Errorf("expect[%s] is empty", pol)
		}
		for _, k := range kinds {
			if !contains(FleetVerdicts, k) || k == "clean" && len(kinds) > 1 {
				return fmt.Errorf("expect[%s]: %q: want [clean] or kinds from %s", pol, k, strings.Join(FleetVerdicts[1:], ", "))
			}
		}
	}
	return nil
}

func (g *NodeGroup) validateNode() error {
	n := &g.Node
	if n.InstanceType == "" {
		n.InstanceType = "m5.large"
	}
	if n.KubeletRetries == 0 {
		n.KubeletRetries = 5
	}
	if n.KubeletRetries < 0 || n.KubeletRetries > 20 {
		return fmt.Errorf("node.kubeletRetries %d is not between 0 and 20", n.KubeletRetries)
	}
	if n.Start != "" && n.Start != "fresh" {
		return fmt.Errorf("node.start %q: a fleet's nodes start fresh (the warm pool grows them)", n.Start)
	}
	n.Start = "fresh"
	if n.WarmPool == nil {
		return fmt.Errorf("node.warmPool is required: a fresh node gets addresses only from its warm pool")
	}
	if len(n.ForeignRules) > 0 {
		return fmt.Errorf("node.foreignRules: not supported in a fleet")
	}
	return n.validateAdversary()
}

// PodCap is how many pods the scheduler places on one of the group's
// nodes: MaxPods, or as many as the instance type has secondary
// addresses (0 for a type the model does not know: its launch fails).
func (g *NodeGroup) PodCap() int {
	if g.MaxPods > 0 {
		return g.MaxPods
	}
	lim, _ := cloud.LimitsOf(g.Node.InstanceType)
	return lim.ENIs * (lim.IPv4PerENI - 1)
}

// validateVPC parses vpc.cidrs as EC2 would accept them, and refuses a
// fleet whose pods alone cannot fit in the blocks: a clear message now
// rather than a full subnet hours into the run.
func (f *Fleet) validateVPC() error {
	if f.VPC == nil {
		f.VPC = &FleetVPC{CIDRs: []string{memory.VPCCIDR.String()}}
	}
	v := f.VPC
	if len(v.CIDRs) == 0 {
		return fmt.Errorf("vpc.cidrs is empty: list the VPC's blocks, the primary first (or leave vpc out for %s)", memory.VPCCIDR)
	}
	if len(v.CIDRs) > maxVPCBlocks {
		return fmt.Errorf("vpc.cidrs has %d blocks: EC2's default quota is %d IPv4 blocks per VPC (the primary and %d secondary)", len(v.CIDRs), maxVPCBlocks, maxVPCBlocks-1)
	}
	v.Blocks = nil
	hold := 0
	for i, s := range v.CIDRs {
		b, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return fmt.Errorf("vpc.cidrs[%d]: %q is not a CIDR block (e.g. 10.1.0.0/16)", i, s)
		case !b.Addr().Is4():
			return fmt.Errorf("vpc.cidrs[%d]: %s is not IPv4: a VPC's blocks are IPv4", i, s)
		case b != b.Masked():
			return fmt.Errorf("vpc.cidrs[%d]: %s is not masked (its block is %s)", i, s, b.Masked())
		case b.Bits() < 16 || b.Bits() > 28:
			return fmt.Errorf("vpc.cidrs[%d]: %s is a /%d: EC2 VPC blocks are /16 to /28", i, s, b.Bits())
		}
		for j, o := range v.Blocks {
			if o.Overlaps(b) {
				return fmt.Errorf("vpc.cidrs[%d] (%s) overlaps vpc.cidrs[%d] (%s): a VPC's blocks are disjoint", i, s, j, o)
			}
		}
		v.Blocks = append(v.Blocks, b)
		hold += 1<<(32-b.Bits()) - 5 // EC2 keeps five addresses of each subnet
	}
	need := 0
	var terms []string
	for i := range f.NodeGroups {
		g := &f.NodeGroups[i]
		need += g.Nodes * g.PodCap()
		terms = append(terms, fmt.Sprintf("%d nodes × %d pods", g.Nodes, g.PodCap()))
	}
	if need > hold {
		return fmt.Errorf("%s need at least %d addresses; the VPC's blocks hold %d (%s); add blocks under vpc.cidrs",
			strings.Join(terms, " + "), need, hold, strings.Join(v.CIDRs, ", "))
	}
	return nil
}

func (f *Fleet) validateDrains(nodes int) error {
	d := &f.Drains
	if d.PerHour < 0 {
		return fmt.Errorf("drains.perHour cannot be negative")
	}
	if d.PerHour > 0 && nodes < 2 {
		return fmt.Errorf("drains need at least two nodes: a drained node's pods move to another")
	}
	if d.CancelPercent < 0 || d.CancelPercent > 100 {
		return fmt.Errorf("drains.cancelPercent %d is not between 0 and 100", d.CancelPercent)
	}
	if d.Takes.Duration == 0 {
		d.Takes.Duration = 2 * time.Minute
	}
	if d.Takes.Duration >= f.Duration.Duration {
		return fmt.Errorf("drains.takes %s is not shorter than the duration %s", d.Takes, f.Duration)
	}
	if d.Memory == "" {
		d.Memory = "kept"
	}
	if !contains(KnownMemory, d.Memory) {
		return fmt.Errorf("drains.memory %q is not one of %s", d.Memory, strings.Join(KnownMemory, ", "))
	}
	return nil
}

// Policies lists the policies the fleet expects something of, sorted
// with vpccni's (default) first.
func (f *Fleet) Policies() []string {
	var out []string
	for p := range f.Expect {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i] == "default") != (out[j] == "default") {
			return out[i] == "default"
		}
		return out[i] < out[j]
	})
	return out
}
