// Package kernel is the seam between vpccni and Linux networking.
//
// Everything that touches links, addresses, routes, rules, neighbours or
// sysctls goes through API. A handle is bound to exactly one network
// namespace, so no caller has to switch its thread's namespace. There are
// three implementations: the real one on vishvananda/netlink
// (kernel/linux), the in-memory model used by scenarios (kernel/model), and
// the gomock mock used by unit tests (mocks/).
//
// The types here are deliberately netlink-free: the model and the mock must
// not need a kernel, and the driver must read the same whichever backs it.
//
// Errors carry the errno Linux returns (syscall.EEXIST, ENOENT, ESRCH, …)
// so callers test them with errors.Is and the helpers below, identically on
// the model and on the real kernel.
package kernel

import (
	"errors"
	"net"
	"syscall"
)

// Family is an address family as the kernel numbers it.
type Family int

const (
	FamilyAll Family = 0                // AF_UNSPEC: both families (listing only)
	FamilyV4  Family = syscall.AF_INET  // 2
	FamilyV6  Family = syscall.AF_INET6 // 10
)

func (f Family) String() string {
	switch f {
	case FamilyV4:
		return "inet"
	case FamilyV6:
		return "inet6"
	case FamilyAll:
		return "all"
	}
	return "family?"
}

// FamilyOf returns the family of an address (V4 for IPv4 and IPv4-mapped).
func FamilyOf(ip net.IP) Family {
	if ip.To4() != nil {
		return FamilyV4
	}
	return FamilyV6
}

// Well-known routing tables.
const (
	TableUnspec  = 0   // "any table" in RuleDel/RouteList filters; main on add
	TableDefault = 253 // RT_TABLE_DEFAULT
	TableMain    = 254 // RT_TABLE_MAIN
	TableLocal   = 255 // RT_TABLE_LOCAL
)

// Scope is a route or address scope.
type Scope int

const (
	ScopeUniverse Scope = 0
	ScopeLink     Scope = 253
	ScopeHost     Scope = 254
)

// Link kinds. "device" stands for a physical NIC (an ENI); the real kernel
// reports whatever driver the link has, the model uses "device" for the
// stand-ins it is given.
const (
	KindLoopback = "loopback"
	KindVeth     = "veth"
	KindVlan     = "vlan"
	KindBridge   = "bridge"
	KindDevice   = "device"
)

// MaxLinkNameLen is IFNAMSIZ-1: Linux rejects longer interface names.
const MaxLinkNameLen = 15

// Link is a network interface as seen from its namespace.
type Link struct {
	Index        int
	Name         string
	Kind         string
	MTU          int
	HardwareAddr net.HardwareAddr
	Up           bool
	// ParentIndex is IFLA_LINK: for a VLAN the parent's index, for a veth
	// the peer's index (in the peer's namespace), 0 otherwise.
	ParentIndex int
	// VlanID is set for KindVlan.
	VlanID int
}

// VethSpec describes a veth pair created from one handle, with the peer
// placed directly in another namespace (no move afterwards, so a crash never
// leaves the peer in the wrong namespace).
type VethSpec struct {
	Name         string
	MTU          int
	HardwareAddr net.HardwareAddr // optional
	PeerName     string
	// PeerNamespace is the handle of the namespace the peer is created in;
	// nil means the same namespace. It must be a handle of the same
	// implementation as the receiver.
	PeerNamespace    API
	PeerHardwareAddr net.HardwareAddr // optional
}

// VlanSpec describes an 802.1Q link on a parent (a trunk ENI).
type VlanSpec struct {
	Name         string
	ParentIndex  int
	VlanID       int
	MTU          int              // 0: inherit
	HardwareAddr net.HardwareAddr // optional
}

// Address flags reported by AddrList (IFA_F_*).
const (
	AddrFlagTentative = 0x40 // IFA_F_TENTATIVE: DAD in progress
	AddrFlagDadFailed = 0x08 // IFA_F_DADFAILED
	AddrFlagPermanent = 0x80 // IFA_F_PERMANENT
	AddrFlagNoDAD     = 0x02 // IFA_F_NODAD
)

// Addr is an address on a link.
type Addr struct {
	LinkIndex int
	IPNet     *net.IPNet
	Scope     Scope
	Flags     int
}

// Route is a unicast route. Table 0 means main on add and delete; in
// RouteList it is filled in with the table the route lives in. In RouteDel
// a zero Gw, LinkIndex, Scope, Src, Priority, Protocol or Type matches any.
type Route struct {
	Table     int
	Dst       *net.IPNet // nil: default route of Family
	Gw        net.IP
	LinkIndex int
	Scope     Scope
	Src       net.IP // preferred source, optional
	Priority  int    // metric
	Family    Family // needed only when Dst and Gw are both nil
	// Protocol/Type are informational on dumps (kernel routes made for
	// addresses are proto kernel; local-table routes are type local).
	Protocol int
	Type     int
}

// Route types (RTN_*) used in dumps.
const (
	RouteTypeUnicast = 1
	RouteTypeLocal   = 2
)

// Rule is a policy-routing rule. In RuleDel zero fields mean "any", as in
// the kernel: Priority 0, Table 0, nil Src/Dst, empty IifName match every
// rule. Family is derived from Src/Dst when they are set, else Family is
// used, else IPv4 (what netlink sends). In RuleAdd, Priority 0 lets the
// kernel pick one (one below its second rule's) and Table 0 is a fresh
// table for IPv4, EINVAL for IPv6.
type Rule struct {
	Priority int
	Family   Family
	Src      *net.IPNet
	Dst      *net.IPNet
	IifName  string
	OifName  string
	Table    int
	Mark     uint32
	Mask     uint32
}

// NeighStatePermanent is NUD_PERMANENT.
const NeighStatePermanent = 0x80

// Neigh is a neighbour (ARP/NDP) entry.
type Neigh struct {
	LinkIndex    int
	IP           net.IP
	HardwareAddr net.HardwareAddr
	State        int
}

// RouteQuery asks where a packet would go (ip route get).
type RouteQuery struct {
	Dst     net.IP
	Src     net.IP // optional source address
	IifName string // optional input interface (a packet arriving from it)
	// FIBMatch asks for the table entry that answered (RouteResult.Route),
	// as `ip route get fibmatch`: one request, where finding the route for
	// an exact prefix by listing would parse the whole table.
	FIBMatch bool
}

// RouteResult is the answer to a RouteQuery.
type RouteResult struct {
	Table     int    // table the winning route came from
	LinkIndex int    // output interface
	LinkName  string // output interface name
	Gw        net.IP
	RulePrio  int // priority of the rule that selected the table; -1 when unknown (the real kernel does not report it)
	// Route is the table entry that answered, as RouteList would show it
	// (its prefix, table, link, metric: what RouteDel needs), when the
	// query asked FIBMatch; zero otherwise.
	Route Route
}

// API is one network namespace's networking, as the plugin, ipamd and the
// harness use it. Links are addressed by name in link operations (names are
// unique within a namespace) and by index inside routes, addresses and
// neighbours, as in the kernel.
type API interface {
	// Links
	LinkList() ([]Link, error)
	LinkByName(name string) (Link, error)
	LinkByIndex(index int) (Link, error)
	AddVeth(spec VethSpec) error
	AddVlan(spec VlanSpec) error
	AddBridge(name string, mtu int) error
	LinkDel(name string) error
	// LinkDelIndex deletes the link with this ifindex: a link deleted and
	// a new one made with its name since it was looked up are never
	// mistaken for each other (an ifindex is not reused while the kernel
	// has others to give).
	LinkDelIndex(index int) error
	LinkSetUp(name string) error
	// LinkSetMTU sets one link's MTU (a veth's peer keeps its own, as in
	// Linux); ipamd gives every ENI's link the configured ENI MTU.
	LinkSetMTU(name string, mtu int) error

	// Addresses
	AddrAdd(linkIndex int, addr *net.IPNet) error
	AddrDel(linkIndex int, addr *net.IPNet) error
	AddrList(linkIndex int, family Family) ([]Addr, error) // linkIndex 0: all links

	// Routes
	RouteAdd(r Route) error
	RouteReplace(r Route) error
	RouteDel(r Route) error
	// RouteList lists unicast routes of a family in one table (0: all tables).
	RouteList(family Family, table int) ([]Route, error)
	// RouteListLink is RouteList of the routes leaving by one link,
	// filtered by the kernel where it can (Linux 4.20 and later), so
	// finding an ENI's few routes does not parse every pod's host route.
	RouteListLink(family Family, table, linkIndex int) ([]Route, error)
	RouteGet(q RouteQuery) (RouteResult, error)

	// Rules
	RuleAdd(r Rule) error
	RuleDel(r Rule) error
	RuleList(family Family) ([]Rule, error)

	// Neighbours
	NeighSet(n Neigh) error
	NeighList(linkIndex int, family Family) ([]Neigh, error)

	// Sysctls of this namespace, by path under /proc/sys (e.g.
	// "net/ipv6/conf/eth0/accept_ra").
	SysctlSet(key, value string) error
	SysctlGet(key string) (string, error)

	// Close releases the handle (not the namespace).
	Close() error
}

// Opener opens handles on namespaces by path. The empty path is the
// caller's own namespace: the node (host) namespace for the plugin and ipamd.
type Opener interface {
	Open(nsPath string) (API, error)
}

// ErrNamespaceGone is returned (wrapped) by Opener.Open when the namespace
// path does not exist or is no longer a namespace.
var ErrNamespaceGone = errors.New("network namespace does not exist")

// IsExist reports an EEXIST from the kernel.
func IsExist(err error) bool { return errors.Is(err, syscall.EEXIST) }

// IsNotFound reports the errors Linux uses for "no such object": ENOENT
// (rules, addresses), ESRCH (routes), ENODEV (links), EADDRNOTAVAIL
// (address delete).
func IsNotFound(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) ||
		errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EADDRNOTAVAIL)
}
