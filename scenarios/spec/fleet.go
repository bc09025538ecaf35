package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
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
	Duration   Duration    `json:"duration"`
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
// drains, or the node's instance is terminated and a new node joins.
type Drains struct {
	PerHour           int      `json:"perHour,omitempty"`
	EvictAwsNodeFirst bool     `json:"evictAwsNodeFirst,omitempty"`
	CancelPercent     int      `json:"cancelPercent,omitempty"`
	Takes             Duration `json:"takes,omitempty"`
	Memory            string   `json:"memory,omitempty"`
}

// FleetFaults are faults beyond the autoscaler's: ipamd crashing and
// restarting on a random node, its checkpoint as Memory says.
type FleetFaults struct {
	IpamdRestartsPerHour int    `json:"ipamdRestartsPerHour,omitempty"`
	Memory               string `json:"memory,omitempty"`
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
	if f.Faults.IpamdRestartsPerHour < 0 {
		return fmt.Errorf("faults.ipamdRestartsPerHour cannot be negative")
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
