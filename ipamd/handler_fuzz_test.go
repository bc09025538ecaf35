package ipamd

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/cloud/memory"
	"github.com/vpccni/vpccni/ipamd/datastore"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// The socket is root's, but whatever can reach it can send any field
// value: a plugin of another build, a foreign agent, a buggy tool. This
// target drives a real daemon with sequences of AddNetwork and DelNetwork
// decoded from the fuzz bytes and checks, after every request, the reply
// against a model of what the daemon should hold and the datastore
// against its invariants:
//   - no address is held by two keys, Stats().Assigned equals the number
//     of allocations, every allocated address is a pool address
//     (IsPodAddress), every key is complete;
//   - the allocations are exactly the model's: an Add of a held key
//     returns the same address (Assign is idempotent per key) and takes
//     no second one; an Add of a new key takes a free address, or is
//     Success=false only when the pool is empty; an incomplete key, a
//     multi-NIC request or the recovered-allocation network never gets
//     one; a Del releases exactly the key's address;
//   - a Del of a key that holds nothing is NotFound "datastore: unknown
//     pod" (the text the reference's plugin looks for);
//   - a client of another version gets FailedPrecondition and changes
//     nothing (RejectVersionMismatch);
//   - every allocation can be released by the reconciler: its holder id
//     (keyID) parses back to its key.
//
// One daemon per mode per fuzzing process (an input only resets its
// allocations), so an input costs a few gRPC round trips, not a daemon
// start.
func FuzzHandlers(f *testing.F) {
	f.Add([]byte{})
	// Add, retried Add, Del, Del again (unknown pod), on both transports.
	f.Add([]byte{0, 0x00, 0x00, 0x01, 0x01, 0x80, 0x81})
	// IPv6 mode: three Adds (one a retry under another pod name), a
	// double Del.
	f.Add([]byte{1, 0x00, 0x08, 0x10, 0x09, 0x09, 0x11})
	// Refused: empty network, empty interface, another client version,
	// multi-NIC, the recovered-allocation network, an empty container ID
	// (over gRPC); a Del of another version.
	f.Add([]byte{0, 0x7e, 0x01, 0x00, 0x7e, 0x08, 0x01, 0x7e, 0x10, 0x02, 0x7e, 0x20, 0x03, 0x7e, 0x02, 0x04,
		0xfe, 0x00, 0x06, 0x00, 0x7f, 0x10, 0x00})
	// Exhaust the pool (t3.medium: 15 addresses), free one, take it again.
	exhaust := []byte{0}
	for i := range 17 {
		exhaust = append(exhaust, 0x7e, 0x00, 0x07, 0x02, 'p', 'a'+byte(i))
	}
	f.Add(append(exhaust, 0x7f, 0x00, 0x07, 0x02, 'p', 'd', 0x7e, 0x00, 0x07, 0x02, 'p', 'z'))
	// Placement on devices 1, 2 and the missing 3 and 4.
	f.Add([]byte{0, 0x12, 0x24, 0x6a, 0x36, 0x13, 0x25})
	// Invalid UTF-8 in a container ID: refused on the way in over gRPC,
	// and what the handler could get instead.
	f.Add([]byte{0, 0xfe, 0x00, 0x07, 0x02, 0xc3, 0x28, 0x7e, 0x00, 0x07, 0x02, 0xc3, 0x28, 0x7f, 0x00, 0x07, 0x03, 0xef, 0xbf, 0xbd})

	daemons := [2]*Daemon{fzStartDaemon(f, false), fzStartDaemon(f, true)}
	clients := [2]rpcgrpc.CNIBackendClient{client(f, daemons[0].cfg.SocketPath), client(f, daemons[1].cfg.SocketPath)}

	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fzReader{b: data}
		mode := int(r.byte() & 1)
		d, c := daemons[mode], clients[mode]
		h := &handler{d: d}
		// Back to an empty pool: no cooldown, so every address is free
		// again and the input is reproducible on its own.
		for _, a := range d.store.Allocations() {
			if _, err := d.store.ReleaseKey(a.Key); err != nil {
				t.Fatalf("reset: %v", err)
			}
		}
		model := map[datastore.Key]netip.Addr{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 64 && r.more(); i++ {
			req := r.request()
			viaGRPC := req.grpc
			if !viaGRPC {
				// gRPC delivers only valid UTF-8 (proto3 strings);
				// the handler called directly gets what gRPC could.
				req.sanitize()
			}
			badUTF8 := viaGRPC && !req.validUTF8()
			step := fmt.Sprintf("request %d (%s)", i, req)
			held, isHeld := model[req.key]
			if req.add {
				ar := &rpc.AddNetworkRequest{ClientVersion: req.version, K8S_POD_NAMESPACE: req.ns, K8S_POD_NAME: req.name,
					ContainerID: req.key.ContainerID, IfName: req.key.IfName, NetworkName: req.key.NetworkName,
					Netns: "/var/run/netns/" + req.key.ContainerID, RequiresMultiNICAttachment: req.multiNIC}
				var reply *rpc.AddNetworkReply
				var err error
				if viaGRPC {
					reply, err = c.AddNetwork(ctx, ar)
				} else {
					reply, err = h.AddNetwork(ctx, ar)
				}
				switch {
				case badUTF8:
					if err == nil {
						t.Fatalf("%s: a request with invalid UTF-8 reached the handler", step)
					}
				case req.version != fzVersion:
					fzWantStatus(t, step, err, codes.FailedPrecondition, "wrong client version")
				case err != nil:
					t.Fatalf("%s: AddNetwork error %v (a refusal is Success=false)", step, err)
				case !fzComplete(req.key) || req.key.Recovered() || req.multiNIC:
					if reply.Success {
						t.Fatalf("%s: an incomplete or reserved key or a multi-NIC request got %v", step, reply)
					}
				case !reply.Success:
					// Only an empty pool refuses a complete key; an IPv6
					// prefix (4096 addresses) is never empty here.
					if full := mode == 0 && len(model) >= d.store.Stats().Total; isHeld || !full {
						t.Fatalf("%s: Success=false with %d of %d addresses held (key held: %v)", step, len(model), d.store.Stats().Total, isHeld)
					}
				default:
					ip := fzCheckMetadata(t, step, reply.IPAllocationMetadata, mode == 1)
					if isHeld && ip != held {
						t.Fatalf("%s: a retried Add got %s, the key holds %s", step, ip, held)
					}
					if !isHeld {
						for k, other := range model {
							if other == ip {
								t.Fatalf("%s: got %s, held by %s", step, ip, fzKey(k))
							}
						}
					}
					model[req.key] = ip
				}
			} else {
				dr := &rpc.DelNetworkRequest{ClientVersion: req.version, K8S_POD_NAMESPACE: req.ns, K8S_POD_NAME: req.name,
					ContainerID: req.key.ContainerID, IfName: req.key.IfName, NetworkName: req.key.NetworkName, Reason: "PodDeleted"}
				var reply *rpc.DelNetworkReply
				var err error
				if viaGRPC {
					reply, err = c.DelNetwork(ctx, dr)
				} else {
					reply, err = h.DelNetwork(ctx, dr)
				}
				switch {
				case badUTF8:
					if err == nil {
						t.Fatalf("%s: a request with invalid UTF-8 reached the handler", step)
					}
				case req.version != fzVersion:
					fzWantStatus(t, step, err, codes.FailedPrecondition, "wrong client version")
				case !isHeld:
					fzWantStatus(t, step, err, codes.NotFound, datastore.ErrUnknownPod.Error())
				case err != nil || !reply.Success:
					t.Fatalf("%s: Del of a held key: %v %v", step, reply, err)
				default:
					if ip := fzCheckMetadata(t, step, reply.IPAllocationMetadata, mode == 1); ip != held {
						t.Fatalf("%s: Del released %s, the key held %s", step, ip, held)
					}
					delete(model, req.key)
				}
			}
			fzCheckStore(t, step, d, model)
		}
	})
}

// fzVersion is the daemons' version; a request carries it or another.
const fzVersion = "v-fuzz"

// fzStartDaemon starts a daemon on a t3.medium (15 IPv4 pod addresses, so
// an input can exhaust the pool) or, in IPv6 mode, on its delegated
// prefix. Placement sends a pod whose name starts with a digit d to device
// d%5: devices 3 and 4 do not exist, and a full device falls back.
func fzStartDaemon(tb testing.TB, ipv6 bool) *Daemon {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ipamd-fuzz")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	inv, err := memory.New("t3.medium")
	if err != nil {
		tb.Fatal(err)
	}
	d, err := New(Config{SocketPath: filepath.Join(dir, "ipamd.sock"), Inventory: inv, IPv6: ipv6,
		Version: fzVersion, RejectVersionMismatch: true},
		WithPlacement(func(_, name string) (int, bool) {
			if name == "" || name[0] < '0' || name[0] > '9' {
				return 0, false
			}
			return int(name[0]-'0') % 5, true
		}))
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(d.Stop)
	if st := d.store.Stats(); (ipv6 && st.TotalIPv6 == 0) || (!ipv6 && st.Total == 0) {
		tb.Fatalf("the daemon has no pool: %+v", st)
	}
	return d
}

func fzWantStatus(t *testing.T, step string, err error, code codes.Code, msg string) {
	t.Helper()
	if st, _ := status.FromError(err); err == nil || st.Code() != code || st.Message() != msg {
		t.Fatalf("%s: error %v, want %s %q", step, err, code, msg)
	}
}

// fzCheckMetadata: one address of the daemon's family, with the table of
// its device, and returns it.
func fzCheckMetadata(t *testing.T, step string, md []*rpc.IPAllocationMetadata, ipv6 bool) netip.Addr {
	t.Helper()
	if len(md) != 1 {
		t.Fatalf("%s: %d addresses in the reply", step, len(md))
	}
	m := md[0]
	text := m.IPv4Addr
	if ipv6 {
		text = m.IPv6Addr
	}
	ip, err := netip.ParseAddr(text)
	if err != nil || ip.Is4() == ipv6 || (m.IPv4Addr != "" && m.IPv6Addr != "") {
		t.Fatalf("%s: reply %v is not one address of the daemon's family", step, m)
	}
	if int(m.RouteTableId) != datastore.RouteTable(int(m.DeviceNumber)) || m.DeviceNumber < 0 {
		t.Fatalf("%s: device %d with table %d", step, m.DeviceNumber, m.RouteTableId)
	}
	return ip
}

// fzCheckStore: the datastore's invariants, and its allocations are the
// model's.
func fzCheckStore(t *testing.T, step string, d *Daemon, model map[datastore.Key]netip.Addr) {
	t.Helper()
	allocs := d.store.Allocations()
	if st := d.store.Stats(); st.Assigned != len(allocs) {
		t.Fatalf("%s: Stats().Assigned %d, %d allocations", step, st.Assigned, len(allocs))
	}
	if len(allocs) != len(model) {
		t.Fatalf("%s: %d allocations, want %d: %v", step, len(allocs), len(model), allocs)
	}
	byIP := map[netip.Addr]datastore.Key{}
	for _, a := range allocs {
		if k, dup := byIP[a.IP]; dup {
			t.Fatalf("%s: %s held by %s and %s", step, a.IP, fzKey(k), fzKey(a.Key))
		}
		byIP[a.IP] = a.Key
		if !d.store.IsPodAddress(a.IP) {
			t.Fatalf("%s: %s holds %s, not a pool address", step, fzKey(a.Key), a.IP)
		}
		if !fzComplete(a.Key) || a.Key.Recovered() {
			t.Fatalf("%s: incomplete or reserved key %s holds %s", step, fzKey(a.Key), a.IP)
		}
		if want, ok := model[a.Key]; !ok || want != a.IP {
			t.Fatalf("%s: %s holds %s, want %s (held: %v)", step, fzKey(a.Key), a.IP, want, ok)
		}
		if got, ok := d.store.Lookup(a.Key); !ok || got.IP != a.IP {
			t.Fatalf("%s: Lookup(%s) = %v %v, Allocations says %s", step, fzKey(a.Key), got.IP, ok, a.IP)
		}
		// The reconciler names a holder by keyID and releases it by
		// parsing that back: an allocation it cannot name is one it can
		// never reclaim.
		if k, ok := parseKeyID(keyID(a.Key)); !ok || k != a.Key {
			t.Fatalf("%s: the reconciler cannot release %s: its holder id %q parses to %s (ok %v)", step, fzKey(a.Key), keyID(a.Key), fzKey(k), ok)
		}
	}
}

func fzKey(k datastore.Key) string {
	return fmt.Sprintf("%q/%q/%q", k.NetworkName, k.ContainerID, k.IfName)
}

// fzComplete: the CNI spec's attachment key has all three parts.
// fzComplete: every key field set and free of control characters (a NUL
// would make two keys print alike; no CNI name has one).
func fzComplete(k datastore.Key) bool {
	for _, f := range []string{k.NetworkName, k.ContainerID, k.IfName} {
		if f == "" || strings.ContainsFunc(f, unicode.IsControl) {
			return false
		}
	}
	return true
}

// fzRequest is one decoded request.
type fzRequest struct {
	add, grpc, multiNIC bool
	key                 datastore.Key
	ns, name, version   string
}

func (q *fzRequest) String() string {
	verb := "Del"
	if q.add {
		verb = "Add"
	}
	via := "handler"
	if q.grpc {
		via = "gRPC"
	}
	return fmt.Sprintf("%s via %s key %s pod %q/%q version %q multiNIC %v", verb, via,
		fzKey(q.key), q.ns, q.name, q.version, q.multiNIC)
}

func (q *fzRequest) strings() []*string {
	return []*string{&q.key.NetworkName, &q.key.ContainerID, &q.key.IfName, &q.ns, &q.name, &q.version}
}

func (q *fzRequest) validUTF8() bool {
	for _, s := range q.strings() {
		if !utf8.ValidString(*s) {
			return false
		}
	}
	return true
}

func (q *fzRequest) sanitize() {
	for _, s := range q.strings() {
		*s = strings.ToValidUTF8(*s, "\uFFFD")
	}
}

// fzReader decodes requests. Most fields come from small pools so that
// keys repeat (retries, double deletes, a Del of a key never added); pool
// index 3 (or 7) reads a free-form string from the input instead.
type fzReader struct{ b []byte }

func (r *fzReader) more() bool { return len(r.b) > 0 }

func (r *fzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// free reads a length byte (at most 63) and that many bytes.
func (r *fzReader) free() string {
	n := int(r.byte() & 63)
	n = min(n, len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

var (
	fzNetworks   = []string{"aws-cni", "", datastore.RecoveredNetwork}
	fzContainers = []string{"c0", "c1", "c2", "c3", "c4", "c5", ""}
	fzIfNames    = []string{"eth0", "eth1", ""}
	fzPodNames   = []string{"web-0", "1-web", "2-web", "4-web", "", "api", "3-web"}
)

func (r *fzReader) pick(pool []string, i int) string {
	if i >= len(pool) {
		return r.free()
	}
	return pool[i]
}

// request decodes one request from an opcode byte:
//
//	bit 0      Del (1) or Add (0)
//	bit 7      over gRPC (1) or to the handler directly (0)
//	bits 1-3   container ID (0-5 fixed, 6 empty, 7 free-form)
//	bits 4-6   pod name (0-6 fixed, 7 free-form)
//
// with network aws-cni, interface eth0 and our version. An opcode whose
// bits 1-6 are all set (0x7e) reads two more bytes instead: network (bits
// 0-1: aws-cni, empty, the recovered-allocation network, free-form),
// interface (bits 2-3: eth0, eth1, empty, free-form), another client
// version (bit 4), multi-NIC (bit 5); then container ID (bits 0-2) and
// pod name (bits 3-5).
func (r *fzReader) request() *fzRequest {
	op := r.byte()
	q := &fzRequest{add: op&1 == 0, grpc: op&0x80 != 0, version: fzVersion}
	net, ifn, cid, pod := 0, 0, int(op>>1)&7, int(op>>4)&7
	if op&0x7e == 0x7e {
		a, b := r.byte(), r.byte()
		net, ifn = int(a&3), int(a>>2)&3
		if a&0x10 != 0 {
			q.version = "v-other"
		}
		q.multiNIC = a&0x20 != 0
		cid, pod = int(b&7), int(b>>3)&7
	}
	q.key = datastore.Key{NetworkName: r.pick(fzNetworks, net), ContainerID: r.pick(fzContainers, cid), IfName: r.pick(fzIfNames, ifn)}
	q.ns = "default"
	q.name = r.pick(fzPodNames, pod)
	return q
}
