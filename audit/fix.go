package audit

import (
	"errors"
	"fmt"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
)

// removal is how --fix takes a LEAKED object away: a rule (by its full
// description, through the teardown's remover) or a link (by index, after
// checking it still has its name).
type removal struct {
	rule      *kernel.Rule
	link      string
	linkIndex int
}

// Removed is one object --fix took away, or left with the reason.
type Removed struct {
	Finding Finding `json:"finding"`
	Done    bool    `json:"done"`
	Error   string  `json:"error,omitempty"`
}

// Fix removes the fixable findings' objects from the node. Rules go
// through ownership.DeleteRules, the plugin's teardown's remover: a rule a
// delete request could confuse with another agent's is left in place and
// said so. A link is deleted by the index the audit saw, only while it
// still has the same name. Deleting a veth takes its host route with it.
func Fix(k kernel.API, fs []Finding) ([]Removed, error) {
	var out []Removed
	var errs []error
	view, err := ownership.ListRules(k, kernel.FamilyAll)
	if err != nil {
		return nil, fmt.Errorf("list the node's rules: %w", err)
	}
	for _, f := range fs {
		if !f.Fixable {
			continue
		}
		r := Removed{Finding: f}
		var err error
		switch {
		case f.remove.rule != nil:
			want := *f.remove.rule
			var gone []kernel.Rule
			gone, err = ownership.DeleteRules(k, view, want.Family, func(r kernel.Rule) bool { return ownership.SameRule(r, want) })
			r.Done = len(gone) > 0
			if err == nil && !r.Done {
				r.Error = "already gone"
			}
		case f.remove.link != "":
			r.Done, err = deleteLink(k, f.remove.link, f.remove.linkIndex)
		}
		if errors.Is(err, errGone) {
			r.Error, err = "already gone", nil
		}
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", f.Object, err))
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

var errGone = errors.New("already gone")

func deleteLink(k kernel.API, name string, index int) (bool, error) {
	l, err := k.LinkByIndex(index)
	if kernel.IsNotFound(err) {
		return false, errGone
	}
	if err != nil {
		return false, err
	}
	if l.Name != name {
		return false, fmt.Errorf("link %d is now %s, not %s: left alone", index, l.Name, name)
	}
	if err := k.LinkDelIndex(index); err != nil && !kernel.IsNotFound(err) {
		return false, err
	}
	return true, nil
}
