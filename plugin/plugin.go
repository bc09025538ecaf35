package plugin

import (
	"github.com/vpccni/vpccni/internal/failpoint"
	"time"

	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/releasequeue"
)

// Plugin-specific CNI error codes (the spec reserves 100+ for plugins).
const (
	ErrIpamd        uint = 100 // ipamd answered with an error
	ErrNoAddress    uint = 101 // ipamd has no address for the pod
	ErrSetupFailed  uint = 102 // a kernel step of ADD failed (rolled back)
	ErrNotSupported uint = 103 // a mode this build does not implement
)

// Env is everything the plugin talks to. The binary fills it with the real
// kernel and gRPC; the harness with the kernel model and an in-process ipamd
// on a real socket; unit tests with mocks.
type Env struct {
	Kernel kernel.Opener
	Dial   Dialer
	Driver driver.Networker
	// Log receives the plugin's log when the netconf names no
	// pluginLogFile. nil: discard.
	Log *slog.Logger
	// IsHostNS reports whether a namespace path is the plugin's own
	// namespace: ADD refuses to build a pod there.
	IsHostNS func(path string) (bool, error)
	// Version is sent to ipamd as ClientVersion.
	Version string
	// DialInventory opens ipamd's health and inventory services (GC,
	// STATUS); nil dials gRPC.
	DialInventory InventoryDialer
	// Failpoints, when set, are the armed failpoints (harness and
	// failpoint builds only; the driver takes the same set).
	Failpoints *failpoint.Set
	// DeleteFlow decides a parsed DEL; nil is vpccni's (Delete). The
	// harness plugs the reference's earlier flows in here, so that they
	// run through the same entry point as vpccni's (Del: the journal, the
	// netconf, CNI_ARGS and prevResult checks); the binary never sets it.
	DeleteFlow func(*Plugin, *DelRequest) error
	// ReleaseQueue is where a DEL that tore its pod down but could not
	// reach ipamd queues the release for ipamd's next start, given the
	// netconf's ipamdAddress (QueueBesideSocket); nil: no queue.
	ReleaseQueue func(ipamdAddress string) (releasequeue.Queue, bool)
}

// Plugin is the CNI plugin. Add and Del are the verbs; they take skel's
// arguments so the binary and the harness call the same entry points.
type Plugin struct {
	env Env
	// invocation is set on the copy of the plugin one verb runs on
	// (journaled): that copy's driver may be pointed at the invocation's
	// log (confLog), which the shared plugin's must not.
	invocation bool
}

// New returns a plugin on env.
func New(env Env) *Plugin {
	if env.Log == nil {
		env.Log = slog.New(slog.DiscardHandler)
	}
	if env.DialInventory == nil {
		env.DialInventory = dialInventory
	}
	if env.Dial == nil {
		env.Dial = DialGRPC
	}
	if env.Driver == nil {
		env.Driver = driver.New(env.Log).WithFailpoints(env.Failpoints)
	}
	if env.Version == "" {
		env.Version = "vpccni-dev"
	}
	return &Plugin{env: env}
}

// invocation is one parsed request.
type invocation struct {
	args           *skel.CmdArgs
	conf           *NetConf
	k8s            *K8sArgs
	podNS, podName string
	log            *slog.Logger
	closeLog       io.Closer
	// ipamdDeadline ends the verb's time with ipamd, set by its first
	// call: ipamdTimeout bounds all of a verb's calls together (a DEL asks
	// and then releases; a hung ipamd must not cost it the timeout twice).
	ipamdDeadline time.Time
}

// ipamdContext is ctx bounded by the verb's ipamd deadline.
func (inv *invocation) ipamdContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if inv.ipamdDeadline.IsZero() {
		inv.ipamdDeadline = time.Now().Add(inv.conf.Timeout())
	}
	return context.WithDeadline(ctx, inv.ipamdDeadline)
}

func (p *Plugin) begin(args *skel.CmdArgs, verb string) (*invocation, error) {
	conf, err := LoadNetConf(args.StdinData)
	if err != nil {
		p.env.Log.Error("rejected network configuration", "verb", verb, "containerID", args.ContainerID, "error", err)
		return nil, err
	}
	k8s, err := LoadK8sArgs(args.Args)
	if err != nil {
		return nil, err
	}
	if err := validateIfName(args.IfName); err != nil {
		return nil, err
	}
	inv := &invocation{args: args, conf: conf, k8s: k8s,
		podNS: string(k8s.K8S_POD_NAMESPACE), podName: string(k8s.K8S_POD_NAME)}
	var done func()
	inv.log, done = p.confLog(conf, verb, "containerID", args.ContainerID, "pod", inv.podNS+"/"+inv.podName,
		"netns", args.Netns, "ifname", args.IfName)
	inv.closeLog = closerFunc(done)
	return inv, nil
}

// confLog is a verb's logger: the netconf's pluginLogFile, or Env.Log;
// on a verb's own copy of the plugin, the driver logs there too.
// A log file that cannot be opened safely (a symlink or hard link planted
// at the path, a FIFO, a missing directory, a read-only filesystem) must
// not fail pod networking: a failed ADD leaves the pod without a network,
// and a failed DEL makes kubelet retry until it gives up, which is how
// kernel objects leak. The plugin carries on and logs to Env.Log (the
// runtime's stderr in the binary, warn and above), saying why.
func (p *Plugin) confLog(conf *NetConf, verb string, attrs ...any) (*slog.Logger, func()) {
	log, done := p.env.Log, func() {}
	if conf.PluginLogFile != "" {
		l, c, err := openLog(conf.PluginLogFile, conf.PluginLogLevel)
		if err != nil {
			p.env.Log.Warn("pluginLogFile not used; logging to the fallback log (stderr)", append([]any{"verb", verb,
				"pluginLogFile", conf.PluginLogFile, "error", err}, attrs...)...)
		} else {
			log, done = l, func() { c.Close() }
		}
	}
	log = log.With(append([]any{"verb", verb}, attrs...)...)
	// The driver's lines (setup, teardown, an address left to its new
	// holder) belong in the same log, at the same level, as the verb's.
	if d, ok := p.env.Driver.(*driver.Driver); ok && p.invocation {
		p.env.Driver = d.WithLog(log)
	}
	return log, done
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

func (inv *invocation) end() {
	if inv.closeLog != nil {
		inv.closeLog.Close()
	}
}

// handles opens the node namespace and, if it still exists, the pod's.
// A missing pod namespace is not an error: DEL must cope with it.
func (p *Plugin) handles(netns string) (host, pod kernel.API, err error) {
	host, err = p.env.Kernel.Open("")
	if err != nil {
		return nil, nil, types.NewError(types.ErrIOFailure, "cannot open the node network namespace", err.Error())
	}
	if netns == "" {
		return host, nil, nil
	}
	pod, err = p.env.Kernel.Open(netns)
	if errors.Is(err, kernel.ErrNamespaceGone) || errors.Is(err, os.ErrNotExist) {
		return host, nil, nil
	}
	if err != nil {
		host.Close()
		return nil, nil, types.NewError(types.ErrInvalidNetNS, "cannot open the pod network namespace", err.Error())
	}
	return host, pod, nil
}

func closeAll(hs ...kernel.API) {
	for _, h := range hs {
		if h != nil {
			h.Close()
		}
	}
}

// AsCNIError is err as a runtime sees it: a CNI error as it is, anything
// else wrapped the way skel reports it (code 999); nil for nil.
func AsCNIError(err error) *types.Error {
	if err == nil {
		return nil
	}
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}

// cniError wraps err as a CNI error with a code, unless it is one already.
func cniError(code uint, msg string, err error) error {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce
	}
	details := ""
	if err != nil {
		details = err.Error()
	}
	return types.NewError(code, msg, details)
}

var background = context.Background

func errorf(code uint, format string, a ...any) error {
	return types.NewError(code, fmt.Sprintf(format, a...), "")
}
