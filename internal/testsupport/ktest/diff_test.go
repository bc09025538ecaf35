package ktest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/testsupport/ktest"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/model"
)

// The differential machinery tested without root: two model worlds, one
// of them with a bug put in on purpose.

type modelWorld struct {
	k    *model.Kernel
	h    map[string]kernel.API
	wrap func(kernel.API) kernel.API
}

func newModelWorld(wrap func(kernel.API) kernel.API) *modelWorld {
	return &modelWorld{k: model.New(), h: map[string]kernel.API{}, wrap: wrap}
}

func (w *modelWorld) API(ns string) kernel.API { return w.h[ns] }

func (w *modelWorld) AddNS(ns string) error {
	if err := w.k.AddNamespace(ns); err != nil {
		return err
	}
	h, err := w.k.Open(ns)
	if err != nil {
		return err
	}
	if w.wrap != nil {
		h = w.wrap(h)
	}
	w.h[ns] = h
	return errors.Join(h.SysctlSet("net/ipv6/conf/default/accept_dad", "0"), h.LinkSetUp("lo"))
}

func (w *modelWorld) DelNS(ns string) error {
	delete(w.h, ns)
	return w.k.DeleteNamespace(ns)
}

func (w *modelWorld) Live() []string { return w.k.Namespaces() }
func (w *modelWorld) Settle() error  { return nil }
func (w *modelWorld) Close()         {}

// lenient has the bug: deleting a rule that is not there succeeds.
type lenient struct{ kernel.API }

func (l lenient) RuleDel(r kernel.Rule) error {
	if err := l.API.RuleDel(r); !kernel.IsNotFound(err) {
		return err
	}
	return nil
}

// AddVeth unwraps the peer's handle: the model wants one of its own.
func (l lenient) AddVeth(s kernel.VethSpec) error {
	if p, ok := s.PeerNamespace.(lenient); ok {
		s.PeerNamespace = p.API
	}
	return l.API.AddVeth(s)
}

func buggy(h kernel.API) kernel.API { return lenient{h} }

func TestGenerateIsReproducible(t *testing.T) {
	str := func(ops []ktest.Op) string {
		var b strings.Builder
		for _, op := range ops {
			fmt.Fprintln(&b, op)
		}
		return b.String()
	}
	a, b := str(ktest.Generate(7, 200, ktest.GenOptions{})), str(ktest.Generate(7, 200, ktest.GenOptions{}))
	if a != b {
		t.Fatal("the same seed gave two sequences")
	}
	if a == str(ktest.Generate(8, 200, ktest.GenOptions{})) {
		t.Fatal("two seeds gave the same sequence")
	}
	if strings.Contains(a, "vlan add") {
		t.Fatal("VLAN ops without GenOptions.Vlan")
	}
	if !strings.Contains(str(ktest.Generate(7, 400, ktest.GenOptions{Vlan: true})), "vlan add") {
		t.Fatal("no VLAN ops with GenOptions.Vlan")
	}
}

type named string

func (n named) Do(ktest.World) string { return "ok" }
func (n named) String() string        { return string(n) }
func (n named) Kind() string          { return "named" }

func TestShrinkKeepsWhatTheFailureNeeds(t *testing.T) {
	var ops []ktest.Op
	for i := range 12 {
		ops = append(ops, named(fmt.Sprint(i)))
	}
	needs := func(cand []ktest.Op) bool {
		var s []string
		for _, op := range cand {
			s = append(s, op.String())
		}
		j := strings.Join(s, " ")
		return strings.Contains(j, "2 ") && strings.Contains(j, " 7 ") && strings.HasSuffix(j, " 11")
	}
	got := ktest.Shrink(ops, needs)
	if fmt.Sprint(got) != "[2 7 11]" {
		t.Fatalf("shrunk to %v, want [2 7 11]", got)
	}
}

// TestPairFindsTheBug: identical worlds agree on every sequence; with
// the bug, a sequence that deletes a missing rule disagrees, and the
// shrunk sequence is the preamble and that one delete.
func TestPairFindsTheBug(t *testing.T) {
	same := ktest.Pair{NameA: "a", NameB: "b", New: func() (ktest.World, ktest.World, error) {
		return newModelWorld(nil), newModelWorld(nil), nil
	}}
	for seed := uint64(1); seed <= 5; seed++ {
		res, _, err := same.Reduce(ktest.Preamble(), ktest.Generate(seed, 100, ktest.GenOptions{Vlan: true}))
		if err != nil || res.First != nil {
			t.Fatalf("seed %d: %v %v", seed, err, res.First)
		}
		if res.Compared != len(ktest.Preamble())+100 {
			t.Fatalf("compared %d ops", res.Compared)
		}
	}
	pair := ktest.Pair{NameA: "model", NameB: "buggy", New: func() (ktest.World, ktest.World, error) {
		return newModelWorld(nil), newModelWorld(buggy), nil
	}}
	for seed := uint64(1); ; seed++ {
		if seed > 50 {
			t.Fatal("no sequence found the bug")
		}
		res, shrunk, err := pair.Reduce(ktest.Preamble(), ktest.Generate(seed, 100, ktest.GenOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		if res.First == nil {
			continue
		}
		if shrunk == nil || shrunk.First == nil || len(shrunk.Transcript) != len(ktest.Preamble())+1 {
			t.Fatalf("seed %d: not shrunk to one op: %+v", seed, shrunk)
		}
		last := shrunk.Transcript[len(shrunk.Transcript)-1]
		if !strings.Contains(last, "rule del") || !strings.Contains(last, "model: errno ENOENT | buggy: ok") {
			t.Fatalf("seed %d: shrunk to\n%s", seed, strings.Join(shrunk.Transcript, "\n"))
		}
		return
	}
}
