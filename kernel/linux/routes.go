package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vpccni/vpccni/kernel"
)

func toNLRoute(r kernel.Route) *netlink.Route {
	nr := &netlink.Route{Table: r.Table, Dst: r.Dst, Gw: r.Gw, LinkIndex: r.LinkIndex, Scope: netlink.Scope(r.Scope),
		Src: r.Src, Priority: r.Priority, Family: int(r.Family)}
	if nr.Table == 0 {
		nr.Table = unix.RT_TABLE_MAIN
	}
	return nr
}

func fromNLRoute(r netlink.Route) kernel.Route {
	if r.Dst != nil {
		if ones, _ := r.Dst.Mask.Size(); ones == 0 && r.Dst.IP.IsUnspecified() {
			r.Dst = nil // netlink reports a default route as 0.0.0.0/0
		}
	}
	return kernel.Route{Table: r.Table, Dst: r.Dst, Gw: r.Gw, LinkIndex: r.LinkIndex, Scope: kernel.Scope(r.Scope),
		Src: r.Src, Priority: r.Priority, Family: kernel.Family(r.Family), Protocol: int(r.Protocol), Type: r.Type}
}

func (h *Handle) RouteAdd(r kernel.Route) error     { return h.nl.RouteAdd(toNLRoute(r)) }
func (h *Handle) RouteReplace(r kernel.Route) error { return h.nl.RouteReplace(toNLRoute(r)) }
func (h *Handle) RouteDel(r kernel.Route) error     { return h.nl.RouteDel(toNLRoute(r)) }

// RouteList lists every route of a family in one table (0: all tables).
func (h *Handle) RouteList(family kernel.Family, table int) ([]kernel.Route, error) {
	rs, err := h.nl.RouteListFiltered(int(family), &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Route, 0, len(rs))
	for _, r := range rs {
		if r.Family == 0 {
			if r.Dst != nil {
				r.Family = int(kernel.FamilyOf(r.Dst.IP))
			} else if r.Gw != nil {
				r.Family = int(kernel.FamilyOf(r.Gw))
			}
		}
		out = append(out, fromNLRoute(r))
	}
	return out, nil
}

// RouteGet is `ip route get`: an input lookup when IifName is set (which
// needs forwarding enabled in the namespace), else an output lookup.
func (h *Handle) RouteGet(q kernel.RouteQuery) (kernel.RouteResult, error) {
	opt := &netlink.RouteGetOptions{SrcAddr: q.Src, Iif: q.IifName}
	rs, err := h.nl.RouteGetWithOptions(q.Dst, opt)
	if err != nil {
		return kernel.RouteResult{}, err
	}
	if len(rs) == 0 {
		return kernel.RouteResult{}, fmt.Errorf("no route to %s: %w", q.Dst, unix.ENETUNREACH)
	}
	res := kernel.RouteResult{Table: rs[0].Table, LinkIndex: rs[0].LinkIndex, Gw: rs[0].Gw, RulePrio: -1}
	if l, err := h.nl.LinkByIndex(rs[0].LinkIndex); err == nil {
		res.LinkName = l.Attrs().Name
	}
	return res, nil
}

func toNLRule(r kernel.Rule) *netlink.Rule {
	nr := netlink.NewRule()
	// Zero fields are wildcards in RuleDel, as in the kernel: netlink omits
	// a priority of -1, and table 0 is RT_TABLE_UNSPEC.
	if r.Priority != 0 {
		nr.Priority = r.Priority
	}
	nr.Family, nr.Src, nr.Dst, nr.IifName, nr.OifName, nr.Table = int(r.Family), r.Src, r.Dst, r.IifName, r.OifName, r.Table
	if nr.Family == 0 {
		if r.Src != nil {
			nr.Family = int(kernel.FamilyOf(r.Src.IP))
		} else if r.Dst != nil {
			nr.Family = int(kernel.FamilyOf(r.Dst.IP))
		}
	}
	if r.Mark != 0 {
		nr.Mark = r.Mark
	}
	if r.Mask != 0 {
		m := r.Mask
		nr.Mask = &m
	}
	return nr
}

func (h *Handle) RuleAdd(r kernel.Rule) error { return h.nl.RuleAdd(toNLRule(r)) }
func (h *Handle) RuleDel(r kernel.Rule) error { return h.nl.RuleDel(toNLRule(r)) }

func (h *Handle) RuleList(family kernel.Family) ([]kernel.Rule, error) {
	rs, err := h.nl.RuleList(int(family))
	if err != nil {
		return nil, err
	}
	out := make([]kernel.Rule, 0, len(rs))
	for _, r := range rs {
		if r.Family != unix.AF_INET && r.Family != unix.AF_INET6 {
			continue // the multicast-routing families' rules are not ours
		}
		k := kernel.Rule{Priority: r.Priority, Family: kernel.Family(r.Family), Src: r.Src, Dst: r.Dst, IifName: r.IifName,
			OifName: r.OifName, Table: r.Table, Mark: r.Mark}
		if r.Mask != nil && (*r.Mask != 0xffffffff || r.Mark != 0) {
			k.Mask = *r.Mask
		}
		if k.Priority < 0 {
			k.Priority = 0
		}
		out = append(out, k)
	}
	return out, nil
}

// sysctlPath validates a key (no "..", no absolute path) and maps it.
func sysctlPath(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "..") {
		return "", fmt.Errorf("sysctl key %q: %w", key, unix.EINVAL)
	}
	return filepath.Join("/proc/sys", key), nil
}

// inNS runs fn with the calling thread inside the handle's namespace.
// /proc/sys/net shows the namespace of the thread that opens it.
func (h *Handle) inNS(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if orig.Equal(h.ns) {
		return fn()
	}
	if err := netns.Set(h.ns); err != nil {
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// A thread stuck in the wrong namespace must never run anything
		// else: keep it locked so the runtime discards it.
		runtime.LockOSThread()
		return fmt.Errorf("restore namespace: %w", err)
	}
	return ferr
}

func (h *Handle) SysctlSet(key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	return h.inNS(func() error { return os.WriteFile(p, []byte(value), 0o644) })
}

func (h *Handle) SysctlGet(key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var v string
	err = h.inNS(func() error {
		b, err := os.ReadFile(p)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}
