package linux

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// TestDifferential measures the model's fidelity: random sequences of
// operations (internal/testsupport/ktest.Generate: namespaces, veths, bridges, links
// up and deleted, addresses, routes and rules in several tables, both
// families, duplicates and deletes of missing objects on purpose,
// lookups) run on the real kernel, in namespaces of their own, and on
// the model; after every op the outcomes (errno, or where a lookup goes)
// and the normalised dumps of every namespace must be equal. A
// disagreement is reported with its seed and the shortest sequence that
// still shows it, op by op with both outcomes.
//
// VPCCNI_DIFF_SEQS raises the number of sequences (a soak),
// VPCCNI_DIFF_OPS their length; VPCCNI_DIFF_SEED replays one seed (or,
// with VPCCNI_DIFF_SEQS, is the first of as many).
func TestDifferential(t *testing.T) {
	testns.Require(t)
	seqs, n := envInt(t, "VPCCNI_DIFF_SEQS", 16), envInt(t, "VPCCNI_DIFF_OPS", 100)
	first := uint64(1)
	if s := os.Getenv("VPCCNI_DIFF_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		must(t, err)
		first = v
		if os.Getenv("VPCCNI_DIFF_SEQS") == "" {
			seqs = 1
		}
	}
	var opt ktest.GenOptions
	var why string
	if opt.Vlan, why = testns.VlanSupported(); !opt.Vlan {
		// A subtest of its own, so the summary lists what was left out.
		t.Run("vlan-ops", func(t *testing.T) {
			t.Skip("VLAN links unavailable, the sequences have no VLAN ops: " + why)
		})
	}
	pair := ktest.Pair{NameA: "linux", NameB: "model", New: newDiffWorlds}
	start := time.Now()
	compared, bad := 0, 0
	outcomes := map[string]int{}
	// One sequence at a time: run side by side (tried) they are slower,
	// as link creation and deletion serialise on the kernel's rtnl lock
	// and wait for RCU grace periods under it.
	for seed := first; seed < first+uint64(seqs); seed++ {
		res, shrunk, err := pair.Reduce(ktest.Preamble(), ktest.Generate(seed, n, opt))
		must(t, err)
		compared += res.Compared
		for k, v := range res.Outcomes {
			outcomes[k] += v
		}
		if res.First == nil {
			continue
		}
		bad++
		msg := fmt.Sprintf("seed %d: linux and the model disagree at %s", seed, res.First)
		if shrunk != nil {
			msg += fmt.Sprintf("\nshortest sequence (%d ops, preamble included; replay with VPCCNI_DIFF_SEED=%d):\n%s",
				len(shrunk.Transcript), seed, strings.Join(shrunk.Transcript, "\n"))
			if shrunk.First != nil {
				msg += "\n  => " + shrunk.First.String()
			}
		}
		t.Error(msg)
	}
	summary := fmt.Sprintf("%d sequences x %d ops, %d ops compared, %d disagreements", seqs, n, compared, bad)
	t.Logf("differential: %s in %v; outcomes by op kind:\n%s", summary, time.Since(start).Round(time.Millisecond),
		outcomeTable(outcomes))
	// The counts in a subtest's name, so they show on the summary line
	// of `go test -v`.
	t.Run(strings.NewReplacer(" ", "_", ",", "").Replace(summary), func(t *testing.T) {})
}

// outcomeTable prints "kind: outcome count, ..." one kind a line.
func outcomeTable(m map[string]int) string {
	byKind := map[string][]string{}
	for k, v := range m {
		kind, class, _ := strings.Cut(k, ": ")
		byKind[kind] = append(byKind[kind], fmt.Sprintf("%s %d", strings.TrimPrefix(class, "errno "), v))
	}
	var lines []string
	for kind, cs := range byKind {
		sort.Strings(cs)
		lines = append(lines, fmt.Sprintf("  %-13s %s", kind+":", strings.Join(cs, ", ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func envInt(t *testing.T, key string, def int) int {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, s)
	}
	return v
}

func newDiffWorlds() (ktest.World, ktest.World, error) {
	return &realDiffWorld{ns: map[string]*testns.NS{}, h: map[string]*Handle{}},
		&modelDiffWorld{k: model.New(), h: map[string]kernel.API{}}, nil
}

// initNS is what AddNS does to a new namespace on both: IPv6 on, no DAD
// on new links (the model has none), lo up.
func initNS(h kernel.API) error {
	return errors.Join(h.SysctlSet("net/ipv6/conf/all/disable_ipv6", "0"),
		h.SysctlSet("net/ipv6/conf/default/accept_dad", "0"), h.LinkSetUp("lo"))
}

type modelDiffWorld struct {
	k *model.Kernel
	h map[string]kernel.API
}

func (w *modelDiffWorld) API(ns string) kernel.API { return w.h[ns] }

func (w *modelDiffWorld) AddNS(ns string) error {
	if err := w.k.AddNamespace(ns); err != nil {
		return err
	}
	h, err := w.k.Open(ns)
	if err != nil {
		return err
	}
	w.h[ns] = h
	return initNS(h)
}

func (w *modelDiffWorld) DelNS(ns string) error {
	if err := w.k.DeleteNamespace(ns); err != nil {
		return err
	}
	delete(w.h, ns)
	return nil
}

func (w *modelDiffWorld) Live() []string { return w.k.Namespaces() }
func (w *modelDiffWorld) Settle() error  { return nil }
func (w *modelDiffWorld) Close()         {}

// realDiffWorld is namespaces made by testns (never the machine's own).
type realDiffWorld struct {
	ns map[string]*testns.NS
	h  map[string]*Handle
	// going are links of live namespaces whose veth peer was in a deleted
	// namespace: the kernel deletes them when it frees the namespace, from
	// a work queue, a moment after the namespace is closed.
	going []goingLink
}

type goingLink struct {
	ns    string
	index int
}

func (w *realDiffWorld) API(ns string) kernel.API {
	if h, ok := w.h[ns]; ok {
		return h
	}
	return nil
}

func (w *realDiffWorld) AddNS(ns string) error {
	if _, ok := w.ns[ns]; ok {
		return fmt.Errorf("namespace %s: %w", ns, syscall.EEXIST)
	}
	n, err := testns.New("vpccni-d")
	if err != nil {
		return err
	}
	a, err := Opener{}.Open(n.Path())
	if err != nil {
		n.Close()
		return err
	}
	w.ns[ns], w.h[ns] = n, a.(*Handle)
	return initNS(a)
}

// DelNS closes the handle and the namespace. Before that it notes the
// links of the other namespaces whose veth peer is in it (IFLA_LINK_NETNSID
// equal to the namespace's id as seen from theirs), for Settle to wait on.
func (w *realDiffWorld) DelNS(ns string) error {
	h, ok := w.h[ns]
	if !ok {
		return fmt.Errorf("namespace %s: %w", ns, kernel.ErrNamespaceGone)
	}
	for name, o := range w.h {
		if name == ns {
			continue
		}
		links, err := o.nl.LinkList() // assigns the peers' namespace ids
		if err != nil {
			return err
		}
		id, err := o.nl.GetNetNsIdByFd(int(h.ns))
		if err != nil {
			return err
		}
		for _, l := range links {
			if id >= 0 && l.Attrs().NetNsID == id {
				w.going = append(w.going, goingLink{name, l.Attrs().Index})
			}
		}
	}
	err := errors.Join(h.Close(), w.ns[ns].Close())
	delete(w.h, ns)
	delete(w.ns, ns)
	return err
}

func (w *realDiffWorld) Live() []string {
	var out []string
	for ns := range w.h {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// Settle waits for the links of deleted namespaces' veth pairs to go, and
// for every IPv6 address to be usable (not tentative, its local route
// in): the kernel finishes both from work queues.
func (w *realDiffWorld) Settle() error {
	deadline := time.Now().Add(5 * time.Second)
	for len(w.going) > 0 {
		g := w.going[0]
		h, ok := w.h[g.ns]
		if _, err := h.LinkByIndex(g.index); !ok || kernel.IsNotFound(err) {
			w.going = w.going[1:]
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: link %d of a deleted namespace's veth pair is still there after 5s", g.ns, g.index)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, ns := range w.Live() {
		for {
			ok, err := ipv6Usable(w.h[ns])
			if err != nil || ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: IPv6 addresses still tentative or without their local route after 5s", ns)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

func ipv6Usable(h kernel.API) (bool, error) {
	as, err := h.AddrList(0, kernel.FamilyV6)
	if err != nil {
		return false, err
	}
	local, err := h.RouteList(kernel.FamilyV6, kernel.TableLocal)
	if err != nil {
		return false, err
	}
	for _, a := range as {
		if a.Flags&kernel.AddrFlagTentative != 0 {
			return false, nil
		}
		found := false
		for _, r := range local {
			found = found || (r.Dst != nil && r.Dst.IP.Equal(a.IPNet.IP))
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

func (w *realDiffWorld) Close() {
	for ns := range w.h {
		w.h[ns].Close()
		w.ns[ns].Close()
	}
}
