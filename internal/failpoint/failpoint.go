// Package failpoint names the points where vpccni's components can die,
// hang or fail, so the harness can make them do so at a chosen step.
//
// Every point is registered once, at package init, with Register; All
// lists them, so the scenario explorer enumerates the fault space from the
// code itself and nothing is kept in two places. A point does something
// only when a Set armed for it is handed to the component: the plugin, the
// driver and ipamd take an optional *Set, and a nil Set costs one pointer
// comparison. The production binaries are built without a Set: nothing in
// them reads the environment to arm one, except in a build with the
// "failpoints" tag (FromEnv), which only the real-kernel suite makes.
package failpoint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Name is a registered failpoint, "component/where".
type Name string

// Point describes a failpoint.
type Point struct {
	Name Name   `json:"name"`
	Desc string `json:"description"`
}

var (
	regMu    sync.Mutex
	registry = map[Name]string{}
)

// Register names a failpoint. Called from package vars, so a point exists
// whenever its package is linked; registering a name twice panics (two
// places would claim one point).
func Register(name, desc string) Name {
	regMu.Lock()
	defer regMu.Unlock()
	n := Name(name)
	if _, dup := registry[n]; dup {
		panic("failpoint: " + name + " registered twice")
	}
	registry[n] = desc
	return n
}

// All lists the registered failpoints, sorted by name.
func All() []Point {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]Point, 0, len(registry))
	for n, d := range registry {
		out = append(out, Point{Name: n, Desc: d})
	}
	slices.SortFunc(out, func(a, b Point) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out
}

// Known reports whether name is registered.
func Known(name Name) bool {
	regMu.Lock()
	defer regMu.Unlock()
	_, ok := registry[name]
	return ok
}

// Action is what an armed failpoint does.
type Action string

const (
	// Crash: the process dies at the point. The binary exits at once;
	// in-process, the component stops there (the plugin unwinds to the
	// harness's runtime, ipamd is killed) and runs nothing after it.
	Crash Action = "crash"
	// Error: the step fails with an error, as a kernel or disk error would.
	Error Action = "error"
	// Hang: the component stops answering: the plugin until the runtime
	// kills it, ipamd until the caller's deadline.
	Hang Action = "hang"
	// Skip: the step is left out, as if it did not exist. Not one of
	// Actions (no scenario file, environment or explorer arms it): a test
	// arms it with Set.Skip to remove one of the driver's steps and watch
	// the checks notice. Only the driver's step points honour it.
	Skip Action = "skip"
)

// Actions lists the actions, for enumeration and validation.
var Actions = []Action{Crash, Error, Hang}

// Fault is what Hit returns at an armed point.
type Fault struct {
	Name   Name
	Action Action
}

func (f *Fault) Error() string { return fmt.Sprintf("failpoint %s: %s", f.Name, f.Action) }

// As returns the Fault in err's chain, if any.
func As(err error) (*Fault, bool) {
	var f *Fault
	ok := errors.As(err, &f)
	return f, ok
}

// Is reports whether err carries a Fault with the action.
func Is(err error, a Action) bool {
	f, ok := As(err)
	return ok && f.Action == a
}

// arm is one armed point: the action fires on the occurrence-th hit after
// arming (0: on every hit).
type arm struct {
	action     Action
	occurrence int
	seen       int
}

// Set is the armed failpoints of one run, and a count of every hit. The
// zero value is ready; a nil *Set is valid and never fires.
type Set struct {
	mu   sync.Mutex
	arms map[Name]*arm
	hits map[Name]int
	// OnStop is what Trigger does for a crash or a hang; it must not
	// return. Nil panics with a Stopped, which the in-process harness
	// recovers as the process's death; a binary exits or blocks.
	OnStop func(*Fault)
}

// Stopped is the panic value of a crash or hang in-process.
type Stopped struct{ Fault *Fault }

// Trigger is Hit for a point inside a process that can die there (the
// plugin and its driver): a crash or hang stops the process (OnStop), an
// error is returned for the step to fail with, a skip for the step to be
// left out (Is(err, Skip)).
func (s *Set) Trigger(name Name) error {
	f := s.Hit(name)
	if f == nil {
		return nil
	}
	if f.Action == Error || f.Action == Skip {
		return f
	}
	if s.OnStop != nil {
		s.OnStop(f)
	}
	panic(Stopped{Fault: f})
}

// Arm makes name do action on its occurrence-th hit from now (1 is the
// next; 0 is every hit). An unknown name or action is an error.
func (s *Set) Arm(name Name, action Action, occurrence int) error {
	if !Known(name) {
		return fmt.Errorf("failpoint: unknown point %q", name)
	}
	if !slices.Contains(Actions, action) {
		return fmt.Errorf("failpoint: unknown action %q (want crash, error or hang)", action)
	}
	if occurrence < 0 {
		return fmt.Errorf("failpoint: occurrence %d is negative", occurrence)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arms == nil {
		s.arms = map[Name]*arm{}
	}
	s.arms[name] = &arm{action: action, occurrence: occurrence}
	return nil
}

// Skip makes name's step be left out on every hit from now (see Skip).
// An unknown name is an error.
func (s *Set) Skip(name Name) error {
	if !Known(name) {
		return fmt.Errorf("failpoint: unknown point %q", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arms == nil {
		s.arms = map[Name]*arm{}
	}
	s.arms[name] = &arm{action: Skip}
	return nil
}

// Disarm clears every armed point (hit counts stay).
func (s *Set) Disarm() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.arms = nil
	s.mu.Unlock()
}

// Hit is called at the point: it counts the hit and returns the Fault if
// the point fires now, nil otherwise.
func (s *Set) Hit(name Name) *Fault {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hits == nil {
		s.hits = map[Name]int{}
	}
	s.hits[name]++
	a, ok := s.arms[name]
	if !ok {
		return nil
	}
	a.seen++
	if a.occurrence != 0 && a.seen != a.occurrence {
		return nil
	}
	return &Fault{Name: name, Action: a.action}
}

// Hits returns how often each point was hit.
func (s *Set) Hits() map[Name]int {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Name]int, len(s.hits))
	for k, v := range s.hits {
		out[k] = v
	}
	return out
}

// Parse reads "name=action[@occurrence],…", the form FromEnv reads.
func Parse(spec string) (*Set, error) {
	s := &Set{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, rest, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint: %q: want name=action[@occurrence]", item)
		}
		action, occ, hasOcc := strings.Cut(rest, "@")
		n := 1
		if hasOcc {
			var err error
			if n, err = strconv.Atoi(occ); err != nil {
				return nil, fmt.Errorf("failpoint: %q: occurrence %q is not a number", item, occ)
			}
		}
		if err := s.Arm(Name(name), Action(action), n); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// EnvVar is the variable a "failpoints" build reads (FromEnv).
const EnvVar = "VPCCNI_FAILPOINTS"
