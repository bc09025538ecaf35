package failpoint

import (
	"errors"
	"fmt"
	"testing"
)

var (
	testA = Register("test/a", "a point for tests")
	testB = Register("test/b", "another")
)

func TestArmAndHit(t *testing.T) {
	var s Set
	if err := s.Arm(testA, Crash, 2); err != nil {
		t.Fatal(err)
	}
	if f := s.Hit(testA); f != nil {
		t.Fatalf("first hit fired: %v", f)
	}
	f := s.Hit(testA)
	if f == nil || f.Action != Crash || f.Name != testA {
		t.Fatalf("second hit: %v", f)
	}
	if f := s.Hit(testA); f != nil {
		t.Fatal("fired again after its occurrence")
	}
	s.Arm(testB, Error, 0)
	for range 3 {
		if s.Hit(testB) == nil {
			t.Fatal("occurrence 0 must fire every time")
		}
	}
	if h := s.Hits(); h[testA] != 3 || h[testB] != 3 {
		t.Fatalf("hits %v", h)
	}
	s.Disarm()
	if s.Hit(testB) != nil {
		t.Fatal("fired after Disarm")
	}
}

func TestNilSetNeverFires(t *testing.T) {
	var s *Set
	if s.Hit(testA) != nil || s.Hits() != nil {
		t.Fatal("a nil set fired")
	}
	s.Disarm()
}

func TestArmRejects(t *testing.T) {
	var s Set
	for _, c := range []struct {
		n Name
		a Action
		o int
	}{{"test/nope", Crash, 1}, {testA, "explode", 1}, {testA, Crash, -1}} {
		if err := s.Arm(c.n, c.a, c.o); err == nil {
			t.Errorf("armed %v", c)
		}
	}
}

func TestParse(t *testing.T) {
	s, err := Parse("test/a=hang@3, test/b=error")
	if err != nil {
		t.Fatal(err)
	}
	s.Hit(testA)
	s.Hit(testA)
	if f := s.Hit(testA); f == nil || f.Action != Hang {
		t.Fatalf("third hit of test/a: %v", f)
	}
	if f := s.Hit(testB); f == nil || f.Action != Error {
		t.Fatalf("test/b: %v", f)
	}
	for _, bad := range []string{"test/a", "test/a=crash@x", "test/zzz=crash"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestFaultInChain(t *testing.T) {
	err := fmt.Errorf("del-rule-to-pod: %w", &Fault{Name: testA, Action: Error})
	if !Is(err, Error) || Is(err, Crash) || Is(errors.New("x"), Error) {
		t.Fatal("Is")
	}
}

func TestRegistry(t *testing.T) {
	var found int
	for _, p := range All() {
		if p.Name == testA || p.Name == testB {
			found++
		}
	}
	if found != 2 {
		t.Fatal("registered points not listed")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second registration did not panic")
		}
	}()
	Register("test/a", "again")
}

// TestProductionBuildIgnoresEnv: without the failpoints tag the
// environment arms nothing.
func TestProductionBuildIgnoresEnv(t *testing.T) {
	t.Setenv(EnvVar, "test/a=crash")
	s, err := FromEnv()
	if Enabled {
		if err != nil || s == nil {
			t.Fatalf("failpoints build: %v %v", s, err)
		}
		return
	}
	if s != nil || err != nil {
		t.Fatalf("a production build armed %v from the environment (%v)", s, err)
	}
}

func TestTrigger(t *testing.T) {
	var s Set
	s.Arm(testA, Error, 1)
	if err := s.Trigger(testA); !Is(err, Error) {
		t.Fatalf("error action: %v", err)
	}
	s.Arm(testA, Crash, 1)
	func() {
		defer func() {
			st, ok := recover().(Stopped)
			if !ok || st.Fault.Action != Crash {
				t.Fatalf("crash did not stop: %v", st)
			}
		}()
		s.Trigger(testA)
		t.Fatal("ran past a crash")
	}()
	var stopped *Fault
	s.OnStop = func(f *Fault) { stopped = f; panic("stop") }
	s.Arm(testB, Hang, 1)
	func() {
		defer func() { recover() }()
		s.Trigger(testB)
	}()
	if stopped == nil || stopped.Action != Hang {
		t.Fatal("OnStop not called for a hang")
	}
	var none *Set
	if none.Trigger(testA) != nil {
		t.Fatal("nil set triggered")
	}
}

// TestSkip: a skipped point returns its Skip fault on every hit, counted
// like any hit; Skip is no action a scenario or the environment arms.
func TestSkip(t *testing.T) {
	var s Set
	if err := s.Skip(testA); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Trigger(testA); !Is(err, Skip) {
			t.Fatalf("hit %d: %v, want a skip", i+1, err)
		}
	}
	if err := s.Trigger(testB); err != nil {
		t.Fatalf("an unskipped point: %v", err)
	}
	if n := s.Hits()[testA]; n != 3 {
		t.Fatalf("hits %d, want 3", n)
	}
	if err := s.Skip("test/none"); err == nil {
		t.Fatal("skipped an unknown point")
	}
	if err := s.Arm(testA, Skip, 1); err == nil {
		t.Fatal("Arm took skip, which is not one of Actions")
	}
	if _, err := Parse("test/a=skip"); err == nil {
		t.Fatal("Parse took skip")
	}
}
