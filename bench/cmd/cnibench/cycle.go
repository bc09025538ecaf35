package main

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/vpccni/vpccni/internal/testsupport/benchstat"
	"github.com/vpccni/vpccni/kernel"
	"github.com/vpccni/vpccni/kernel/linux"
)

// sample is one pod's life with one plugin.
type sample struct {
	add, del call
	// outside the timed region: the pod namespace's creation, the wait
	// for the veth pair to go (when the DEL leaves it to ipamd or to the
	// namespace's removal) and the namespace's removal
	netns, veth, remove time.Duration
}

// cycle is one pod's life with one plugin: new namespace (exposed in the
// jail), ADD, DEL, a check that nothing that routes the pod is left, the
// wait for its veth pair to go as the plugin arranges it (ipamd deletes
// vpc-cni's before the namespace goes; the reference's goes with the
// namespace), and the namespace's removal, so the next run starts on a
// quiet node. Only the plugin processes of ADD and DEL are timed.
func (n *node) cycle(pl *plugin, name string) (sample, error) {
	var s sample
	t := time.Now()
	p, err := n.newPod(name)
	if err != nil {
		return s, err
	}
	s.netns = time.Since(t)
	res, add, err := n.add(pl, p)
	if err != nil {
		n.removeNetns(p)
		return s, fmt.Errorf("%s ADD %s: %w (logs in %s)", pl.name, name, err, n.dir)
	}
	del, err := n.del(pl, p)
	if err != nil {
		n.removeNetns(p)
		return s, fmt.Errorf("%s DEL %s: %w (logs in %s)", pl.name, name, err, n.dir)
	}
	s.add, s.del = add, del
	ip := res.IPs[0].Address.IP
	hostVeth := ""
	if pl.hostVeth != nil {
		hostVeth = pl.hostVeth(name)
	}
	if err := n.gone(p, ip, hostVeth, pl.vethBy == vethByDEL); err != nil {
		n.removeNetns(p)
		return s, fmt.Errorf("%s: %w", pl.name, err)
	}
	t = time.Now()
	if pl.vethBy == vethByIpamd {
		if err := n.waitLinkGone(hostVeth); err != nil {
			n.removeNetns(p)
			return s, fmt.Errorf("%s: %w", pl.name, err)
		}
		s.veth = time.Since(t)
	}
	t = time.Now()
	if err := n.removeNetns(p); err != nil {
		return s, err
	}
	if pl.vethBy == vethByNamespace {
		if err := n.waitLinkGone(hostVeth); err != nil {
			return s, fmt.Errorf("%s: %w", pl.name, err)
		}
		s.veth = time.Since(t)
	}
	s.remove = time.Since(t)
	return s, nil
}

// gone checks that nothing of the pod is left on the node: no route or
// rule naming its address; and, when the plugin deletes the veth pair
// (withVeth), its eth0 and its host veth.
func (n *node) gone(p *pod, ip net.IP, hostVeth string, withVeth bool) error {
	if withVeth {
		h, err := (linux.Opener{}).Open(p.ns.Path())
		if err != nil {
			return err
		}
		defer h.Close()
		if _, err := h.LinkByName("eth0"); !kernel.IsNotFound(err) {
			return fmt.Errorf("pod %s: eth0 left behind (%v)", p.name, err)
		}
		if hostVeth != "" {
			if _, err := n.host.LinkByName(hostVeth); !kernel.IsNotFound(err) {
				return fmt.Errorf("pod %s: host veth %s left behind (%v)", p.name, hostVeth, err)
			}
		}
	}
	rules, err := n.host.RuleList(kernel.FamilyAll)
	if err != nil {
		return err
	}
	for _, r := range rules {
		for _, sel := range []*net.IPNet{r.Src, r.Dst} {
			if sel != nil && sel.IP.Equal(ip) {
				return fmt.Errorf("pod %s: rule left behind: %s", p.name, kernel.RuleString(r))
			}
		}
	}
	routes, err := n.host.RouteList(kernel.FamilyAll, kernel.TableUnspec)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.Equal(ip) {
			return fmt.Errorf("pod %s: route left behind: %+v", p.name, r)
		}
	}
	return nil
}

// waitLinkGone waits for a host veth to go: deleted by ipamd after a DEL
// handed it over, or by the kernel after the namespace's removal (both
// asynchronous to the DEL).
func (n *node) waitLinkGone(name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := n.host.LinkByName(name)
		if kernel.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("host veth %s still there after 10s (%v)", name, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// hung measures vpc-cni's DEL while ipamd hangs: SIGSTOP keeps its socket
// accepting (the kernel queues the connection), nothing answers.
func hung(n *node, vpc *plugin, runs int, timeout time.Duration) error {
	fmt.Printf("\nvpc-cni DEL while ipamd is SIGSTOPped (ipamdTimeout %s), %d runs:\n", timeout, runs)
	var times []time.Duration
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("hang-%d", i)
		p, err := n.newPod(name)
		if err != nil {
			return err
		}
		res, _, err := n.add(vpc, p)
		if err != nil {
			n.removeNetns(p)
			return fmt.Errorf("vpc-cni ADD %s: %w (plugin log %s)", name, err, n.logFile)
		}
		if err := n.ipamd.Process.Signal(syscall.SIGSTOP); err != nil {
			n.removeNetns(p)
			return err
		}
		c, derr := n.del(vpc, p)
		gerr := n.gone(p, res.IPs[0].Address.IP, vpc.hostVeth(name), true)
		if err := n.ipamd.Process.Signal(syscall.SIGCONT); err != nil {
			n.removeNetns(p)
			return err
		}
		n.removeNetns(p)
		if derr != nil {
			return fmt.Errorf("DEL %s with ipamd stopped returned an error: %w", name, derr)
		}
		if gerr != nil {
			return fmt.Errorf("DEL %s with ipamd stopped: %w", name, gerr)
		}
		times = append(times, c.wall)
		fmt.Printf("  %s: DEL %s, success, pod torn down (eth0, host veth, route, rules gone)\n", name, benchstat.Ms(c.wall))
	}
	fmt.Printf("  median %s, max %s (deadline %s)\n", benchstat.Ms(benchstat.Median(times)), benchstat.Ms(benchstat.Max(times)), timeout)
	return nil
}
