// Package htmlreport draws replayed runs as one self-contained HTML page:
// per cell a timeline of the node's kernel objects, one lane per pod (its
// veth, host route, rules 512 and 1536, VLAN link, iif rules) from its ADD
// to the end, ipamd's ups and downs as a band, each DEL attempt with
// ipamd's answer, the leaked objects and misroutes in colour with their
// findings; a summary table linking to the cells; and an exploration's
// matrix as a heat map. The page fetches nothing: CSS, script and SVG are
// inline.
package htmlreport

import (
	"fmt"
	"strings"
	"time"

	"github.com/vpccni/vpccni/scenarios/invariant"
)

// cellInput is one run as the page draws it, whatever produced it (a
// scenario run or a replayed journal).
type cellInput struct {
	ID, Title          string
	Scenario, Mode     string
	Policy, Expected   string
	Got                string
	Match              bool
	Steps              []stepInput
	Pods               []podStart
	Dels               []delAttempt
	Ipamd              []ipamdChange // nil: not known (journals)
	Findings           []invariant.Violation
	KnownLimit, Source string
}

// stepInput is one column of the timeline: what happened and the node's
// kernel lines it added and removed (kernel.State lines).
type stepInput struct {
	At             time.Duration
	Label, Event   string
	Notes          []string
	Added, Removed []string
}

// podStart is a sandbox's ADD: who it is and what it got, so its kernel
// objects can be told apart from the node's.
type podStart struct {
	Pod      string
	Step     int
	IP       string
	HostVeth string
	VlanLink string
	OK       bool
	Text     string
}

// delAttempt is one DEL and ipamd's answer.
type delAttempt struct {
	Pod    string
	Step   int
	Answer string
	Text   string
	OK     bool
}

// ipamdChange is ipamd coming up (with what it found of its checkpoint) or
// going down.
type ipamdChange struct {
	Step   int
	Up     bool
	Memory string
	Text   string
}

// cellID makes an HTML id of the parts that name a cell.
func cellID(parts ...string) string {
	var b strings.Builder
	b.WriteString("cell")
	for _, p := range parts {
		b.WriteByte('-')
		for _, c := range p {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
				b.WriteRune(c)
			default:
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// atLabel is a step's time as the timeline prints it.
func atLabel(d time.Duration) string { return fmt.Sprintf("t=%s", d) }
