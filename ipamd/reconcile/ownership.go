package reconcile

import (
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// Kind is what the reconciler removed. The values are the label values of
// ipamd's reconciler counter (ipamd/metrics).
type Kind string

const (
	KindReleased    Kind = "released"                  // an allocation whose pod is gone
	KindRuleToPod        = Kind(ownership.KindToPod)   // 512: to <pod IP> lookup main
	KindRuleFromPod      = Kind(ownership.KindFromPod) // 1536: from <pod IP> lookup <pod table>
	KindRuleIIF          = Kind(ownership.KindIIF)     // 10: iif <branch pod link> lookup <VLAN table>
)

// Kinds lists every Kind, in the order reports print them.
var Kinds = []Kind{KindReleased, KindRuleToPod, KindRuleFromPod, KindRuleIIF}

// Owned says which of ipamd's pod rules a kernel rule is, and what it is
// keyed by: the pod address for 512 and 1536, the input device for 10.
type Owned struct {
	Kind Kind
	IP   netip.Addr // KindRuleToPod, KindRuleFromPod
	Link string     // KindRuleIIF: the device named by iif
}

// Ownership decides whether ipamd owns a rule. Owns is the one the
// reconciler uses; the type exists so tests can put a deliberately wrong
// one in its place and show the suite notices.
type Ownership func(r kernel.Rule, scope ownership.Scope) (Owned, bool)

// Owns is ownership.Scope.Owns in the reconciler's terms: the exact shape
// of a pod rule, for an address in ipamd's pool and in an ENI subnet of
// the node, and for a 1536 rule in that ENI's table. Whether the rule is
// still needed is the reconciler's question, not this one's.
func Owns(r kernel.Rule, scope ownership.Scope) (Owned, bool) {
	sh, ok := scope.Owns(r)
	if !ok {
		return Owned{}, false
	}
	return Owned{Kind: Kind(sh.Kind), IP: sh.IP, Link: sh.Link}, true
}
