package cloud

import "github.com/vpccni/vpccni/internal/failpoint"

// The cloud layer's failpoints: the two moments inside AllocENI when a
// crash leaves an ENI behind in EC2 that no node remembers, the leaks
// DeleteLeakedENIs exists to find.
var (
	FailAllocBeforeAttach              = failpoint.Register("cloud/alloc-eni/before-attach", "AllocENI: the ENI created and tagged, not yet attached")
	FailAllocBeforeDeleteOnTermination = failpoint.Register("cloud/alloc-eni/before-delete-on-termination", "AllocENI: the ENI attached, not yet marked DeleteOnTermination")
)
