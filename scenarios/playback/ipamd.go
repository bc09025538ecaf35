package playback

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/journal"
)

// recordedIpamd answers one invocation's calls with the answers the
// journal recorded for it, in order: the replay depends on what ipamd
// said, not on an ipamd that would have to be in the same state as the
// node's was. A call the journal has no answer for (a method it records no
// more of) is a divergence and gets Unavailable, which every flow
// survives; recorded calls the replay skips are divergences too.
type recordedIpamd struct {
	calls []journal.Call
	next  int
	// made lists what the replay called, for the step's report.
	made []string
	// diverged says how the replay's calls differ from the journal's.
	diverged []string
	// observe sees each call answered from the journal (reply nil and the
	// code when the answer was an error), for the IP accounting.
	observe func(method string, req, reply proto.Message, code codes.Code)
}

var errNoAnswer = status.Error(codes.Unavailable, "playback: the journal has no answer for this call")

// answer fills reply with the next recorded answer for method, or returns
// its error.
func (r *recordedIpamd) answer(method string, req, reply proto.Message) error {
	if r.next >= len(r.calls) {
		r.diverged = append(r.diverged, fmt.Sprintf("the replay called %s; the journal records no more calls", method))
		r.made = append(r.made, method+" (no answer recorded)")
		return errNoAnswer
	}
	// A flow that makes fewer calls (a legacy one asks nothing before it
	// releases) skips the recorded calls it does not make, each a
	// divergence; a method the journal has no more of gets no answer.
	at := r.next
	for at < len(r.calls) && r.calls[at].Method != method {
		at++
	}
	if at == len(r.calls) {
		r.diverged = append(r.diverged, fmt.Sprintf("the replay called %s where the journal records %s", method, r.calls[r.next].Method))
		r.made = append(r.made, method+" (no answer recorded)")
		return errNoAnswer
	}
	for _, skipped := range r.calls[r.next:at] {
		r.diverged = append(r.diverged, fmt.Sprintf("the journal records %s (%s), which the replay did not call", skipped.Method, skipped.Outcome))
	}
	c := r.calls[at]
	r.next = at + 1
	r.made = append(r.made, method+" "+c.Outcome)
	if c.Code != "" {
		r.observe(method, req, nil, codeOf(c.Code))
		return status.Error(codeOf(c.Code), c.Error)
	}
	if err := protojson.Unmarshal(c.Reply, reply); err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("playback: the journal's %s reply does not decode: %v", method, err))
	}
	r.observe(method, req, reply, codes.OK)
	return nil
}

// unanswered reports the recorded calls the replay did not make.
func (r *recordedIpamd) finish() {
	for _, c := range r.calls[r.next:] {
		r.diverged = append(r.diverged, fmt.Sprintf("the journal records %s (%s), which the replay did not call", c.Method, c.Outcome))
	}
}

// codeOf parses a gRPC code as codes.Code.String() writes it.
func codeOf(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

func (r *recordedIpamd) dial(string) (rpc.CNIBackendClient, io.Closer, error) {
	return backend{r}, nopCloser{}, nil
}

func (r *recordedIpamd) dialInventory(string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
	return inventory{r}, health{r}, nopCloser{}, nil
}

// answerAs answers one call into out.
func answerAs[P proto.Message](r *recordedIpamd, method string, in proto.Message, out P) (P, error) {
	if err := r.answer(method, in, out); err != nil {
		var none P
		return none, err
	}
	return out, nil
}

type backend struct{ r *recordedIpamd }

func (b backend) AddNetwork(_ context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	return answerAs(b.r, "AddNetwork", in, &rpc.AddNetworkReply{})
}

func (b backend) DelNetwork(_ context.Context, in *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	return answerAs(b.r, "DelNetwork", in, &rpc.DelNetworkReply{})
}

type inventory struct{ r *recordedIpamd }

func (i inventory) ListAllocations(_ context.Context, in *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	return answerAs(i.r, "ListAllocations", in, &rpc.ListAllocationsReply{})
}

func (i inventory) PoolStatus(_ context.Context, in *rpc.PoolStatusRequest) (*rpc.PoolStatusReply, error) {
	return answerAs(i.r, "PoolStatus", in, &rpc.PoolStatusReply{})
}

type health struct{ r *recordedIpamd }

func (h health) Check(_ context.Context, in *rpc.HealthCheckRequest) (*rpc.HealthCheckResponse, error) {
	return answerAs(h.r, "Check", in, &rpc.HealthCheckResponse{})
}
