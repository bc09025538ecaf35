package model

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/vpccni/vpccni/kernel"
)

// The sysctls of a namespace, as a fresh network namespace of Linux 6.x
// has them (values read from one; devconf_inherit_init_net=0, so a new
// namespace starts from the kernel's defaults, not the host's). Only
// integer keys are modelled. Per-interface keys exist while their
// interface does; a new interface copies conf/default; a few writes have
// the side effects Linux gives them (see SysctlSet).
//
// Only values that differ from these tables are stored (namespace keys in
// netns.sysctl, an interface's in link.sysctl), so namespaces and links
// stay cheap to make: scenarios make thousands.

var v4Conf = map[string]int{
	"accept_local": 0, "accept_redirects": 1, "accept_source_route": 1, "arp_accept": 0, "arp_announce": 0,
	"arp_evict_nocarrier": 1, "arp_filter": 0, "arp_ignore": 0, "arp_notify": 0, "bc_forwarding": 0, "bootp_relay": 0,
	"disable_policy": 0, "disable_xfrm": 0, "drop_gratuitous_arp": 0, "drop_unicast_in_l2_multicast": 0,
	"force_igmp_version": 0, "forwarding": 0, "igmpv2_unsolicited_report_interval": 10000,
	"igmpv3_unsolicited_report_interval": 1000, "ignore_routes_with_linkdown": 0, "log_martians": 0, "mc_forwarding": 0,
	"medium_id": 0, "promote_secondaries": 0, "proxy_arp": 0, "proxy_arp_pvlan": 0, "route_localnet": 0, "rp_filter": 0,
	"secure_redirects": 1, "send_redirects": 1, "shared_media": 1, "src_valid_mark": 0, "tag": 0,
}

var v6Conf = map[string]int{
	"accept_dad": 1, "accept_ra": 1, "accept_ra_defrtr": 1, "accept_ra_from_local": 0, "accept_ra_min_hop_limit": 1,
	"accept_ra_min_lft": 0, "accept_ra_mtu": 1, "accept_ra_pinfo": 1, "accept_ra_rt_info_max_plen": 0,
	"accept_ra_rt_info_min_plen": 0, "accept_ra_rtr_pref": 1, "accept_redirects": 1, "accept_source_route": 0,
	"accept_untracked_na": 0, "addr_gen_mode": 0, "autoconf": 1, "dad_transmits": 1, "disable_ipv6": 0,
	"disable_policy": 0, "drop_unicast_in_l2_multicast": 0, "drop_unsolicited_na": 0, "enhanced_dad": 1,
	"force_forwarding": 0, "force_mld_version": 0, "force_tllao": 0, "forwarding": 0, "hop_limit": 64,
	"ignore_routes_with_linkdown": 0, "ioam6_enabled": 0, "ioam6_id": 65535, "ioam6_id_wide": 4294967295,
	"keep_addr_on_down": 0, "max_addresses": 16, "max_desync_factor": 600, "mc_forwarding": 0,
	"mldv1_unsolicited_report_interval": 10000, "mldv2_unsolicited_report_interval": 1000, "mtu": 1280,
	"ndisc_evict_nocarrier": 1, "ndisc_notify": 0, "ndisc_tclass": 0, "optimistic_dad": 0, "proxy_ndp": 0,
	"ra_defrtr_metric": 1024, "ra_honor_pio_life": 0, "ra_honor_pio_pflag": 0, "regen_max_retry": 3,
	"regen_min_advance": 2, "router_probe_interval": 60, "router_solicitation_delay": 1,
	"router_solicitation_interval": 4, "router_solicitation_max_interval": 3600, "router_solicitations": -1,
	"rpl_seg_enabled": 0, "seg6_enabled": 0, "seg6_require_hmac": 0, "suppress_frag_ndisc": 1,
	"temp_prefered_lft": 86400, "temp_valid_lft": 604800, "use_oif_addrs_only": 0, "use_optimistic": 0, "use_tempaddr": 0,
}

// Where all/ or lo differ from default/ in a fresh namespace.
var (
	v4All = map[string]int{"accept_source_route": 0}
	v6All = map[string]int{"accept_dad": 0}
	v4Lo  = map[string]int{"disable_policy": 1, "disable_xfrm": 1}
	v6Lo  = map[string]int{"accept_dad": -1, "use_tempaddr": -1}
)

// neigh/<if>/ keys; IPv6 differs in locktime and retrans_time.
var neighConf = map[string]int{
	"anycast_delay": 100, "app_solicit": 0, "base_reachable_time": 30, "base_reachable_time_ms": 30000,
	"delay_first_probe_time": 5, "gc_stale_time": 60, "interval_probe_time_ms": 5000, "locktime": 100,
	"mcast_resolicit": 0, "mcast_solicit": 3, "proxy_delay": 80, "proxy_qlen": 64, "retrans_time": 100,
	"retrans_time_ms": 1000, "ucast_solicit": 3, "unres_qlen": 101, "unres_qlen_bytes": 212992,
}
var neigh6 = map[string]int{"locktime": 0, "retrans_time": 250}

var globals = map[string]int{
	"net/ipv4/ip_nonlocal_bind": 0, "net/ipv4/tcp_early_demux": 1, "net/ipv4/udp_early_demux": 1,
	"net/ipv4/fwmark_reflect": 0, "net/ipv4/ip_dynaddr": 0, "net/ipv4/ip_no_pmtu_disc": 0, "net/ipv4/ip_default_ttl": 64,
	"net/ipv4/ip_unprivileged_port_start": 1024, "net/ipv4/tcp_mtu_probing": 0, "net/ipv6/ip_nonlocal_bind": 0,
	"net/ipv6/fwmark_reflect": 0, "net/ipv6/bindv6only": 0, "net/core/somaxconn": 4096,
}

// readOnly keys answer EACCES to a write (mode 0444).
var readOnly = map[string]bool{"mc_forwarding": true}

// ipForward is an alias of conf/all/forwarding, as in Linux.
const (
	ipForward = "net/ipv4/ip_forward"
	v4AllFwd  = "net/ipv4/conf/all/forwarding"
)

// sysKey is a parsed key: a namespace-wide one (link == nil) or one of an
// interface's, named by rel ("ipv4/conf/rp_filter").
type sysKey struct {
	full      string
	v, kind   string // "ipv4"/"ipv6", "conf"/"neigh"
	ifc, leaf string
	link      *link
}

func (k sysKey) rel() string { return k.v + "/" + k.kind + "/" + k.leaf }

// resolve parses and validates a key as the real implementation does
// (EINVAL for an absolute path or ".."), resolves the ip_forward alias,
// and finds the interface a per-interface key names (ENOENT when the key
// does not exist).
func (n *netns) resolve(key string) (sysKey, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "..") {
		return sysKey{}, fmt.Errorf("sysctl key %q: %w", key, syscall.EINVAL)
	}
	if key == ipForward {
		key = v4AllFwd
	}
	k := sysKey{full: key}
	parts := strings.Split(key, "/")
	if len(parts) == 5 && parts[0] == "net" && (parts[1] == "ipv4" || parts[1] == "ipv6") && (parts[2] == "conf" || parts[2] == "neigh") {
		k.v, k.kind, k.ifc, k.leaf = parts[1], parts[2], parts[3], parts[4]
		if k.kind == "conf" && (k.ifc == "all" || k.ifc == "default") {
			if _, ok := n.nsDefault(k); ok {
				return k, nil
			}
		} else if k.link = n.byName(k.ifc); k.link != nil {
			if _, ok := linkDefault(k.link, k.rel()); ok {
				return k, nil
			}
		}
	} else if _, ok := globals[key]; ok {
		return k, nil
	}
	return k, fmt.Errorf("sysctl %s: %w", key, syscall.ENOENT)
}

// nsDefault is a namespace key's value in a fresh namespace.
func (n *netns) nsDefault(k sysKey) (int, bool) {
	if k.link != nil || k.v == "" {
		v, ok := globals[k.full]
		return v, ok
	}
	table, all := v4Conf, v4All
	if k.v == "ipv6" {
		table, all = v6Conf, v6All
	}
	v, ok := table[k.leaf]
	if o, over := all[k.leaf]; over && k.ifc == "all" {
		v = o
	}
	return v, ok
}

// linkDefault is an interface key's value when conf/default is untouched.
func linkDefault(l *link, rel string) (int, bool) {
	v, rest, _ := strings.Cut(rel, "/")
	kind, leaf, _ := strings.Cut(rest, "/")
	lo := l.Kind == kernel.KindLoopback
	switch {
	case kind == "neigh":
		d, ok := neighConf[leaf]
		if o, over := neigh6[leaf]; over && v == "ipv6" {
			d = o
		}
		return d, ok
	case v == "ipv4":
		d, ok := v4Conf[leaf]
		if o, over := v4Lo[leaf]; over && lo {
			d = o
		}
		return d, ok
	default:
		d, ok := v6Conf[leaf]
		if o, over := v6Lo[leaf]; over && lo {
			d = o
		}
		if leaf == "mtu" {
			d = l.MTU
		}
		return d, ok
	}
}

func (n *netns) get(k sysKey) string {
	if k.link == nil {
		if v, ok := n.sysctl[k.full]; ok {
			return v
		}
		d, _ := n.nsDefault(k)
		return strconv.Itoa(d)
	}
	if v, ok := k.link.sysctl[k.rel()]; ok {
		return v
	}
	d, _ := linkDefault(k.link, k.rel())
	return strconv.Itoa(d)
}

func (n *netns) put(k sysKey, v string) {
	if k.link == nil {
		n.sysctl[k.full] = v
		return
	}
	if k.link.sysctl == nil {
		k.link.sysctl = map[string]string{}
	}
	k.link.sysctl[k.rel()] = v
}

// linkKey is the key of one of l's conf values.
func linkKey(l *link, fam kernel.Family, leaf string) sysKey {
	k := sysKey{v: "ipv4", kind: "conf", ifc: l.Name, leaf: leaf, link: l}
	if fam == kernel.FamilyV6 {
		k.v = "ipv6"
	}
	k.full = "net/" + k.v + "/conf/" + l.Name + "/" + leaf
	return k
}

// addLinkSysctls gives a new link a copy of conf/default: only the
// conf/default values written in this namespace need copying.
func (n *netns) addLinkSysctls(l *link) {
	for full, v := range n.sysctl {
		for _, fam := range []kernel.Family{kernel.FamilyV4, kernel.FamilyV6} {
			pfx := "net/ipv4/conf/default/"
			if fam == kernel.FamilyV6 {
				pfx = "net/ipv6/conf/default/"
			}
			if leaf, ok := strings.CutPrefix(full, pfx); ok && leaf != "mtu" {
				if _, lo := v4Lo[leaf]; lo && fam == kernel.FamilyV4 && l.Kind == kernel.KindLoopback {
					continue
				}
				n.put(linkKey(l, fam, leaf), v)
			}
		}
	}
}

func (n *netns) intConf(fam kernel.Family, ifname, leaf string) int {
	var k sysKey
	if ifname == "all" || ifname == "default" {
		v := "ipv4"
		if fam == kernel.FamilyV6 {
			v = "ipv6"
		}
		k = sysKey{full: "net/" + v + "/conf/" + ifname + "/" + leaf, v: v, kind: "conf", ifc: ifname, leaf: leaf}
	} else if l := n.byName(ifname); l != nil {
		k = linkKey(l, fam, leaf)
	} else {
		return 0
	}
	v, _ := strconv.Atoi(n.get(k))
	return v
}

// confOr is IN_DEV_ORCONF: the all/ value or the interface's.
func (n *netns) confOr(fam kernel.Family, ifname, leaf string) bool {
	return n.intConf(fam, "all", leaf) != 0 || n.intConf(fam, ifname, leaf) != 0
}

func (n *netns) ipv6Disabled(ifname string) bool {
	return n.intConf(kernel.FamilyV6, ifname, "disable_ipv6") != 0
}

func (h *handle) SysctlGet(key string) (v string, err error) {
	err = h.with(func(n *netns) error {
		k, err := n.resolve(key)
		if err == nil {
			v = n.get(k)
		}
		return err
	})
	return v, err
}

// SysctlSet writes a key: ENOENT for one that does not exist (an
// interface's keys vanish with it), EACCES for a read-only one, EINVAL
// for a value that is not an integer (or an IPv6 mtu outside 1280..the
// link's). Side effects, as in Linux: ip_forward (= conf/all/forwarding)
// sets forwarding on default and every interface and clears
// all/accept_redirects; ipv6 all/forwarding and all/disable_ipv6 set
// default and every interface; an IPv4 conf/default/ key is copied to the
// interfaces that never had that key written (forwarding excepted);
// disabling IPv6 on an interface drops its IPv6 addresses, routes and
// neighbours.
func (h *handle) SysctlSet(key, value string) error {
	return h.change(func(n *netns) error {
		k, err := n.resolve(key)
		if err != nil {
			return err
		}
		if readOnly[k.leaf] {
			return fmt.Errorf("sysctl %s is read-only: %w", key, syscall.EACCES)
		}
		iv, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return fmt.Errorf("sysctl %s = %q: %w", key, value, syscall.EINVAL)
		}
		if k.link != nil && k.v == "ipv6" && k.leaf == "mtu" && (iv < 1280 || iv > k.link.MTU) {
			return fmt.Errorf("sysctl %s = %d: %w", key, iv, syscall.EINVAL)
		}
		v := strconv.Itoa(iv)
		changed := n.get(k) != v
		switch {
		case k.link != nil && k.v == "ipv6" && k.kind == "conf":
			n.setV6(k.link, k.leaf, v)
		case k.link != nil:
			n.put(k, v)
			if k.v == "ipv4" && k.kind == "conf" {
				if k.link.explicit == nil {
					k.link.explicit = map[string]bool{}
				}
				k.link.explicit[k.leaf] = true
			}
		case k.full == v4AllFwd:
			n.put(k, v)
			if changed {
				n.sysctl["net/ipv4/conf/default/forwarding"] = v
				n.sysctl["net/ipv4/conf/all/accept_redirects"] = strconv.Itoa(b2i(iv == 0))
				n.eachLink(func(l *link) { n.put(linkKey(l, kernel.FamilyV4, "forwarding"), v) })
			}
		case k.v == "ipv6" && k.ifc == "all" && (k.leaf == "forwarding" || k.leaf == "disable_ipv6"):
			n.put(k, v)
			if changed {
				n.sysctl["net/ipv6/conf/default/"+k.leaf] = v
				n.eachLink(func(l *link) { n.setV6(l, k.leaf, v) })
			}
		case k.v == "ipv4" && k.ifc == "default" && k.leaf != "forwarding":
			n.put(k, v)
			n.eachLink(func(l *link) {
				if !l.explicit[k.leaf] {
					n.put(linkKey(l, kernel.FamilyV4, k.leaf), v)
				}
			})
		default:
			n.put(k, v)
		}
		return nil
	})
}

// setV6 writes an interface's IPv6 key; turning disable_ipv6 on takes the
// interface's IPv6 state down with it, turning it off on lo brings ::1
// back.
func (n *netns) setV6(l *link, leaf, v string) {
	k := linkKey(l, kernel.FamilyV6, leaf)
	was := n.get(k)
	n.put(k, v)
	if leaf != "disable_ipv6" || (was == "0") == (v == "0") {
		return
	}
	if v != "0" {
		for i := len(n.addrs) - 1; i >= 0; i-- {
			if a := n.addrs[i]; a.LinkIndex == l.Index && familyOfNet(a.IPNet) == kernel.FamilyV6 {
				n.delAddr(i)
			}
		}
		n.routes = filter(n.routes, func(r route) bool { return !(r.LinkIndex == l.Index && r.Family == kernel.FamilyV6) })
		n.neighs = filter(n.neighs, func(nb kernel.Neigh) bool {
			return !(nb.LinkIndex == l.Index && kernel.FamilyOf(nb.IP) == kernel.FamilyV6)
		})
		return
	}
	if l.Kind == kernel.KindLoopback && l.Up {
		if a := mustCIDR("::1/128"); n.findAddr(l.Index, a) < 0 {
			n.addAddr(l, a)
		}
	}
}

func (n *netns) eachLink(fn func(l *link)) {
	for _, i := range n.indexes() {
		fn(n.links[i])
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
