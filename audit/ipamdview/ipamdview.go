// Package ipamdview reads ipamd's memory, as its introspection endpoint
// /v1/enis shows it, for the node audit: which ENIs ipamd manages, which
// address ranges they carry, and which addresses a pod holds now.
//
// The body is the reference ipamd's shape (vpccni's ipamd serves the same),
// so the audit reads either daemon. Only GET is ever sent: an audit must not
// change the node it is looking at.
package ipamdview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/vpccni/vpccni/audit"
	"time"
)

// DefaultAddress is where ipamd's introspection listens unless told
// otherwise (INTROSPECTION_BIND_ADDRESS).
const DefaultAddress = "127.0.0.1:61679"

// Path is the endpoint read.
const Path = "/v1/enis"

// maxBody bounds what is read: a node with a few hundred pods answers in
// well under a megabyte, so anything near this is not ipamd.
const maxBody = 32 << 20

// tableMain is the kernel's main table, the primary ENI's.
const tableMain = 254

// View is ipamd's memory, as the audit needs it.
type View struct {
	ENIs []ENI
	// Held are the addresses a pod holds now, by address.
	Held map[netip.Addr]Holder
	// Conflicts describe addresses ipamd lists more than once (on two
	// ENIs, or in two ranges of one), a state it must never be in.
	Conflicts []string
}

// ENI is one ENI ipamd manages.
type ENI struct {
	ID      string
	Device  int
	Table   int // the route table its pods' 1536 rules use
	Primary bool
	Trunk   bool
	Ranges  []netip.Prefix // a secondary address as a host prefix, a delegated prefix as itself
}

// Holder is who ipamd says holds an address, and where it lives.
type Holder struct {
	ENI          string
	Device       int
	Table        int
	ContainerID  string // empty when ipamd does not say (current bodies omit it)
	PodNamespace string
	PodName      string
}

// Audit is ipamd's memory as the audit reads it.
func (v *View) Audit() *audit.IpamdView {
	out := &audit.IpamdView{Held: map[netip.Addr]audit.Holder{}, InPool: v.InPool, Conflicts: v.Conflicts}
	for a, h := range v.Held {
		out.Held[a] = audit.Holder{ContainerID: h.ContainerID, PodNamespace: h.PodNamespace, PodName: h.PodName, Table: h.Table}
	}
	return out
}

// InPool: the address is in a range ipamd hands to pods.
func (v *View) InPool(a netip.Addr) bool {
	for _, e := range v.ENIs {
		for _, r := range e.Ranges {
			if r.Contains(a) {
				return true
			}
		}
	}
	return false
}

// The wire shape. Field names are the reference's (it has no JSON tags on
// the outer structs, so they are Go's exported names).
type wireCard struct {
	ENIs map[string]wireENI
}

type wireENI struct {
	ID                 string
	IsPrimary          bool
	IsTrunk            bool
	DeviceNumber       int
	RouteTableID       *int
	AvailableIPv4Cidrs map[string]wireCidr
	IPv6Cidrs          map[string]wireCidr
}

type wireCidr struct {
	IPAddresses map[string]wireAddress
}

type wireAddress struct {
	IPAMKey struct {
		NetworkName string `json:"networkName"`
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifName"`
	}
	IPAMMetadata struct {
		K8SPodNamespace string `json:"k8sPodNamespace"`
		K8SPodName      string `json:"k8sPodName"`
	}
	AssignedTime   time.Time
	UnassignedTime time.Time
}

// held: ipamd's own test of an address being a pod's is a non-empty key;
// a cooling address keeps only its unassigned time.
func (w wireAddress) held() bool {
	k := w.IPAMKey
	return k.NetworkName != "" || k.ContainerID != "" || k.IfName != "" ||
		w.IPAMMetadata.K8SPodName != ""
}

// Parse reads a /v1/enis body.
func Parse(body []byte) (*View, error) {
	var cards map[string]wireCard
	if err := json.Unmarshal(body, &cards); err != nil {
		return nil, fmt.Errorf("ipamd's %s body is not the ENI listing: %w", Path, err)
	}
	if cards == nil {
		return nil, fmt.Errorf("ipamd's %s body is null, not the ENI listing", Path)
	}
	v := &View{Held: map[netip.Addr]Holder{}}
	seen := map[netip.Addr]string{} // address → where it was first listed
	for _, cardKey := range sortedKeys(cards) {
		if _, err := strconv.Atoi(cardKey); err != nil {
			return nil, fmt.Errorf("ipamd's %s body: network card key %q is not a number", Path, cardKey)
		}
		card := cards[cardKey]
		for _, id := range sortedKeys(card.ENIs) {
			we := card.ENIs[id]
			e, err := eniOf(id, we)
			if err != nil {
				return nil, err
			}
			for _, ranges := range []map[string]wireCidr{we.AvailableIPv4Cidrs, we.IPv6Cidrs} {
				for _, cidr := range sortedKeys(ranges) {
					p, err := netip.ParsePrefix(cidr)
					if err != nil {
						return nil, fmt.Errorf("ipamd's %s body: ENI %s range %q: %w", Path, id, cidr, err)
					}
					e.Ranges = append(e.Ranges, p.Masked())
					for _, as := range sortedKeys(ranges[cidr].IPAddresses) {
						a, err := netip.ParseAddr(as)
						if err != nil {
							return nil, fmt.Errorf("ipamd's %s body: ENI %s range %s: address %q: %w", Path, id, cidr, as, err)
						}
						if !p.Contains(a) {
							return nil, fmt.Errorf("ipamd's %s body: ENI %s lists %s in range %s, which does not contain it", Path, id, a, cidr)
						}
						where := fmt.Sprintf("%s (%s)", id, cidr)
						if first, dup := seen[a]; dup {
							v.Conflicts = append(v.Conflicts, fmt.Sprintf("ipamd lists %s on %s and on %s", a, first, where))
							continue
						}
						seen[a] = where
						w := ranges[cidr].IPAddresses[as]
						if w.held() {
							v.Held[a] = Holder{ENI: id, Device: e.Device, Table: e.Table, ContainerID: w.IPAMKey.ContainerID,
								PodNamespace: w.IPAMMetadata.K8SPodNamespace, PodName: w.IPAMMetadata.K8SPodName}
						}
					}
				}
			}
			v.ENIs = append(v.ENIs, e)
		}
	}
	return v, nil
}

func eniOf(id string, w wireENI) (ENI, error) {
	if w.ID != "" && w.ID != id {
		return ENI{}, fmt.Errorf("ipamd's %s body: ENI listed under %q says its ID is %q", Path, id, w.ID)
	}
	if w.DeviceNumber < 0 {
		return ENI{}, fmt.Errorf("ipamd's %s body: ENI %s has device number %d", Path, id, w.DeviceNumber)
	}
	e := ENI{ID: id, Device: w.DeviceNumber, Primary: w.IsPrimary || w.DeviceNumber == 0, Trunk: w.IsTrunk}
	switch {
	case w.RouteTableID != nil && *w.RouteTableID > 0:
		e.Table = *w.RouteTableID
	case e.Device == 0:
		e.Table = tableMain
	default:
		// Bodies without the field: a secondary ENI's table is its
		// device number plus one.
		e.Table = e.Device + 1
	}
	return e, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Fetch asks ipamd at addr ("host:port" or "unix:/path") for its ENIs.
func Fetch(ctx context.Context, addr string) (*View, error) {
	client, url, err := clientFor(addr)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("ipamd introspection %s: %w", addr, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ipamd introspection %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("ipamd introspection %s: reading %s: %w", addr, Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ipamd introspection %s: %s answered %s: %s", addr, Path, resp.Status, firstLine(body))
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("ipamd introspection %s: %s answered more than %d MiB", addr, Path, maxBody>>20)
	}
	return Parse(body)
}

// clientFor makes the HTTP client and URL for an address.
func clientFor(addr string) (*http.Client, string, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//") // unix:///run/x.sock as well as unix:/run/x.sock
		if !strings.HasPrefix(path, "/") {
			return nil, "", fmt.Errorf("ipamd introspection address %q: a unix socket needs an absolute path (unix:/run/ipamd-introspect.sock)", addr)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &http.Client{Transport: tr}, "http://ipamd" + Path, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return nil, "", fmt.Errorf("ipamd introspection address %q: want host:port (%s) or unix:/path", addr, DefaultAddress)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, "", fmt.Errorf("ipamd introspection address %q: port %q is not a number below 65536", addr, port)
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil}}, "http://" + net.JoinHostPort(host, port) + Path, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
