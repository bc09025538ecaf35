package audit

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
)

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	return slices.SortedFunc(maps.Keys(m), func(a, b netip.Addr) int { return a.Compare(b) })
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

func firstAddr(as []netip.Addr) string {
	if len(as) == 0 {
		return ""
	}
	return slices.MinFunc(as, func(a, b netip.Addr) int { return a.Compare(b) }).String()
}

// routedSuffix names the addresses routed to a veth in its finding.
func routedSuffix(as []netip.Addr) string {
	if len(as) == 0 {
		return " (no address routed)"
	}
	return " (routed " + strings.Join(addrStrings(as), ", ") + ")"
}
