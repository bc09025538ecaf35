package driver

// Route lookups shared by setup, check and both teardowns (plain and
// branch).

import (
	"net/netip"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// routeIn is the route for exactly the prefix in one table, if any.
func routeIn(host kernel.API, p netip.Prefix, table int) (*kernel.Route, error) {
	routes, err := host.RouteList(ownership.Family(p.Addr()), table)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if samePrefix(r.Dst, p) {
			return &r, nil
		}
	}
	return nil, nil
}
