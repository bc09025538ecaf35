package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodFleet = `
name: f
seed: 1
duration: 1h
nodeGroups:
  - name: ng
    nodes: 2
    node: {warmPool: {warmIPTarget: 2}}
pods: {perNode: 3}
drains: {perHour: 2}
expect: {default: [clean], ref-v1.11: [misroute, leak]}
`

func TestParseFleet(t *testing.T) {
	f, err := ParseFleet([]byte(goodFleet))
	if err != nil {
		t.Fatal(err)
	}
	g := f.NodeGroups[0].Node
	if g.InstanceType != "m5.large" || g.Start != "fresh" || g.KubeletRetries != 5 || f.Drains.Takes.Duration == 0 || f.Drains.Memory != "kept" {
		t.Fatalf("defaults not applied: %+v %+v", g, f.Drains)
	}
	if p := f.Policies(); p[0] != "default" || len(p) != 2 {
		t.Fatalf("policies %v: want default first", p)
	}
	if f.VPC == nil || len(f.VPC.Blocks) != 1 || f.VPC.Blocks[0].String() != "10.0.0.0/16" {
		t.Fatalf("vpc %+v: want 10.0.0.0/16 alone by default", f.VPC)
	}
}

// vpc.cidrs are parsed in order, the primary first.
func TestParseFleetVPC(t *testing.T) {
	in := strings.Replace(goodFleet, "seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.0/16, 192.168.0.0/24]}", 1)
	f, err := ParseFleet([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range f.VPC.Blocks {
		got = append(got, b.String())
	}
	if strings.Join(got, " ") != "10.0.0.0/16 10.1.0.0/16 192.168.0.0/24" {
		t.Errorf("blocks %v", got)
	}
}

// A VPC whose blocks cannot hold the fleet's pods is refused at once,
// with the arithmetic; another block makes room.
func TestParseFleetVPCTooSmall(t *testing.T) {
	const big = `
name: big
seed: 1
duration: 1h
VPC
nodeGroups:
  - name: ng
    nodes: 1000
    maxPods: 110
    node: {instanceType: m5.4xlarge, warmPool: {warmENITarget: 1}}
  - name: small
    nodes: 100
    node: {warmPool: {warmIPTarget: 2}}
pods: {perNode: 100}
expect: {default: [clean]}
`
	for _, tc := range []struct{ vpc, want string }{
		{"", "1000 nodes × 110 pods + 100 nodes × 27 pods need at least 112700 addresses; the VPC's blocks hold 65531 (10.0.0.0/16); add blocks under vpc.cidrs"},
		{"vpc: {cidrs: [10.0.0.0/16]}", "need at least 112700 addresses; the VPC's blocks hold 65531"},
		{"vpc: {cidrs: [10.0.0.0/16, 10.1.0.0/17]}", "the VPC's blocks hold 98294 (10.0.0.0/16, 10.1.0.0/17)"},
		{"vpc: {cidrs: [10.0.0.0/16, 10.1.0.0/16]}", ""},
	} {
		_, err := ParseFleet([]byte(strings.Replace(big, "VPC", tc.vpc, 1)))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: got %v, want %q", tc.vpc, err, tc.want)
		}
	}
}

// Every malformed fleet is refused with a message naming what is wrong.
func TestParseFleetRefuses(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"name: f", "name: ''", "name is missing"},
		{"duration: 1h", "duration: 0s", "duration is missing"},
		{"duration: 1h", "duration: 25h", "not between 0 and 24h"},
		{"nodes: 2", "nodes: 0", "nodes 0 is not between"},
		{"nodes: 2", "nodes: 1", "drains need at least two nodes"},
		{"- name: ng", "- name: NG", "want a unique lower-case name"},
		{"node: {warmPool: {warmIPTarget: 2}}", "node: {}", "warmPool is required"},
		{"node: {warmPool: {warmIPTarget: 2}}", "node: {start: full, warmPool: {warmIPTarget: 2}}", "start fresh"},
		{"perHour: 2}", "perHour: 2, cancelPercent: 101}", "cancelPercent 101"},
		{"perHour: 2}", "perHour: 2, memory: gone}", `drains.memory "gone"`},
		{"perHour: 2}", "perHour: 2, takes: 2h}", "not shorter than the duration"},
		{"perHour: 2}", "perHour: 2, replace: maybe}", "replace"},
		{"seed: 1", "seed: 1\nfaults: {eniAttachCrashesPerHour: -1}", "faults.eniAttachCrashesPerHour cannot be negative"},
		{"[clean]", "[clean, leak]", "want [clean] or kinds"},
		{"[misroute, leak]", "[sideways]", `"sideways"`},
		{"pods: {perNode: 3}", "pods: {perNode: 3, bogus: 1}", "unknown field"},
		{"pods: {perNode: 3}", "pods: {perNode: 3, rampUp: 1h}", "pods.rampUp 1h0m0s is not between 0 and the duration"},
		{"pods: {perNode: 3}", "pods: {perNode: 3, rampUp: -1m}", `duration "-1m" is not between`},
		{"expect: {default: [clean], ref-v1.11: [misroute, leak]}", "expect: {}", "expect is empty"},
		{"seed: 1", "seed: 1\ntimeline: [{settle: {}}]", "single-node scenario"},
		{"seed: 1", "seed: 1\nvpc: {}", "vpc.cidrs is empty"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.0]}", `vpc.cidrs[1]: "10.1.0.0" is not a CIDR block`},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [ten]}", `vpc.cidrs[0]: "ten" is not a CIDR block`},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.1/16]}", "vpc.cidrs[1]: 10.1.0.1/16 is not masked (its block is 10.1.0.0/16)"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: ['2600::/56']}", "vpc.cidrs[0]: 2600::/56 is not IPv4"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/8]}", "vpc.cidrs[0]: 10.0.0.0/8 is a /8: EC2 VPC blocks are /16 to /28"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.0/29]}", "vpc.cidrs[1]: 10.1.0.0/29 is a /29"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.0/16, 10.0.4.0/24]}", "vpc.cidrs[2] (10.0.4.0/24) overlaps vpc.cidrs[0] (10.0.0.0/16)"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/16, 10.1.0.0/16, 10.2.0.0/16, 10.3.0.0/16, 10.4.0.0/16, 10.5.0.0/16]}", "vpc.cidrs has 6 blocks: EC2's default quota is 5 IPv4 blocks per VPC"},
		{"seed: 1", "seed: 1\nvpc: {cidrs: [10.0.0.0/28]}", "2 nodes × 27 pods need at least 54 addresses; the VPC's blocks hold 11 (10.0.0.0/28)"},
		{"seed: 1", "seed: 1\nvpc: {cidr: 10.0.0.0/16}", "unknown field"},
	} {
		in := strings.Replace(goodFleet, c.from, c.to, 1)
		if in == goodFleet {
			t.Fatalf("case %q does not change the fleet", c.from)
		}
		_, err := ParseFleet([]byte(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: got %v, want an error with %q", c.from, c.to, err, c.want)
		}
	}
}

// LoadFleet names the file in its errors and keeps the content's hash,
// by which the shards of a sharded run tell they read the same file.
func TestLoadFleet(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte(goodFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(goodFleet+"description: another\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := LoadFleet(a)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(goodFleet))
	if fa.File != a || fa.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("File %q SHA256 %q, want %q and the content's", fa.File, fa.SHA256, a)
	}
	if fb, err := LoadFleet(b); err != nil || fb.SHA256 == fa.SHA256 {
		t.Fatalf("another content, the same hash: %v", err)
	}
	if _, err := LoadFleet(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
	if err := os.WriteFile(b, []byte(goodFleet+"podz: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFleet(b); err == nil || !strings.Contains(err.Error(), "b.yaml: not a fleet") {
		t.Errorf("an unknown key: %v", err)
	}
}

// Every fleet of the library loads: the scale probe, which make test does
// not run, cannot rot unnoticed.
func TestFleetLibraryLoads(t *testing.T) {
	files, err := filepath.Glob("../fleets/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("fleets: %v %v", files, err)
	}
	for _, f := range files {
		if _, err := LoadFleet(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
