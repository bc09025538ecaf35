package spec

import (
	"fmt"
	"net/netip"
	"time"
)

// ForeignRule is a rule of another agent, at any priority, in the form
// `ip rule` would take it: from and to are prefixes ("" for all), table a
// number. It is on the node before the first event.
type ForeignRule struct {
	Priority int    `json:"priority"`
	From     string `json:"from,omitempty"`
	To       string `json:"to,omitempty"`
	Table    int    `json:"table"`
}

// Selectors parses From and To (the zero prefix for an empty one).
func (r ForeignRule) Selectors() (from, to netip.Prefix, err error) {
	parse := func(s string) (netip.Prefix, error) {
		if s == "" {
			return netip.Prefix{}, nil
		}
		return netip.ParsePrefix(s)
	}
	if from, err = parse(r.From); err != nil {
		return from, to, fmt.Errorf("from %q: %w", r.From, err)
	}
	if to, err = parse(r.To); err != nil {
		return from, to, fmt.Errorf("to %q: %w", r.To, err)
	}
	return from, to, nil
}

// IpamdSettings are ipamd's timing settings for the run. A value is a
// duration ("45s") or "minimum", the shortest ipamd accepts; ipamd refuses
// one out of its range, and the run with it.
type IpamdSettings struct {
	ReconcileGrace    string `json:"reconcileGrace,omitempty"`
	ReconcileInterval string `json:"reconcileInterval,omitempty"`
	// Reconcile false turns vpccni's reconciler off (ipamd --reconcile=false),
	// so what the plugin's DEL leaves stays to be seen: the reconciler is a
	// safety net, not the mechanism. The reference's daemon has none.
	Reconcile *bool `json:"reconcile,omitempty"`
}

// Minimum is the IpamdSettings value that names ipamd's own lower bound.
const Minimum = "minimum"

// Forgery is what a forged prevResult says instead of the truth: the route
// table in the container interface's mac (0 keeps it) and the addresses
// (none keeps them), each a host prefix.
type Forgery struct {
	Table int      `json:"table,omitempty"`
	IPs   []string `json:"ips,omitempty"`
}

func (f *Forgery) validate(e *Event) error {
	if f == nil {
		return nil
	}
	if e.Delete == nil {
		return fmt.Errorf("forgePrevResult only goes with delete")
	}
	if e.WithoutPrevResult {
		return fmt.Errorf("forgePrevResult and withoutPrevResult contradict each other")
	}
	if f.Table < 0 || f.Table > 65535 || (f.Table == 0 && len(f.IPs) == 0) {
		return fmt.Errorf("forgePrevResult needs a table between 1 and 65535, or ips")
	}
	for _, s := range f.IPs {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.IsSingleIP() {
			return fmt.Errorf("forgePrevResult: ips %q is not a host prefix (a.b.c.d/32 or a::b/128)", s)
		}
	}
	return nil
}

func (n *Node) validateAdversary() error {
	for i, r := range n.ForeignRules {
		if _, _, err := r.Selectors(); err != nil {
			return fmt.Errorf("node.foreignRules[%d]: %w", i, err)
		}
		if r.Priority < 1 || r.Priority > 32765 || r.Table < 1 || r.Table > 65535 {
			return fmt.Errorf("node.foreignRules[%d]: priority must be 1-32765 and table 1-65535", i)
		}
	}
	if n.Ipamd == nil {
		return nil
	}
	for name, v := range map[string]string{"reconcileGrace": n.Ipamd.ReconcileGrace, "reconcileInterval": n.Ipamd.ReconcileInterval} {
		if v == "" || v == Minimum {
			continue
		}
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("node.ipamd.%s %q: want a duration or %q", name, v, Minimum)
		}
	}
	return nil
}
