package driver

import (
	"github.com/vpccni/vpccni/internal/failpoint"

	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vpccni/vpccni/kernel"
)

// Networker is what the plugin asks of the driver. It is an interface so
// that the plugin's decision logic is tested with a mock driver, and the
// driver's kernel calls with a mock kernel.
type Networker interface {
	// Setup makes every kernel object of the pod. host is the node
	// namespace, pod the pod's.
	Setup(host, pod kernel.API, p Pod) error
	// Teardown removes what is still this pod's. pod may be nil when the
	// pod namespace is already gone. It is idempotent.
	Teardown(host, pod kernel.API, p Pod) (Report, error)
	// ReadNode reads, ahead of a teardown, what it decides from on the
	// node for these addresses: one dump of the rules of their family, and
	// the ENIs that could hold them. It changes nothing, so a DEL reads it
	// while it waits for ipamd's answer; Teardown given it (Pod.Node)
	// reads none of it again.
	ReadNode(host kernel.API, addrs []netip.Addr) (*NodeView, error)
	// Inspect reads the pod's objects back from its namespace: the
	// teardown source of last resort when neither a prevResult nor ipamd
	// can say what the pod had. It returns nil when the pod's interface
	// does not exist.
	Inspect(host, pod kernel.API, containerIf string) (*Pod, error)
	// Check verifies the pod's objects are all there (CNI CHECK).
	Check(host, pod kernel.API, p Pod) error
}

// Driver is the Networker on kernel.API.
type Driver struct {
	log *slog.Logger
	// dadTimeout bounds the wait for IPv6 duplicate address detection.
	dadTimeout time.Duration
	// fp, when set, holds the armed failpoints (one per step): a step
	// crashes, hangs, fails or is skipped (failpoint.Skip) there.
	fp *failpoint.Set
}

// New returns a driver logging to log (nil: discard).
func New(log *slog.Logger) *Driver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{log: log, dadTimeout: DefaultDADTimeout}
}

// DefaultDADTimeout is the reference's bound on waiting for DAD.
const DefaultDADTimeout = 10 * time.Second

// dadPoll is how often the address flags are read while waiting.
const dadPoll = 50 * time.Millisecond

// WithDADTimeout returns a copy of the driver with another DAD bound.
func (d *Driver) WithDADTimeout(t time.Duration) *Driver {
	c := *d
	c.dadTimeout = t
	return &c
}

// waitDAD waits until no IPv6 address of the link is tentative: a pod
// whose address is still tentative cannot send from it. A failed DAD (the
// address is in use elsewhere) is an error, and so is the timeout.
func (d *Driver) waitDAD(h kernel.API, linkIndex int) error {
	deadline := time.Now().Add(d.dadTimeout)
	for {
		addrs, err := h.AddrList(linkIndex, kernel.FamilyV6)
		if err != nil {
			return err
		}
		tentative := false
		for _, a := range addrs {
			if a.Flags&kernel.AddrFlagDadFailed != 0 {
				return fmt.Errorf("duplicate address detection failed for %s", a.IPNet)
			}
			tentative = tentative || a.Flags&kernel.AddrFlagTentative != 0
		}
		if !tentative {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("IPv6 address still tentative after %s", d.dadTimeout)
		}
		time.Sleep(dadPoll)
	}
}

// WithLog returns a copy of the driver that logs to log (nil: discard):
// the plugin gives each invocation's driver the invocation's log.
func (d *Driver) WithLog(log *slog.Logger) *Driver {
	c := *d
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c.log = log
	return &c
}

// step runs one named step and wraps its error with the name, so a failed
// ADD or DEL says exactly where it stopped.
func (d *Driver) step(name, object string, fn func() error) error {
	if err := d.fp.Trigger(stepPoints[name]); failpoint.Is(err, failpoint.Skip) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s %s: %w", name, object, err)
	}
	if err := fn(); err != nil {
		return fmt.Errorf("%s %s: %w", name, object, err)
	}
	return nil
}

// Report says what a teardown did, for the plugin's log and the harness's
// timeline.
type Report struct {
	Removed []string
	// Skipped lists addresses whose host objects were left alone because
	// the kernel shows another holder (the IP has moved on), and Moved
	// those addresses.
	Skipped []string
	Moved   []netip.Addr
	// Notes are what the teardown noticed and acted on: a source that
	// disagrees with the node, an address with nothing left of it.
	Notes []string
}

func (r *Report) removed(format string, a ...any) {
	r.Removed = append(r.Removed, fmt.Sprintf(format, a...))
}

func (r *Report) note(format string, a ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, a...))
}

// hostMAC is the host end's MAC: locally administered and unicast,
// derived from the seed so it is reproducible. It is not checked against
// the node's other links (the reference does, with a dump of every link:
// milliseconds on a node of a hundred pods): a host veth's MAC is seen
// only on its own point-to-point link, by the pod's static neighbour, so
// two veths sharing one would still both work, and 46 hashed bits make
// that a chance of about one in 10^11 among a node's veths anyway.
func hostMAC(seed string) net.HardwareAddr {
	sum := sha256.Sum256([]byte(seed))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered, unicast
	return mac
}

// ignoreNotFound treats "already gone" as done: teardown is idempotent.
func ignoreNotFound(err error) error {
	if kernel.IsNotFound(err) {
		return nil
	}
	return err
}

// ignoreExist treats "already there" as done: setup is idempotent.
func ignoreExist(err error) error {
	if kernel.IsExist(err) {
		return nil
	}
	return err
}
