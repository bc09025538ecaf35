package failpoints

import (
	"strings"
	"testing"

	"github.com/vpccni/vpccni/internal/failpoint"
)

// TestKnown: every component's failpoints are known, and only those.
func TestKnown(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range failpoint.All() {
		if !Known(string(p.Name)) {
			t.Errorf("%s is registered but not known", p.Name)
		}
		seen[strings.SplitN(string(p.Name), "/", 2)[0]] = true
	}
	for _, c := range []string{"ipamd", "plugin", "driver"} {
		if !seen[c] {
			t.Errorf("no failpoint of %s is linked", c)
		}
	}
	if Known("ipamd/no-such-point") {
		t.Error("an unregistered name is known")
	}
}
