package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vpccni/vpccni/internal/testsupport/kubecluster"
)

// A DaemonSet node is a kubelet node on which ipamd is not the suite's
// process: deploy/kubernetes's aws-node DaemonSet runs it from vpccni's
// images (images_test.go), its init container installs the plugins into
// /opt/cni/bin and aws-node writes 10-aws.conflist into /etc/cni/net.d,
// where containerd reads them, and ipamd's socket and checkpoint are in
// /var/run/aws-node, where the plugin finds them: the node's dirs bound
// over those fixed paths in containerd's mount namespace (where kubelet
// resolves the DaemonSet's hostPath volumes too).

// daemonSetBinds are the aws-node paths, bound to the node's dirs.
func (n *node) daemonSetBinds() map[string]string {
	binds := map[string]string{
		"/etc/cni/net.d": filepath.Join(n.Dir, "containerd", "net.d"),
		"/opt":           filepath.Join(n.Dir, "opt"),
		"/run/aws-node":  filepath.Join(n.Dir, "aws-node"),
	}
	for _, d := range []string{"opt/cni/bin", "aws-node", "containerd/net.d"} {
		Expect(os.MkdirAll(filepath.Join(n.Dir, d), 0o755)).To(Succeed())
	}
	return binds
}

// newDaemonSetNode builds a kubelet node whose ipamd is the aws-node
// DaemonSet's, on instanceType's in-memory instance; it returns once the
// aws-node pod is Ready and the Node with it.
func newDaemonSetNode(cp *kubecluster.ControlPlane, instanceType string, ipamdArgs ...string) *node {
	return newDaemonSetNodeOf("", cp, instanceType, ipamdArgs...)
}

// newDaemonSetNodeOf is newDaemonSetNode with the images of a build
// (buildNodeImages).
func newDaemonSetNodeOf(deletePolicy string, cp *kubecluster.ControlPlane, instanceType string, ipamdArgs ...string) *node {
	requireContainerd2()
	awsNode, init := buildNodeImages(deletePolicy)
	// The control plane is off the VPC: without the exclusion the node's
	// SNAT rule would give kubelet's connections to it the primary ENI's
	// address, which the control plane cannot answer.
	ipamdArgs = append(ipamdArgs, "--exclude-snat-cidrs", kubecluster.APIServerAddr+"/32")
	n := buildNode(&node{plugin: "vpc-cni", runtime: containerd24, kubelet: true, daemonSet: true}, instanceType)
	n.pluginLog = filepath.Join(n.Dir, "log", "aws-routed-eni", "plugin.log")
	n.journal = filepath.Join(n.Dir, "log", "aws-routed-eni", "journal.jsonl")
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			dumpFile("aws-node's ipamd log", filepath.Join(n.Dir, "log", "aws-routed-eni", "ipamd.log"))
			dumpFile("plugin log", n.pluginLog)
		}
	})
	for _, archive := range []string{awsNode, init} {
		out, err := exec.Command(n.cri.ctr, "--address", n.cri.sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "ctr images import %s: %s", archive, out)
	}
	cp.Connect(n.NS)
	n.startKubelet(cp)

	By("deploy/kubernetes applied: the aws-node DaemonSet starts ipamd on the node")
	ctx := context.Background()
	for _, obj := range kubecluster.ReadManifests(filepath.Join("..", "deploy", "kubernetes")) {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			forTestNode(ds, instanceType, ipamdArgs)
		}
		Expect(cp.Create(ctx, obj)).To(Succeed(), "%T", obj)
	}
	n.awsNodeReady(cp)
	n.waitNodeReady(cp)
	return n
}

// forTestNode is the one change the suite makes to deploy/'s DaemonSet:
// the aws-node container's command gives ipamd the in-memory cloud of the
// node's instance type (the manifest's own command does the same with
// the default one, an m5.large) and the spec's ipamd flags, the plugin's
// journal is on, and the memory cloud's check that it runs in
// a named network namespace, not the machine's, is given the named
// namespaces to look in; the iptables lock is the node's own, not the
// machine's /run/xtables.lock (kubelet would create it there).
func forTestNode(ds *appsv1.DaemonSet, instanceType string, ipamdArgs []string) {
	spec := &ds.Spec.Template.Spec
	var c *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "aws-node" {
			c = &spec.Containers[i]
		}
	}
	Expect(c).NotTo(BeNil(), "deploy/'s DaemonSet has an aws-node container")
	c.Command = append([]string{"/app/vpccni-node", "run", "--", "--cloud", "memory", "--instance-type", instanceType}, ipamdArgs...)
	// The plugin's journal, for the drain's replay: an operator's switch.
	c.Env = append(c.Env, corev1.EnvVar{Name: "VPCCNI_PLUGIN_JOURNAL_FILE", Value: "/var/log/aws-routed-eni/journal.jsonl"})
	hostToContainer := corev1.MountPropagationHostToContainer
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "netns",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/netns"}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "netns", MountPath: "/var/run/netns",
		ReadOnly: true, MountPropagation: &hostToContainer})
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "xtables-lock" {
			spec.Volumes[i].HostPath.Path = "/var/run/aws-node/xtables.lock"
		}
	}
}

// awsNodePod is the node's aws-node pod, or nil.
func awsNodePod(cp *kubecluster.ControlPlane) *corev1.Pod {
	pods, err := cp.Client.CoreV1().Pods("kube-system").List(context.Background(),
		metav1.ListOptions{LabelSelector: "k8s-app=aws-node"})
	Expect(err).NotTo(HaveOccurred())
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}

// awsNodeReady waits until the aws-node pod is Ready (its readiness probe
// answers through ipamd's socket) and the conflist is in place.
func (n *node) awsNodeReady(cp *kubecluster.ControlPlane) {
	Eventually(func() error {
		p := awsNodePod(cp)
		if p == nil {
			return fmt.Errorf("no aws-node pod")
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("aws-node %s not Ready: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
	}, 120*time.Second, 500*time.Millisecond).Should(Succeed())
	// vpccni-node writes it after its own health check of ipamd, which
	// may come a moment after the readiness probe's.
	Eventually(func() error {
		_, err := os.Stat(filepath.Join(n.Dir, "containerd", "net.d", "10-aws.conflist"))
		return err
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed(), "aws-node writes the conflist")
}
