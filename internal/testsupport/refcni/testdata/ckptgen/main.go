// Command ckptgen writes an ipamd checkpoint with the reference's own
// datastore code: it is built inside the reference module (refcni's
// BuildCheckpointGen overlays this file there; it is never part of
// vpccni's module). It reads a JSON list of allocations on stdin and
// assigns each, in order, through the reference's DataStore backed by a
// JSONFile at the path given as the only argument, so the file on disk is
// exactly what the reference's ipamd would have written for them.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/aws/amazon-vpc-cni-k8s/pkg/utils/logger"
)

// alloc is one pod's address on one ENI (refcni.Allocation).
type alloc struct {
	ENI          string `json:"eni"`
	DeviceNumber int    `json:"deviceNumber"`
	IP           string `json:"ip"`
	NetworkName  string `json:"networkName"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ckptgen CHECKPOINT < allocations.json")
		os.Exit(2)
	}
	var allocs []alloc
	if err := json.NewDecoder(os.Stdin).Decode(&allocs); err != nil {
		fail("read the allocations: %v", err)
	}
	log := logger.New(&logger.Configuration{LogLevel: "error", LogLocation: "stderr"})
	v6 := len(allocs) > 0 && net.ParseIP(allocs[0].IP).To4() == nil
	ds := datastore.NewDataStore(log, datastore.NewJSONFile(os.Args[1]), v6, 0)
	enis := map[string]bool{}
	for _, a := range allocs {
		ip := net.ParseIP(a.IP)
		if ip == nil {
			fail("%q is not an address", a.IP)
		}
		if !enis[a.ENI] {
			table := 254
			if a.DeviceNumber > 0 {
				table = a.DeviceNumber + 1
			}
			if err := ds.AddENI(a.ENI, a.DeviceNumber, a.DeviceNumber == 0, false, false, table, "subnet-ckptgen"); err != nil {
				fail("AddENI %s: %v", a.ENI, err)
			}
			enis[a.ENI] = true
		}
		// One address per pod, added just before it is assigned, so the
		// datastore can only hand out that one.
		key := datastore.IPAMKey{NetworkName: a.NetworkName, ContainerID: a.ContainerID, IfName: a.IfName}
		meta := datastore.IPAMMetadata{K8SPodNamespace: a.Namespace, K8SPodName: a.Name}
		var got string
		var err error
		if v6 {
			if err = ds.AddIPv6CidrToStore(a.ENI, net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}, false); err != nil {
				fail("AddIPv6CidrToStore %s: %v", a.IP, err)
			}
			got, _, _, err = ds.AssignPodIPv6Address(key, meta)
		} else {
			if err = ds.AddIPv4CidrToStore(a.ENI, net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, false); err != nil {
				fail("AddIPv4CidrToStore %s: %v", a.IP, err)
			}
			got, _, _, err = ds.AssignPodIPv4Address(key, meta)
		}
		if err != nil {
			fail("assign %s to %s: %v", a.IP, a.ContainerID, err)
		}
		if !net.ParseIP(got).Equal(ip) {
			fail("the datastore assigned %s, not %s", got, a.IP)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ckptgen: "+format+"\n", args...)
	os.Exit(1)
}
