package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vpccni/vpccni/internal/testsupport/kubecluster"
)

// A kubelet node is a containerd 2.4 node (its ENIs as buildNode makes
// them) registered with a real control plane by a real kubelet, which
// runs in containerd's network and mount namespaces (daemonset_test.go
// puts ipamd on it). What
// kubelet would change on the machine is kept in that private mount
// namespace: the node's directories are bind-mounted over the fixed
// paths it writes (/var/lib/kubelet, and /var/log for /var/log/pods and
// /var/log/containers), and over the three kernel settings kubelet's
// protectKernelDefaults reads, small files hold the values it requires
// (so it only reads them; with the check off it would write the
// machine's sysctls).

// kubeletNodeName is the Node kubelet registers (and the certificate's
// system:node user).
const kubeletNodeName = "ip-10-0-1-10.ec2.internal"

// nodeIP is eth0's address (testns.PlugENIs): the node's InternalIP.
const nodeIP = "10.0.1.10"

// kernelDefaults are what kubelet's protectKernelDefaults requires of
// the settings this machine has otherwise; the others it checks
// (vm/panic_on_oom, kernel/keys/root_maxkeys and root_maxbytes) already
// hold here.
var kernelDefaults = map[string]string{
	"/proc/sys/vm/overcommit_memory": "1",
	"/proc/sys/kernel/panic":         "10",
	"/proc/sys/kernel/panic_on_oops": "1",
}

// kubeletBinds are the mounts kubelet needs in containerd's mount
// namespace (mount point -> the node's file or directory), written into
// the node's dir.
func (n *node) kubeletBinds() map[string]string {
	binds := map[string]string{"/var/lib/kubelet": filepath.Join(n.Dir, "kubelet"), "/var/log": filepath.Join(n.Dir, "log")}
	for _, d := range []string{"kubelet", "log/pods", "log/containers"} {
		Expect(os.MkdirAll(filepath.Join(n.Dir, d), 0o755)).To(Succeed())
	}
	Expect(os.MkdirAll(filepath.Join(n.Dir, "sysctl"), 0o755)).To(Succeed())
	for path, v := range kernelDefaults {
		f := filepath.Join(n.Dir, "sysctl", filepath.Base(path))
		Expect(os.WriteFile(f, []byte(v+"\n"), 0o444)).To(Succeed())
		binds[path] = f
	}
	return binds
}

// kubeletConfig is the KubeletConfiguration that runs here: cgroup v1
// accepted, cgroupfs (no systemd), no QoS cgroups and no allocatable
// enforcement (every pod's cgroup is under the node's cgroup parent, which
// cleanup removes), no eviction thresholds and no image garbage
// collection (the machine's disk must not evict the test's pods), its
// server on the node's loopback only.
func (n *node) kubeletConfig(cp *kubecluster.ControlPlane) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
cgroupRoot: %q
enforceNodeAllocatable: []
protectKernelDefaults: true
failSwapOn: false
localStorageCapacityIsolation: false
containerRuntimeEndpoint: %q
address: 127.0.0.1
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
nodeStatusUpdateFrequency: 2s
`, n.cri.cgroupParent, "unix://"+n.cri.sock, cp.CAFile())
}

// startKubelet runs kubelet in containerd's namespaces (nsenter) with a
// client certificate for its Node, and waits until the Node is Ready.
func (n *node) startKubelet(cp *kubecluster.ControlPlane) {
	kubelet := kubecluster.Binary("KUBE_DIR", "kubelet")
	conf := filepath.Join(n.Dir, "kubelet.yaml")
	Expect(os.WriteFile(conf, []byte(n.kubeletConfig(cp)), 0o644)).To(Succeed())
	kubeconfig := cp.CertKubeconfig("kubelet", "system:node:"+kubeletNodeName, "system:nodes")
	log, err := os.Create(filepath.Join(n.Dir, "kubelet.log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(tools.nsenter, fmt.Sprintf("--target=%d", n.cri.cmd.Process.Pid), "--mount", "--net", "--",
		kubelet, "--config", conf, "--kubeconfig", kubeconfig, "--hostname-override", kubeletNodeName,
		"--node-ip", nodeIP, "--root-dir", "/var/lib/kubelet", "--v=2")
	cmd.Env = n.cri.env
	cmd.Stdout, cmd.Stderr = log, log
	Expect(cmd.Start()).To(Succeed())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			dumpFile("kubelet log", log.Name())
		}
		cmd.Process.Kill()
		<-exited
		log.Close()
	})

	By("kubelet registers the node")
	Eventually(func() error {
		select {
		case <-exited:
			return StopTrying("kubelet exited: " + cmd.ProcessState.String())
		default:
		}
		_, err := cp.Client.CoreV1().Nodes().Get(context.Background(), kubeletNodeName, metav1.GetOptions{})
		return err
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed(), "kubelet's node (log %s)", log.Name())
}

// waitNodeReady waits until the Node is Ready: containerd reports its
// network ready once a conflist is in place.
func (n *node) waitNodeReady(cp *kubecluster.ControlPlane) {
	Eventually(func() error {
		node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), kubeletNodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node not Ready: %+v", node.Status.Conditions)
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
}

// apiPod is an application pod as a user creates it: the suite's pause
// image (the only image on the node; kubelet must never pull), no service
// account token (the pod needs none). Its grace period is not 0: a delete
// with none removes the pod from the API at once, before kubelet has
// stopped its sandbox (a force delete), and a deletion through the API
// would no longer say kubelet's teardown is done.
func apiPod(name string) *corev1.Pod {
	no, grace := false, int64(1)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podNamespace, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: pauseImage, ImagePullPolicy: corev1.PullNever}}}}
}

// runPod creates a pod through the API server and waits until kubelet
// has it Running; it returns the sandbox kubelet made for it, as the CRI
// reports it.
func (n *node) runPod(cp *kubecluster.ControlPlane, pod *corev1.Pod) *sandbox {
	ctx := context.Background()
	cp.WaitDefaultServiceAccount()
	_, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	var got *corev1.Pod
	Eventually(func() (corev1.PodPhase, error) {
		got, err = cp.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return got.Status.Phase, nil
	}, 60*time.Second, 250*time.Millisecond).Should(Equal(corev1.PodRunning), "pod %s", pod.Name)
	Expect(got.Spec.NodeName).To(Equal(kubeletNodeName))
	out, err := n.cri.crictl("pods", "--name", "^"+pod.Name+"$", "--namespace", pod.Namespace, "--state", "ready", "-q")
	Expect(err).NotTo(HaveOccurred())
	ids := strings.Fields(out)
	Expect(ids).To(HaveLen(1), "kubelet's ready sandbox of %s", pod.Name)
	s := &sandbox{id: ids[0], name: pod.Name, ns: pod.Namespace}
	st := n.inspectp(s)
	s.pid = st.Info.Pid
	s.ip, err = netip.ParseAddr(st.Status.Network.IP)
	Expect(err).NotTo(HaveOccurred(), "pod IP %q", st.Status.Network.IP)
	Expect(got.Status.PodIP).To(Equal(s.ip.String()), "the API's pod IP is the CRI's")
	return s
}

// deletePod deletes a pod through the API server and waits until it is
// gone from it: kubelet has stopped its sandbox (the CNI DEL) and
// confirmed the deletion.
func (n *node) deletePod(cp *kubecluster.ControlPlane, s *sandbox) {
	Expect(cp.Client.CoreV1().Pods(s.namespace()).Delete(context.Background(), s.name, metav1.DeleteOptions{})).To(Succeed())
	n.waitDeleted(cp, s)
}
