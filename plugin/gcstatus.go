package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin/attachrec"
	"github.com/vpccni/vpccni/plugin/driver"
)

// ReasonGC is the DelNetwork reason of an address CNI GC gives back.
const ReasonGC = "GC"

// InventoryDialer opens ipamd's health and inventory services (GC and
// STATUS); the default dials gRPC.
type InventoryDialer func(target string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error)

func dialInventory(target string) (rpc.InventoryClient, rpc.HealthClient, io.Closer, error) {
	conn, closer, err := dialShared(target)
	if err != nil {
		return nil, nil, nil, err
	}
	return rpc.NewInventoryClient(conn), rpc.NewHealthClient(conn), closer, nil
}

// status is CNI STATUS (1.1): ready when ipamd answers its health check
// and has an address to give a new pod. The error says which it lacks
// (code 50, the plugin cannot serve ADD now).
func (p *Plugin) status(args *skel.CmdArgs) error {
	conf, err := LoadNetConf(args.StdinData)
	if err != nil {
		return err
	}
	// Runtimes poll STATUS every few seconds: only a change of answer is
	// worth a line, and the plugin keeps no state between runs, so it logs
	// each "not ready" (warn) and a "ready" only at debug.
	log, done := p.confLog(conf, "STATUS", "network", conf.Name)
	defer done()
	if err := p.ready(conf); err != nil {
		log.Warn("not ready", "error", err)
		return err
	}
	log.Debug("ready")
	return nil
}

// ready is STATUS's answer.
func (p *Plugin) ready(conf *NetConf) error {
	inv, health, closer, err := p.env.DialInventory(conf.IpamdAddress)
	if err != nil {
		return cniError(types.ErrPluginNotAvailable, "cannot reach ipamd at "+conf.IpamdAddress, err)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
	defer cancel()
	h, err := health.Check(ctx, &rpc.HealthCheckRequest{})
	if err != nil {
		return cniError(types.ErrPluginNotAvailable, fmt.Sprintf("ipamd at %s does not answer its health check", conf.IpamdAddress), err)
	}
	if h.GetStatus() != rpc.HealthCheckResponse_SERVING {
		return errorf(types.ErrPluginNotAvailable, "ipamd at %s is %s", conf.IpamdAddress, h.GetStatus())
	}
	ps, err := inv.PoolStatus(ctx, &rpc.PoolStatusRequest{})
	if status.Code(err) == codes.Unimplemented {
		// The reference's ipamd: healthy, and it cannot say more.
		return nil
	}
	if err != nil {
		return cniError(types.ErrPluginNotAvailable, "ipamd's pool status", err)
	}
	if ps.GetAvailable() <= 0 {
		return errorf(types.ErrPluginNotAvailable, "ipamd at %s has no address to give (%d in the pool, all held or cooling down)",
			conf.IpamdAddress, ps.GetTotal())
	}
	return nil
}

// gc is CNI GC (1.1): every attachment of this network ipamd holds an
// address for that is not among the runtime's valid attachments is torn
// down (only objects the ownership checks prove are its own) and its
// address given back. Allocations rebuilt from the kernel after a lost
// checkpoint name no sandbox and are left to ipamd's reconciler.
func (p *Plugin) gc(args *skel.CmdArgs) error {
	conf, err := LoadNetConf(args.StdinData)
	if err != nil {
		return err
	}
	log, done := p.confLog(conf, "GC", "network", conf.Name)
	defer done()
	valid := map[[2]string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[[2]string{a.ContainerID, a.IfName}] = true
	}
	inv, _, closer, err := p.env.DialInventory(conf.IpamdAddress)
	if err != nil {
		return cniError(types.ErrTryAgainLater, "cannot reach ipamd at "+conf.IpamdAddress, err)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
	defer cancel()
	list, err := inv.ListAllocations(ctx, &rpc.ListAllocationsRequest{NetworkName: conf.Name})
	if err != nil {
		return cniError(types.ErrTryAgainLater, "cannot list ipamd's allocations", err)
	}
	host, _, err := p.handles("")
	if err != nil {
		return err
	}
	defer closeAll(host)
	var errs []error
	collected := 0
	store := attachrec.Store{Dir: attachrec.DirFor(conf.StateDir)}
	for _, a := range list.GetAllocations() {
		if a.GetRecovered() || a.GetNetworkName() != conf.Name || valid[[2]string{a.GetContainerId(), a.GetIfName()}] {
			continue
		}
		if err := p.collect(host, conf, a); err != nil {
			log.Error("stale attachment not collected", "containerID", a.GetContainerId(), "ip", a.GetIp(), "error", err)
			errs = append(errs, err)
			continue
		}
		collected++
		if err := store.Remove(a.GetNetworkName(), a.GetContainerId(), a.GetIfName()); err != nil {
			log.Warn("cannot remove the collected attachment's record", "containerID", a.GetContainerId(), "error", err)
		}
		log.Info("stale attachment collected", "containerID", a.GetContainerId(), "ifname", a.GetIfName(),
			"pod", a.GetPodNamespace()+"/"+a.GetPodName(), "ip", a.GetIp())
	}
	log.Info("gc done", "valid", len(valid), "collected", collected, "failed", len(errs))
	if len(errs) > 0 {
		return cniError(types.ErrTryAgainLater, fmt.Sprintf("%d stale attachments not collected", len(errs)), errors.Join(errs...))
	}
	return nil
}

// collect tears one stale attachment down, then releases its address.
func (p *Plugin) collect(host kernel.API, conf *NetConf, a *rpc.Allocation) error {
	ip, err := netip.ParseAddr(a.GetIp())
	if err != nil {
		return fmt.Errorf("ipamd listed address %q: %w", a.GetIp(), err)
	}
	table := int(a.GetRouteTable())
	if table == 0 || !ownership.IsPodTable(table) {
		return fmt.Errorf("ipamd listed table %d for %s", table, ip)
	}
	pod := driver.Pod{ContainerIf: a.GetIfName(), IPs: []driver.PodIP{{Addr: ip, Table: table}}}
	if a.GetPodNamespace() != "" && a.GetPodName() != "" {
		pod.HostVeth = ownership.HostVeth(conf.VethPrefix, a.GetPodNamespace(), a.GetPodName())
	}
	// The runtime names no namespace for an attachment it no longer
	// lists, but ipamd recorded the one its ADD named. If that sandbox
	// still exists, its container interface's peer is the host veth the
	// address is routed to, which proves the route and rules are this
	// attachment's (a same-named veth would not). If it is gone, so is
	// the veth, and only the node side is left. The ownership checks
	// leave the rules of an address that moved on.
	sandbox, err := p.gcSandbox(a.GetNetns())
	if err != nil {
		return err
	}
	defer closeAll(sandbox)
	rep, err := p.env.Driver.Teardown(host, sandbox, pod)
	if err != nil {
		return err
	}
	if len(rep.Skipped) > 0 {
		// The kernel routes the address to another veth: a pod the runtime
		// did not list as valid (or one ipamd's record is stale about)
		// uses it. Releasing it would let ipamd give a live pod's address
		// to a new one.
		return fmt.Errorf("%s not released: %s", ip, strings.Join(rep.Skipped, "; "))
	}
	client, closer, err := p.env.Dial(conf.IpamdAddress)
	if err != nil {
		return err
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout())
	defer cancel()
	_, err = client.DelNetwork(ctx, &rpc.DelNetworkRequest{ClientVersion: p.env.Version, Reason: ReasonGC,
		ContainerID: a.GetContainerId(), IfName: a.GetIfName(), NetworkName: a.GetNetworkName(),
		K8S_POD_NAMESPACE: a.GetPodNamespace(), K8S_POD_NAME: a.GetPodName()})
	if err != nil && Classify(err) != OutcomeUnknownPod {
		return err
	}
	return nil
}

// gcSandbox opens the pod namespace ipamd recorded for an attachment: nil
// when none was recorded (an allocation from a checkpoint the reference
// wrote) or it no longer exists.
func (p *Plugin) gcSandbox(netns string) (kernel.API, error) {
	if netns == "" {
		return nil, nil
	}
	if !filepath.IsAbs(netns) || filepath.Clean(netns) != netns {
		return nil, fmt.Errorf("ipamd recorded pod namespace %q, which is not a clean absolute path", netns)
	}
	h, err := p.env.Kernel.Open(netns)
	if errors.Is(err, kernel.ErrNamespaceGone) || errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the pod namespace %s ipamd recorded: %w", netns, err)
	}
	return h, nil
}
