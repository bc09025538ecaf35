// Package scene builds node namespaces for the reconciler's tests, on any
// kernel.API (the model or a real namespace), so the model tests and the
// real-kernel test run the very same case and judge it the same way.
package scene

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/vpccni/vpccni/ipamd/reconcile"
)

// Pool is an in-memory reconcile.Pool: address ranges, holders, and the
// addresses cooling down. Release moves a holder's address to cooling, as
// ipamd's datastore does.
type Pool struct {
	mu       sync.Mutex
	ranges   []netip.Prefix
	holders  []reconcile.Holder
	cooling  map[netip.Addr]bool
	released []string
	// ReleaseErr, when set, fails Release for these IDs.
	ReleaseErr map[string]error
}

// NewPool returns a pool handing out the addresses of the given prefixes.
func NewPool(ranges ...string) *Pool {
	p := &Pool{cooling: map[netip.Addr]bool{}}
	for _, r := range ranges {
		p.ranges = append(p.ranges, netip.MustParsePrefix(r))
	}
	return p
}

// Hold adds an allocation.
func (p *Pool) Hold(h reconcile.Holder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holders = append(p.holders, h)
}

// Cool marks an address as released a moment ago.
func (p *Pool) Cool(ip netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cooling[ip] = true
}

// Released lists the IDs released so far, in order.
func (p *Pool) Released() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.released)
}

func (p *Pool) Holders() []reconcile.Holder {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.holders)
}

func (p *Pool) Release(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ReleaseErr[id]; err != nil {
		return err
	}
	for i, h := range p.holders {
		if h.ID == id {
			p.holders = slices.Delete(p.holders, i, i+1)
			p.cooling[h.IP] = true
			p.released = append(p.released, id)
			return nil
		}
	}
	return fmt.Errorf("release %s: unknown allocation", id)
}

func (p *Pool) IsPodAddress(ip netip.Addr) bool {
	for _, r := range p.ranges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func (p *Pool) IsCooling(ip netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cooling[ip]
}
