package ktest

import (
	"fmt"
	"strings"

	"github.com/vpccni/vpccni/kernel"
)

// Pair makes two fresh, empty worlds to compare: A is the reference (the
// real kernel), B the one measured against it (the model).
type Pair struct {
	NameA, NameB string
	New          func() (a, b World, err error)
}

// Disagreement is the first point of a sequence where the two worlds
// differ.
type Disagreement struct {
	Step   int    // index of the op after which they differ
	Kind   string // "outcome", "dump" or "settle"
	Detail string
}

func (d *Disagreement) String() string {
	return fmt.Sprintf("op %d, %s: %s", d.Step+1, d.Kind, d.Detail)
}

// Result is what a run of a sequence on a pair found.
type Result struct {
	Compared int           // ops run on both and compared
	First    *Disagreement // nil when the worlds agreed all along
	// Transcript is every op run with both outcomes, one line each.
	Transcript []string
	// Outcomes counts A's outcomes by op kind and class ("rule add: errno
	// EEXIST"; a lookup that answered is "route get: ok"), to show what a
	// run covered.
	Outcomes map[string]int
}

// Run runs ops on two fresh worlds, stopping at the first disagreement.
// After each op it compares the outcomes, then lets A settle and compares
// the normalised dumps (kernel.Snapshot) of every live namespace. The
// error is the harness's own (a world that could not be made).
func (p Pair) Run(ops []Op) (Result, error) {
	a, b, err := p.New()
	if err != nil {
		return Result{}, err
	}
	defer a.Close()
	defer b.Close()
	res := Result{Outcomes: map[string]int{}}
	for i, op := range ops {
		oa, ob := op.Do(a), op.Do(b)
		res.Compared++
		class := oa
		if !strings.HasPrefix(oa, "errno ") {
			class = strings.SplitN(oa, ",", 2)[0] // "ok", or a lookup's answer
			if _, ok := op.(Get); ok {
				class = "ok"
			}
		}
		res.Outcomes[op.Kind()+": "+class]++
		mark := ""
		if oa != ob {
			mark = "   <-- differ"
		}
		res.Transcript = append(res.Transcript, fmt.Sprintf("%3d. %s\n       %s: %s | %s: %s%s", i+1, op, p.NameA, oa, p.NameB, ob, mark))
		if oa != ob {
			res.First = &Disagreement{Step: i, Kind: "outcome", Detail: fmt.Sprintf("%s: %s, %s: %s", p.NameA, oa, p.NameB, ob)}
			return res, nil
		}
		if d := p.compareDumps(a, b); d != nil {
			d.Step = i
			res.First = d
			return res, nil
		}
	}
	return res, nil
}

func (p Pair) compareDumps(a, b World) *Disagreement {
	for _, w := range []World{a, b} {
		if err := w.Settle(); err != nil {
			return &Disagreement{Kind: "settle", Detail: err.Error()}
		}
	}
	la, lb := a.Live(), b.Live()
	if strings.Join(la, " ") != strings.Join(lb, " ") {
		return &Disagreement{Kind: "dump", Detail: fmt.Sprintf("namespaces: %s %v, %s %v", p.NameA, la, p.NameB, lb)}
	}
	for _, ns := range la {
		da, errA := dump(a, ns)
		db, errB := dump(b, ns)
		if errA != nil || errB != nil {
			return &Disagreement{Kind: "dump", Detail: fmt.Sprintf("%s: dump failed: %s: %v, %s: %v", ns, p.NameA, errA, p.NameB, errB)}
		}
		onlyA, onlyB := Minus(da, db), Minus(db, da)
		if len(onlyA) == 0 && len(onlyB) == 0 {
			continue
		}
		return &Disagreement{Kind: "dump", Detail: fmt.Sprintf("namespace %s\n         only on %s:\n           %s\n         only on %s:\n           %s",
			ns, p.NameA, strings.Join(onlyA, "\n           "), p.NameB, strings.Join(onlyB, "\n           "))}
	}
	return nil
}

// dump is a namespace's kernel.Snapshot, less the "peer NAME" that
// Snapshot adds to a veth whose peer it thinks is in the same namespace.
// It cannot know: kernel.Link gives the peer's index in the peer's
// namespace and not which namespace that is, so two veths whose peers are
// elsewhere can point at each other's indexes by chance, and the chances
// differ because Linux and the model number links differently. Veth
// pairs still show, as links that come and go together.
func dump(w World, ns string) ([]string, error) {
	api := w.API(ns)
	if api == nil {
		return nil, fmt.Errorf("namespace %s listed live but has no handle", ns)
	}
	s, err := kernel.Snapshot(api)
	lines := s.Lines()
	for i, l := range lines {
		if j := strings.Index(l, " peer "); strings.HasPrefix(l, "link ") && j >= 0 {
			lines[i] = l[:j]
		}
	}
	return lines, err
}

// Minus is kernel.Minus (a multiset difference of dump lines).
var Minus = kernel.Minus

// Shrink returns the shortest sequence it finds that still shows the
// disagreement: it drops ops one at a time, from the last but one
// backwards, keeping each drop after which still holds, and repeats until
// a pass drops nothing. The last op, the one that shows the disagreement,
// stays. An op whose prerequisite was dropped simply errors; the worlds
// must agree on that too, so still decides with them.
func Shrink(ops []Op, still func([]Op) bool) []Op {
	cur := append([]Op(nil), ops...)
	for dropped := true; dropped; {
		dropped = false
		for i := len(cur) - 2; i >= 0; i-- {
			cand := append(append([]Op(nil), cur[:i]...), cur[i+1:]...)
			if still(cand) {
				cur, dropped = cand, true
			}
		}
	}
	return cur
}

// Reduce runs ops (after the fixed preamble, which is never dropped) and,
// if the worlds disagree, cuts the sequence after the disagreeing op and
// shrinks it to the shortest that still disagrees the same way: at its
// last op, of the same kind. It returns the first run's result and the
// shrunk sequence's, whose Transcript is the reproduction (nil when the
// worlds agreed).
func (p Pair) Reduce(preamble, ops []Op) (first Result, shrunk *Result, err error) {
	first, err = p.Run(append(append([]Op(nil), preamble...), ops...))
	if err != nil || first.First == nil {
		return first, nil, err
	}
	d := first.First
	if d.Step < len(preamble) {
		return first, &first, nil // the preamble itself disagrees: nothing to shrink
	}
	var runErr error
	still := func(cand []Op) bool {
		r, err := p.Run(append(append([]Op(nil), preamble...), cand...))
		if err != nil {
			runErr = err
			return false
		}
		return r.First != nil && r.First.Kind == d.Kind && r.First.Step == len(preamble)+len(cand)-1
	}
	min := Shrink(ops[:d.Step-len(preamble)+1], still)
	if runErr != nil {
		return first, nil, runErr
	}
	last, err := p.Run(append(append([]Op(nil), preamble...), min...))
	return first, &last, err
}
