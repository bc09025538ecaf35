package plugin

import (
	"testing"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
)

// TestIpsFromMetadataLegacyTable: an ipamd that does not send the route
// table (0, or the reference's 1 for main) gets the reference's tables
// from the device number: main for the primary ENI, device+1 for the
// others. Table "device" would be the previous ENI's table (or main for
// device 1): the pod's 1536 rule would send its traffic out of the wrong
// ENI, and teardown would look for that rule in the wrong table.
func TestIpsFromMetadataLegacyTable(t *testing.T) {
	cases := []struct {
		device, table int32
		want          int
	}{
		{0, 0, kernel.TableMain},
		{0, 1, kernel.TableMain},
		{1, 0, 2},
		{1, 1, 2},
		{2, 0, 3},
		{3, 1, 4},
		{2, 3, 3},
	}
	for _, c := range cases {
		ips, dev, err := ipsFromMetadata([]*rpc.IPAllocationMetadata{{IPv4Addr: "10.0.2.11", DeviceNumber: c.device, RouteTableId: c.table}}, 0)
		if err != nil || len(ips) != 1 || dev != int(c.device) {
			t.Fatalf("device %d table %d: %v %d %v", c.device, c.table, ips, dev, err)
		}
		if ips[0].Table != c.want {
			t.Errorf("device %d, route table %d: pod table %d, want %d", c.device, c.table, ips[0].Table, c.want)
		}
	}
}
