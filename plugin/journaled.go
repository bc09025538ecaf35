package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/journal"
)

// JournalMaxBytes is the size past which the plugin stops appending to
// its journal: a journal left on on a busy node must not fill its disk.
const JournalMaxBytes = 64 << 20

// journaled runs one verb, recording it when the netconf names a
// journalFile. The journal only observes: the verb runs exactly as it
// would without it (a journal that cannot be written is a warning on the
// fallback log, never an error of the verb), so a journal is a faithful
// record of what the plugin did.
func (p *Plugin) journaled(verb string, args *skel.CmdArgs, run func(*Plugin) (types.Result, error)) (types.Result, error) {
	// The verb runs on its own copy of the plugin (its driver then logs
	// to the verb's log: confLog).
	q := *p
	q.invocation = true
	path := journalPath(args.StdinData)
	if path == "" {
		return run(&q)
	}
	rec := &recorder{entry: journal.Entry{Format: journal.Format, Time: time.Now().UTC(), Plugin: p.env.Version,
		Env: journal.Env{Command: verb, ContainerID: args.ContainerID, Netns: args.Netns, IfName: args.IfName,
			Args: args.Args, Path: args.Path},
		Stdin: compactJSON(args.StdinData)}}
	// The same plugin, with its ipamd connections and its namespace
	// opener seen through the recorder.
	q.env.Dial = rec.dialer(p.env.Dial)
	q.env.DialInventory = rec.inventoryDialer(p.env.DialInventory)
	q.env.Kernel = rec.opener(p.env.Kernel, args.Netns)
	start := time.Now()
	res, err := run(&q)
	rec.finish(res, err, time.Since(start))
	if werr := rec.append(path); werr != nil {
		p.env.Log.Warn("journalFile not written; the invocation is not in the journal", "verb", verb,
			"containerID", args.ContainerID, "journalFile", path, "error", werr)
	}
	return res, err
}

// journalPath is the netconf's journalFile, "" when it names none. The
// full netconf is parsed (and judged) by the verb; this only looks.
func journalPath(stdin []byte) string {
	if !bytes.Contains(stdin, []byte(`"journalFile"`)) {
		return ""
	}
	var c struct {
		JournalFile string `json:"journalFile"`
	}
	if json.Unmarshal(stdin, &c) != nil {
		return ""
	}
	return c.JournalFile
}

func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		// Not reachable: journalPath parsed it. Keep the bytes as a string.
		s, _ := json.Marshal(string(b))
		return s
	}
	return buf.Bytes()
}

// recorder collects one invocation's entry. ipamd calls may come from
// more than one goroutine in principle, hence the lock.
type recorder struct {
	mu    sync.Mutex
	entry journal.Entry
}

func (r *recorder) finish(res types.Result, err error, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entry.DurationMs = ms(took)
	if err != nil {
		r.entry.Error = AsCNIError(err)
		return
	}
	if res != nil {
		if b, merr := json.Marshal(res); merr == nil {
			r.entry.Result = b
		}
	}
}

// append writes the entry as one line with a single write(2) on an
// O_APPEND file, so concurrent plugin processes never interleave lines.
func (r *recorder) append(path string) error {
	r.mu.Lock()
	line, err := r.entry.Marshal()
	r.mu.Unlock()
	if err != nil {
		return err
	}
	f, err := openAppend("journalFile", path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size()+int64(len(line)) > JournalMaxBytes {
		return fmt.Errorf("%s is %d bytes, at its %d MiB limit: not appending (rotate or remove it to record more)",
			path, fi.Size(), JournalMaxBytes>>20)
	}
	_, err = f.Write(line)
	return err
}

func (r *recorder) call(method string, req, reply proto.Message, err error, start time.Time) {
	c := journal.Call{Method: method, DurationMs: ms(time.Since(start)), Outcome: string(Classify(err))}
	mo := protojson.MarshalOptions{UseProtoNames: true}
	if b, merr := mo.Marshal(req); merr == nil {
		c.Request = b
	}
	if err != nil {
		st := status.Convert(err)
		c.Code, c.Error = st.Code().String(), st.Message()
	} else {
		if b, merr := mo.Marshal(reply); merr == nil {
			c.Reply = b
		}
		if s, ok := reply.(interface{ GetSuccess() bool }); ok && !s.GetSuccess() {
			c.Outcome = string(OutcomeRefused)
		}
	}
	r.mu.Lock()
	r.entry.Ipamd = append(r.entry.Ipamd, c)
	r.mu.Unlock()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r *recorder) dialer(inner Dialer) Dialer {
	return func(target string) (rpc.CNIBackendClient, io.Closer, error) {
		c, closer, err := inner(target)
		if err != nil {
			return nil, nil, err
		}
		return recBackend{c, r}, closer, nil
	}
}

func (r *recorder) inventoryDialer(inner InventoryDialer) InventoryDialer {
	return func(target string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
		inv, h, closer, err := inner(target)
		if err != nil {
			return nil, nil, nil, err
		}
		return recInventory{inv, r}, recHealth{h, r}, closer, nil
	}
}

// opener records whether the pod namespace was there when the plugin
// opened it: a replay needs to know when the runtime had removed it.
func (r *recorder) opener(inner kernel.Opener, netns string) kernel.Opener {
	return recOpener{inner, r, netns}
}

type recOpener struct {
	kernel.Opener
	r     *recorder
	netns string
}

func (o recOpener) Open(path string) (kernel.API, error) {
	h, err := o.Opener.Open(path)
	if path != "" && path == o.netns {
		gone := errors.Is(err, kernel.ErrNamespaceGone) || errors.Is(err, os.ErrNotExist)
		o.r.mu.Lock()
		if o.r.entry.Netns == nil && (err == nil || gone) {
			o.r.entry.Netns = &journal.Netns{Path: path, Exists: err == nil}
		}
		o.r.mu.Unlock()
	}
	return h, err
}

// record times one call and records it.
func record[Q, P proto.Message](r *recorder, method string, in Q, call func() (P, error)) (P, error) {
	start := time.Now()
	out, err := call()
	r.call(method, in, out, err, start)
	return out, err
}

type recBackend struct {
	rpc.CNIBackendClient
	r *recorder
}

func (b recBackend) AddNetwork(ctx context.Context, in *rpc.AddNetworkRequest) (*rpc.AddNetworkReply, error) {
	return record(b.r, "AddNetwork", in, func() (*rpc.AddNetworkReply, error) { return b.CNIBackendClient.AddNetwork(ctx, in) })
}

func (b recBackend) DelNetwork(ctx context.Context, in *rpc.DelNetworkRequest) (*rpc.DelNetworkReply, error) {
	return record(b.r, "DelNetwork", in, func() (*rpc.DelNetworkReply, error) { return b.CNIBackendClient.DelNetwork(ctx, in) })
}

type recInventory struct {
	rpc.InventoryClient
	r *recorder
}

func (c recInventory) ListAllocations(ctx context.Context, in *rpc.ListAllocationsRequest) (*rpc.ListAllocationsReply, error) {
	return record(c.r, "ListAllocations", in, func() (*rpc.ListAllocationsReply, error) { return c.InventoryClient.ListAllocations(ctx, in) })
}

func (c recInventory) PoolStatus(ctx context.Context, in *rpc.PoolStatusRequest) (*rpc.PoolStatusReply, error) {
	return record(c.r, "PoolStatus", in, func() (*rpc.PoolStatusReply, error) { return c.InventoryClient.PoolStatus(ctx, in) })
}

type recHealth struct {
	rpc.HealthClient
	r *recorder
}

func (h recHealth) Check(ctx context.Context, in *rpc.HealthCheckRequest) (*rpc.HealthCheckResponse, error) {
	return record(h.r, "Check", in, func() (*rpc.HealthCheckResponse, error) { return h.HealthClient.Check(ctx, in) })
}
