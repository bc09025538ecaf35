package memory

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// lowestFree is what the search hints must still find: a full scan.
func lowestFree(s *subnet) (netip.Addr, bool) {
	for i := range s.size() {
		if a := s.at(i); !s.reserved(i) && s.used[a] == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func lowestFreePrefix(s *subnet) (netip.Prefix, bool) {
	for i := 0; i+16 <= s.size(); i += 16 {
		if p := netip.PrefixFrom(s.at(i), 28); s.prefixFree(p) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// TestSubnetHintsKeepLowestFirst: random takes and give-backs of
// addresses, /28s and /80s; every take returns what a full scan would.
func TestSubnetHintsKeepLowestFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := newSubnet(netip.MustParsePrefix("10.0.4.0/23"))
	e := &eni{}
	var held []netip.Addr
	var heldPfx, heldV6 []netip.Prefix
	for step := range 20000 {
		switch op := r.IntN(6); {
		case op <= 1:
			want, ok := lowestFree(s)
			got, took := s.takeAddrs(1, e)
			if took != ok || (ok && got[0] != want) {
				t.Fatalf("step %d: takeAddrs = %v %v, lowest free %s %v", step, got, took, want, ok)
			}
			held = append(held, got...)
		case op == 2:
			want, ok := lowestFreePrefix(s)
			got, took := s.takePrefixes(1, e)
			if took != ok || (ok && got[0] != want) {
				t.Fatalf("step %d: takePrefixes = %v %v, lowest free %s %v", step, got, took, want, ok)
			}
			heldPfx = append(heldPfx, got...)
		case op == 3 && len(held) > 0:
			i := r.IntN(len(held))
			s.release(held[i])
			held = append(held[:i], held[i+1:]...)
		case op == 4 && len(heldPfx) > 0:
			i := r.IntN(len(heldPfx))
			s.markPrefix(heldPfx[i], nil)
			heldPfx = append(heldPfx[:i], heldPfx[i+1:]...)
		case op == 5:
			if len(heldV6) > 0 && r.IntN(2) == 0 {
				i := r.IntN(len(heldV6))
				s.releaseV6(heldV6[i])
				heldV6 = append(heldV6[:i], heldV6[i+1:]...)
				continue
			}
			want := 0
			for s.usedV6[s.v6At(want)] != nil {
				want++
			}
			got, _ := s.takeV6Prefixes(1, e)
			if got[0] != s.v6At(want) {
				t.Fatalf("step %d: takeV6Prefixes = %v, lowest free %s", step, got, s.v6At(want))
			}
			heldV6 = append(heldV6, got...)
		}
	}
}

// TestSubnetTakesStayLinear: filling a /16 one address at a time, with a
// give-back now and then, must not rescan the taken start every time
// (that is some 2·10⁹ map lookups; a linear search is 10⁵).
func TestSubnetTakesStayLinear(t *testing.T) {
	s := newSubnet(VPCCIDR)
	e := &eni{}
	start := time.Now()
	for i := 0; ; i++ {
		ip, ok := s.takeAddrs(1, e)
		if !ok {
			break
		}
		if i%1000 == 999 {
			s.release(ip[0])
			if again, _ := s.takeAddrs(1, e); again[0] != ip[0] {
				t.Fatalf("gave back %s, took %s", ip[0], again[0])
			}
		}
	}
	if s.available() != 0 {
		t.Fatalf("available %d after filling", s.available())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("filling a /16 took %s", d)
	}
}
