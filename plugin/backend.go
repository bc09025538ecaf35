package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// Dialer connects to ipamd. The returned closer ends the connection.
type Dialer func(target string) (rpc.CNIBackendClient, io.Closer, error)

// DialGRPC is the production Dialer: gRPC over the unix socket (or a
// loopback TCP address), without TLS since the socket is root-only. Dialing
// is lazy; an absent ipamd shows up as Unavailable on the first call.
func DialGRPC(target string) (rpc.CNIBackendClient, io.Closer, error) {
	conn, closer, err := dialShared(target)
	if err != nil {
		return nil, nil, err
	}
	return rpc.NewCNIBackendClient(conn), closer, nil
}

// checkSocket looks, before dialing, at what a unix:// target's path is.
// Connecting to a path that is not a socket fails with ECONNREFUSED, the
// same error as a socket nobody listens on, which sends the operator
// looking for a dead ipamd: a regular file or a directory at the path
// (a mount gone wrong, a file written where the socket belongs) is named
// as what it is. A missing path is left to the dial, whose error (no such
// file or directory) says it already.
func checkSocket(target string) error {
	path, ok := strings.CutPrefix(target, "unix://")
	if !ok {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Type() == fs.ModeSocket {
		return nil
	}
	what := "a special file"
	switch t := fi.Mode().Type(); {
	case t == 0:
		what = "a regular file"
	case t.IsDir():
		what = "a directory"
	case t&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case t&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("ipamd's socket path %s is not a socket (it is %s)", path, what)
}

// Outcome classifies what ipamd said, for the DEL decision and the logs.
type Outcome string

const (
	OutcomeOK          Outcome = "ok"
	OutcomeUnreachable Outcome = "unreachable" // no ipamd on the socket
	OutcomeTimeout     Outcome = "timeout"     // ipamd did not answer within ipamdTimeout
	OutcomeUnknownPod  Outcome = "unknown-pod" // ipamd has no allocation for the pod
	OutcomeRefused     Outcome = "refused"     // ipamd answered Success=false
	OutcomeError       Outcome = "error"       // any other error
)

// unknownPodText is the reference ipamd's error text; its plugin matches it
// as a substring, and so do we, besides the NotFound code vpccni's ipamd
// uses.
const unknownPodText = "datastore: unknown pod"

// Classify maps an RPC error to an Outcome.
func Classify(err error) Outcome {
	if err == nil {
		return OutcomeOK
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return OutcomeTimeout
	}
	st, _ := status.FromError(err)
	switch {
	case strings.Contains(err.Error(), unknownPodText), st.Code() == codes.NotFound:
		return OutcomeUnknownPod
	case st.Code() == codes.Unavailable:
		return OutcomeUnreachable
	case st.Code() == codes.DeadlineExceeded:
		return OutcomeTimeout
	}
	return OutcomeError
}

// dialIpamd connects to ipamd for one call of the invocation: the client,
// and the call's context, within the invocation's ipamd deadline (one
// deadline for all of its calls). done ends both; on an error (ipamd
// unreachable) there is nothing to end.
func (p *Plugin) dialIpamd(ctx context.Context, inv *invocation) (rpc.CNIBackendClient, context.Context, func(), error) {
	client, closer, err := p.env.Dial(inv.conf.IpamdAddress)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := inv.ipamdContext(ctx)
	return client, ctx, func() {
		cancel()
		closer.Close()
	}, nil
}

// release asks ipamd to free the pod's address, within the deadline.
// hostVethIndex is the sandbox's proof that it owns an allocation ipamd
// recovered from the kernel (the peer of its container interface, read
// before any teardown; 0 when the sandbox's namespace is gone).
// handOverVeth leaves that veth pair to ipamd to delete before the
// address goes back (the reply's HostVethTaken says whether it did).
func (p *Plugin) release(ctx context.Context, inv *invocation, reason string, hostVethIndex int, handOverVeth bool) (*rpc.DelNetworkReply, Outcome, error) {
	if err := p.env.Failpoints.Trigger(FailDelRelease); err != nil {
		return nil, OutcomeError, err
	}
	client, ctx, done, err := p.dialIpamd(ctx, inv)
	if err != nil {
		return nil, OutcomeUnreachable, err
	}
	defer done()
	reply, err := client.DelNetwork(ctx, &rpc.DelNetworkRequest{
		ClientVersion:              p.env.Version,
		K8S_POD_NAME:               inv.podName,
		K8S_POD_NAMESPACE:          inv.podNS,
		K8S_POD_INFRA_CONTAINER_ID: string(inv.k8s.K8S_POD_INFRA_CONTAINER_ID),
		K8S_POD_UID:                string(inv.k8s.K8S_POD_UID),
		Reason:                     reason,
		ContainerID:                inv.args.ContainerID,
		IfName:                     inv.args.IfName,
		NetworkName:                inv.conf.Name,
		HostVethIndex:              int32(hostVethIndex),
		DeleteHostVeth:             handOverVeth,
	})
	if err != nil {
		return nil, Classify(err), err
	}
	if !reply.GetSuccess() {
		return reply, OutcomeRefused, errors.New("ipamd refused the release (Success=false)")
	}
	if err := p.env.Failpoints.Trigger(FailDelReleased); err != nil {
		return nil, OutcomeError, err
	}
	return reply, OutcomeOK, nil
}

// assign asks ipamd for the pod's address, within the deadline.
func (p *Plugin) assign(ctx context.Context, inv *invocation) (*rpc.AddNetworkReply, Outcome, error) {
	client, ctx, done, err := p.dialIpamd(ctx, inv)
	if err != nil {
		return nil, OutcomeUnreachable, err
	}
	defer done()
	reply, err := client.AddNetwork(ctx, &rpc.AddNetworkRequest{
		ClientVersion:              p.env.Version,
		K8S_POD_NAME:               inv.podName,
		K8S_POD_NAMESPACE:          inv.podNS,
		K8S_POD_INFRA_CONTAINER_ID: string(inv.k8s.K8S_POD_INFRA_CONTAINER_ID),
		ContainerID:                inv.args.ContainerID,
		IfName:                     inv.args.IfName,
		NetworkName:                inv.conf.Name,
		Netns:                      inv.args.Netns,
	})
	if err != nil {
		return nil, Classify(err), err
	}
	if !reply.GetSuccess() {
		return reply, OutcomeRefused, errors.New("ipamd could not assign an address (Success=false: pool empty or request invalid)")
	}
	return reply, OutcomeOK, nil
}
