package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/hostnat"
	"github.com/vpccni/vpccni/internal/testsupport/simnode"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/ownership"
)

// The aws-node containers' jobs, as the reference's DaemonSet runs them:
// vpccni-node init, then vpccni-node run with ipamd's arguments, both in
// the node's network namespace, with the node's CNI directories at the
// reference's HOST_CNI_* variables.
var _ = Describe("vpccni-node as the aws-node containers", func() {
	It("init installs the plugins and sets the node's sysctls; run starts ipamd, writes the conflist once it answers, and a pod gets POD_MTU on both veth ends", func() {
		sim := simnode.New("vpccni-node", "vpccni-node-") // the node without ipamd: vpccni-node starts it
		n := &node{Node: sim}
		Expect(os.MkdirAll(filepath.Dir(n.Sock), 0o755)).To(Succeed())

		image, hostBin, hostConf := filepath.Join(n.Dir, "image"), filepath.Join(n.Dir, "opt-cni-bin"), filepath.Join(n.Dir, "etc-cni-net.d")
		for _, d := range []string{image, hostBin, hostConf} {
			Expect(os.Mkdir(d, 0o755)).To(Succeed())
		}
		for _, b := range []string{"vpc-cni", "portmap"} {
			data, err := os.ReadFile(filepath.Join(binDir, b))
			Expect(err).NotTo(HaveOccurred())
			Expect(os.WriteFile(filepath.Join(image, b), data, 0o755)).To(Succeed())
		}
		machineDemux, err := os.ReadFile("/proc/sys/net/ipv4/tcp_early_demux")
		Expect(err).NotTo(HaveOccurred())

		By("init: the plugins in HOST_CNI_BIN_PATH, rp_filter loose on the default route's link, tcp_early_demux off, in the node namespace only")
		env := append(os.Environ(), "HOST_CNI_BIN_PATH="+hostBin, "HOST_CNI_CONFDIR_PATH="+hostConf, "DISABLE_TCP_EARLY_DEMUX=true")
		initCmd := exec.Command(filepath.Join(binDir, "vpccni-node"), "init", "--cni-dir", image)
		initCmd.Env = env
		var initOut bytes.Buffer
		initCmd.Stdout, initCmd.Stderr = &initOut, &initOut
		Expect(n.NS.Do(initCmd.Run)).To(Succeed(), "vpccni-node init: %s", initOut.String())
		GinkgoWriter.Printf("init:\n%s", initOut.String())
		for _, b := range []string{"vpc-cni", "portmap"} {
			fi, err := os.Stat(filepath.Join(hostBin, b))
			Expect(err).NotTo(HaveOccurred())
			Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o755)))
		}
		for key, want := range map[string]string{"net/ipv4/conf/eth0/rp_filter": "2", "net/ipv4/tcp_early_demux": "0"} {
			got, err := n.Host.SysctlGet(key)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.TrimSpace(got)).To(Equal(want), key)
		}
		Expect(os.ReadFile("/proc/sys/net/ipv4/tcp_early_demux")).To(Equal(machineDemux), "the machine's own tcp_early_demux changed")

		By("run: ipamd started with the arguments after --; the conflist written once it answers")
		pluginLog := filepath.Join(n.Dir, "plugin.log")
		runCmd := exec.Command(filepath.Join(binDir, "vpccni-node"), "run", "--cni-dir", image, "--ipamd", filepath.Join(binDir, "ipamd"),
			"--socket", n.Sock, "--health-interval", "50ms", "--",
			"--cloud", "memory", "--instance-type", "m5.large", "--checkpoint", n.Checkpoint(),
			"--introspection-address", "unix:"+n.IntrospectSock(), "--metrics-address", "127.0.0.1:61678")
		runCmd.Env = append(env, "POD_MTU=1500", "AWS_VPC_ENI_MTU=8000", "AWS_VPC_K8S_PLUGIN_LOG_FILE="+pluginLog, "AWS_VPC_K8S_PLUGIN_LOG_LEVEL=DEBUG")
		runOut := &testns.SyncBuffer{}
		runCmd.Stdout, runCmd.Stderr = runOut, runOut
		Expect(n.NS.Do(runCmd.Start)).To(Succeed())
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = runCmd.Wait(); close(exited) }()
		DeferCleanup(func() {
			runCmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				runCmd.Process.Kill()
			}
			GinkgoWriter.Printf("vpccni-node run:\n%s", runOut.String())
		})
		conflist := filepath.Join(hostConf, "10-aws.conflist")
		Eventually(func() error { _, err := os.Stat(conflist); return err }, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "no conflist: %s", runOut)
		Expect(runOut.String()).To(ContainSubstring("ipamd is healthy"))

		By("run picked the node's iptables mode (a fresh namespace holds no rule: nft) and ipamd wrote its SNAT rules with it")
		Expect(runOut.String()).To(ContainSubstring(`iptables mode picked" mode=nft`))
		Expect(hostnat.Current(n.iptables())).To(ContainElement(HaveField("Chain", hostnat.SNATChain)))

		By("ipamd gave the ENIs AWS_VPC_ENI_MTU")
		for _, eni := range []string{"eth0", "eth1"} {
			l, err := n.Host.LinkByName(eni)
			Expect(err).NotTo(HaveOccurred())
			Expect(l.MTU).To(Equal(8000), eni)
		}

		By("ADD through libcni with the conflist as written (its stateDir moved into the test's directory), CNI_PATH the node's bin directory")
		raw, err := os.ReadFile(conflist)
		Expect(err).NotTo(HaveOccurred())
		var doc map[string]any
		Expect(json.Unmarshal(raw, &doc)).To(Succeed())
		vpc := doc["plugins"].([]any)[0].(map[string]any)
		Expect(vpc).To(HaveKeyWithValue("mtu", "1500"))
		Expect(vpc).To(HaveKeyWithValue("pluginLogFile", pluginLog))
		Expect(vpc).To(HaveKeyWithValue("ipamdAddress", "unix://"+n.Sock))
		vpc["stateDir"] = filepath.Join(n.Dir, "state") // never the machine's /var/lib/cni
		raw, err = json.Marshal(doc)
		Expect(err).NotTo(HaveOccurred())
		n.list, err = libcni.NetworkConfFromBytes(raw)
		Expect(err).NotTo(HaveOccurred())
		n.logFile = pluginLog
		n.cni = libcni.NewCNIConfigWithCacheDir([]string{hostBin}, filepath.Join(n.Dir, "cache"), &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: GinkgoWriter}})
		p := n.newPod("web-0")
		res := n.add(p)
		Expect(res.IPs).To(HaveLen(1))
		podNS, err := linux.Opener{}.Open(p.netns.Path())
		Expect(err).NotTo(HaveOccurred())
		defer podNS.Close()
		eth0, err := podNS.LinkByName("eth0")
		Expect(err).NotTo(HaveOccurred())
		Expect(eth0.MTU).To(Equal(1500), "the pod's eth0")
		hostVeth, err := n.Host.LinkByName(ownership.HostVeth(ownership.DefaultVethPrefix, p.ns, p.name))
		Expect(err).NotTo(HaveOccurred())
		Expect(hostVeth.MTU).To(Equal(1500), "the host veth")
		Expect(os.ReadFile(pluginLog)).To(ContainSubstring(`"level":"DEBUG"`), "AWS_VPC_K8S_PLUGIN_LOG_LEVEL=DEBUG reaches the plugin")

		By("DEL, then SIGTERM: run passes it on to ipamd and exits with its status")
		Expect(n.NS.Do(func() error { return n.cni.DelNetworkList(context.Background(), n.list, p.rt) })).To(Succeed())
		Eventually(func() error { _, err := n.Host.LinkByName(hostVeth.Name); return err }, 10*time.Second).Should(HaveOccurred(), "the host veth stays")
		Expect(runCmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		Eventually(exited, 15*time.Second).Should(BeClosed())
		Expect(waitErr).NotTo(HaveOccurred(), "vpccni-node run: %s", runOut)
		Expect(runOut.String()).To(ContainSubstring("passing the signal on to ipamd"))
		Expect(runOut.String()).To(ContainSubstring("ipamd exited"))
	})
})
