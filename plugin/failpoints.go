package plugin

import "github.com/vpccni/vpccni/internal/failpoint"

// The plugin's own failpoints, around its calls to ipamd; the driver has
// one per kernel step.
var (
	FailAddAssigned = failpoint.Register("plugin/add/after-assign", "ADD: ipamd assigned the address, nothing is set up yet")
	FailAddRecord   = failpoint.Register("plugin/add/before-record", "ADD: everything is set up, the attachment's record not yet written")
	FailAddRecorded = failpoint.Register("plugin/add/after-record", "ADD: the attachment's record is written, the result is not printed yet")
	FailAddResult   = failpoint.Register("plugin/add/before-result", "ADD: everything is set up, the result is not printed yet")
	FailDelRelease  = failpoint.Register("plugin/del/before-release", "DEL: about to ask ipamd to release the address")
	FailDelReleased = failpoint.Register("plugin/del/after-release", "DEL: ipamd released the address, the plugin has not acted on the reply")
	FailDelQueue    = failpoint.Register("plugin/del/before-queue", "DEL: torn down, ipamd unreachable, the release not yet queued")
)
