package ipamd

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestENIsInReferenceShape: /v1/enis has the reference's shape, field for
// field: keyed by network card, then ENI ID; each address range keyed by
// its CIDR, its mask base64-encoded as Go encodes the reference's
// net.IPNet; a pod's address with its pod and no container, a released
// one with its release time.
func TestENIsInReferenceShape(t *testing.T) {
	sock := sockPath(t)
	d := start(t, sock, Config{Cooldown: time.Minute})
	c := client(t, sock)
	held, err := c.AddNetwork(ctx(t), addReq("held"))
	if err != nil || !held.Success {
		t.Fatalf("add: %v %v", held, err)
	}
	if r, err := c.AddNetwork(ctx(t), addReq("gone")); err != nil || !r.Success {
		t.Fatalf("add: %v %v", r, err)
	}
	gone, err := c.DelNetwork(ctx(t), delReq("gone"))
	if err != nil || !gone.Success {
		t.Fatalf("del: %v %v", gone, err)
	}
	b, err := json.Marshal(d.Introspection().ENIs())
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	card, ok := body["0"]
	if len(body) != 1 || !ok || !sameKeys(card, "TotalIPs", "AssignedIPs", "ENIs") {
		t.Fatalf("cards: %s", b)
	}
	if string(card["TotalIPs"]) != "27" || string(card["AssignedIPs"]) != "1" {
		t.Errorf("counts %s and %s, want 27 addresses (3 ENIs of 9), 1 assigned", card["TotalIPs"], card["AssignedIPs"])
	}
	var enis map[string]map[string]json.RawMessage
	if err := json.Unmarshal(card["ENIs"], &enis); err != nil || len(enis) != 3 {
		t.Fatalf("ENIs: %v %s", err, card["ENIs"])
	}
	heldIP, goneIP := held.IPAllocationMetadata[0].IPv4Addr, gone.IPAllocationMetadata[0].IPv4Addr
	var sawHeld, sawGone bool
	for id, e := range enis {
		if !sameKeys(e, "ID", "IsPrimary", "IsTrunk", "IsEFA", "DeviceNumber", "AvailableIPv4Cidrs", "IPv6Cidrs",
			"IsExcludedForPodIPs", "RouteTableID", "SubnetID") {
			t.Fatalf("ENI %s fields: %v", id, keys(e))
		}
		var cidrs map[string]struct {
			Cidr          struct{ IP, Mask string }
			IPAddresses   map[string]map[string]json.RawMessage
			IsPrefix      bool
			AddressFamily string
		}
		if err := json.Unmarshal(e["AvailableIPv4Cidrs"], &cidrs); err != nil || len(cidrs) != 9 {
			t.Fatalf("ENI %s ranges: %v %s", id, err, e["AvailableIPv4Cidrs"])
		}
		for key, cidr := range cidrs {
			if key != cidr.Cidr.IP+"/32" || cidr.Cidr.Mask != "/////w==" || cidr.IsPrefix {
				t.Errorf("range %s: %+v", key, cidr)
			}
			for ip, a := range cidr.IPAddresses {
				if !sameKeys(a, "Address", "IPAMKey", "IPAMMetadata", "AssignedTime", "UnassignedTime") {
					t.Errorf("address %s fields: %v", ip, keys(a))
				}
				switch ip {
				case heldIP:
					sawHeld = true
					if string(a["IPAMKey"]) != `{"networkName":"aws-cni","containerID":"","ifName":""}` ||
						string(a["IPAMMetadata"]) != `{"k8sPodNamespace":"default","k8sPodName":"pod-held"}` ||
						string(a["UnassignedTime"]) != `"0001-01-01T00:00:00Z"` {
						t.Errorf("held address: %s %s %s", a["IPAMKey"], a["IPAMMetadata"], a["UnassignedTime"])
					}
				case goneIP:
					sawGone = true
					if string(a["AssignedTime"]) != `"0001-01-01T00:00:00Z"` || string(a["UnassignedTime"]) == `"0001-01-01T00:00:00Z"` {
						t.Errorf("released address: %s %s", a["AssignedTime"], a["UnassignedTime"])
					}
				default:
					t.Errorf("address %s listed: only held and cooling ones are", ip)
				}
			}
		}
	}
	if !sawHeld || !sawGone {
		t.Errorf("held %s listed %v, released %s listed %v: %s", heldIP, sawHeld, goneIP, sawGone, b)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sameKeys[V any](m map[string]V, want ...string) bool {
	sort.Strings(want)
	return slices.Equal(keys(m), want)
}
