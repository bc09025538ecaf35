package audit

import (
	"net/netip"
	"testing"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// TestNoForwardingNoProbesFromPods: on a node that does not forward, the
// kernel fails every lookup as if from a pod's veth, whatever the rules;
// those probes say nothing of any one pod and must not each be a
// MISROUTE. What the lookups to the pods and the rules show is still
// judged.
func TestNoForwardingNoProbesFromPods(t *testing.T) {
	w := newWorld(t)
	w.live("web-0", "10.0.1.11", kernel.TableMain)
	w.live("web-6", "10.0.2.12", 2)
	w.must(w.h.RuleAdd(ownership.ToPodRule(netip.MustParseAddr("10.0.1.99"))))
	w.must(w.h.SysctlSet("net/ipv4/conf/all/forwarding", "0"))
	w.expect("LEAKED rule 512: from all to 10.0.1.99 lookup main [fix]")

	// Forwarding back on: the leaked rule's misroute of web-6 is found
	// again (the check that the probes were skipped, not broken).
	w.must(w.h.SysctlSet("net/ipv4/conf/all/forwarding", "1"))
	w.expect(
		"LEAKED rule 512: from all to 10.0.1.99 lookup main [fix]",
		"MISROUTE traffic from 10.0.2.12 to 10.0.1.99",
	)
}
