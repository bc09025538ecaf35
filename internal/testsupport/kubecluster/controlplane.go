// Package kubecluster is test support for the suites that need a real
// Kubernetes control plane: etcd and kube-apiserver (and, for workloads,
// kube-controller-manager and kube-scheduler), built by make tools at the
// Makefile's versions, run in a network namespace of their own with every
// file in a temp dir. It is driven from Ginkgo specs: failures fail the
// spec, and everything started is stopped by the spec's cleanup. Shipped
// code never imports it.
package kubecluster

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vpccni/vpccni/internal/testsupport/testns"
)

// The control plane's link to a node: a veth pair, the API server's end
// in the control plane's namespace, the other moved into the node's.
const (
	APIServerAddr = "192.168.250.2"
	NodeAddr      = "192.168.250.1"
	APIPort       = 6443
)

// ControlPlane is etcd and kube-apiserver in a network namespace of their
// own; StartControllers adds kube-controller-manager and kube-scheduler.
type ControlPlane struct {
	NS     *testns.NS
	Dir    string
	Client *kubernetes.Clientset // as system:masters
	Log    *testns.SyncBuffer    // every process's output, for a failure's message
	ca     *authority
	// peerEnd is the veth end waiting to be moved into a node.
	peerEnd string
}

// Binary is a binary make tools builds, under $env; its absence fails the
// spec (a suite that did not run must not pass).
func Binary(env, rel string) string {
	base := os.Getenv(env)
	if base == "" {
		Fail("$" + env + " is not set: run the suite through make, after make tools, which builds etcd and the Kubernetes binaries")
	}
	p := filepath.Join(base, rel)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		Fail(fmt.Sprintf("%s ($%s): not an executable (%v): make tools builds it", p, env, err))
	}
	return p
}

// Start starts etcd and kube-apiserver and waits for /readyz. The test
// talks to the API server as system:masters (a client certificate of the
// control plane's CA), dialling from inside its namespace.
func Start() *ControlPlane {
	etcd, apiserver := Binary("ETCD", ""), Binary("KUBE_DIR", "kube-apiserver")
	cp := &ControlPlane{Log: &testns.SyncBuffer{}, peerEnd: "kapi-node"}
	var err error
	cp.NS, err = testns.New("vpccni-kapi")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { cp.NS.Close() })
	cp.Dir, err = os.MkdirTemp("", "vpccni-kapi-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(cp.Dir) })
	cp.plumb()

	cp.ca, err = newAuthority(cp.Dir)
	Expect(err).NotTo(HaveOccurred())
	Expect(cp.ca.issue("serving", pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP(APIServerAddr), net.ParseIP("10.96.0.1"), net.ParseIP("127.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"})).To(Succeed())
	Expect(cp.ca.issue("admin", pkix.Name{CommonName: "vpccni-test-admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil)).To(Succeed())
	Expect(cp.ca.serviceAccountKey()).To(Succeed())

	By("etcd, on the control plane's loopback")
	cp.start(etcd, "--name", "vpccni", "--data-dir", filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "vpccni=http://127.0.0.1:2380", "--log-level", "warn")
	By("kube-apiserver, with RBAC, the Node authorizer and the default admission plugins")
	cp.start(apiserver, "--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", APIServerAddr, "--advertise-address", APIServerAddr, "--secure-port", fmt.Sprint(APIPort),
		"--cert-dir", filepath.Join(cp.Dir, "apiserver"),
		"--tls-cert-file", cp.ca.path("serving.crt"), "--tls-private-key-file", cp.ca.path("serving.key"),
		"--client-ca-file", cp.ca.path("ca.crt"),
		"--service-account-key-file", cp.ca.path("sa.pub"), "--service-account-signing-key-file", cp.ca.path("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/16", "--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		// As kubeadm and EKS run it: aws-vpc-cni-init is privileged (it
		// writes sysctls), which the server's default refuses.
		"--allow-privileged=true")

	admin := &rest.Config{Host: cp.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.pem, CertFile: cp.ca.path("admin.crt"), KeyFile: cp.ca.path("admin.key")},
		Dial:            cp.Dial, Timeout: 10 * time.Second}
	cp.Client, err = kubernetes.NewForConfig(admin)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		_, err := cp.Client.RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed(), "kube-apiserver never ready; its log:\n%s", cp.Log)
	return cp
}

// URL is the API server's address as the node and the controllers reach it.
func (cp *ControlPlane) URL() string { return fmt.Sprintf("https://%s:%d", APIServerAddr, APIPort) }

// CAFile is the control plane's CA certificate, for kubeconfigs.
func (cp *ControlPlane) CAFile() string { return cp.ca.path("ca.crt") }

// StartControllers runs kube-controller-manager (the DaemonSet, service
// account and node lifecycle controllers among its defaults) and
// kube-scheduler in the control plane's namespace, each with a client
// certificate of its own system user (kube-controller-manager's
// controllers then act as their own service accounts, as kubeadm runs
// them: its user alone may not aggregate the cluster roles). Neither serves HTTPS: nothing here
// scrapes them.
func (cp *ControlPlane) StartControllers() {
	kcm, sched := Binary("KUBE_DIR", "kube-controller-manager"), Binary("KUBE_DIR", "kube-scheduler")
	By("kube-controller-manager and kube-scheduler")
	cp.start(kcm, "--kubeconfig", cp.CertKubeconfig("kcm", "system:kube-controller-manager"),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=true",
		"--service-account-private-key-file", cp.ca.path("sa.key"), "--root-ca-file", cp.ca.path("ca.crt"))
	cp.start(sched, "--kubeconfig", cp.CertKubeconfig("scheduler", "system:kube-scheduler"),
		"--leader-elect=false", "--secure-port=0")
}

// WaitDefaultServiceAccount waits until the service account controller
// has made the default namespace's default ServiceAccount: pods are
// refused until then. (A spec calls it when it first needs it, so that
// kube-controller-manager starts while the node is being built.)
func (cp *ControlPlane) WaitDefaultServiceAccount() {
	Eventually(func() error {
		_, err := cp.Client.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		return err
	}, 60*time.Second, 250*time.Millisecond).Should(Succeed(), "kube-controller-manager's default ServiceAccount; the log:\n%s", cp.Log)
}

// start runs one control-plane process in its namespace, killed at
// cleanup.
func (cp *ControlPlane) start(bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = cp.Dir
	w := io.MultiWriter(GinkgoWriter, cp.Log)
	cmd.Stdout, cmd.Stderr = w, w
	Expect(cp.NS.Do(cmd.Start)).To(Succeed(), "start %s", bin)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	DeferCleanup(func() {
		cmd.Process.Kill()
		<-done
	})
}

// plumb brings up the control plane's loopback and its link to a node.
func (cp *ControlPlane) plumb() {
	h, err := netlink.NewHandleAt(handle(cp.NS))
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	lo, err := h.LinkByName("lo")
	Expect(err).NotTo(HaveOccurred())
	Expect(h.LinkSetUp(lo)).To(Succeed())
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kapi0"}, PeerName: cp.peerEnd}
	Expect(h.LinkAdd(veth)).To(Succeed())
	l, err := h.LinkByName("kapi0")
	Expect(err).NotTo(HaveOccurred())
	a, err := netlink.ParseAddr(APIServerAddr + "/30")
	Expect(err).NotTo(HaveOccurred())
	Expect(h.AddrAdd(l, a)).To(Succeed())
	Expect(h.LinkSetUp(l)).To(Succeed())
}

// Dial connects from inside the control plane's namespace (a socket
// belongs to the namespace it is made in).
func (cp *ControlPlane) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := cp.NS.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Connect moves the control plane's link end into a node's namespace, so
// that the node reaches the API server at APIServerAddr.
func (cp *ControlPlane) Connect(node *testns.NS) {
	h, err := netlink.NewHandleAt(handle(cp.NS))
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	l, err := h.LinkByName(cp.peerEnd)
	Expect(err).NotTo(HaveOccurred())
	target := handle(node)
	Expect(h.LinkSetNsFd(l, int(target))).To(Succeed())
	nh, err := netlink.NewHandleAt(target)
	Expect(err).NotTo(HaveOccurred())
	defer nh.Close()
	l, err = nh.LinkByName(cp.peerEnd)
	Expect(err).NotTo(HaveOccurred())
	a, err := netlink.ParseAddr(NodeAddr + "/30")
	Expect(err).NotTo(HaveOccurred())
	Expect(nh.AddrAdd(l, a)).To(Succeed())
	Expect(nh.LinkSetUp(l)).To(Succeed())
}

// TokenKubeconfig writes a kubeconfig for a bearer token kept in
// tokenFile (written later: client-go reads it on first use).
func (cp *ControlPlane) TokenKubeconfig(name, tokenFile string) string {
	return cp.kubeconfig(name, fmt.Sprintf("{tokenFile: %q}", tokenFile))
}

// CertKubeconfig writes a kubeconfig for a client certificate of the
// control plane's CA for user (CN) in groups (O).
func (cp *ControlPlane) CertKubeconfig(name, user string, groups ...string) string {
	Expect(cp.ca.issue(name, pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)).To(Succeed())
	return cp.kubeconfig(name, fmt.Sprintf("{client-certificate: %q, client-key: %q}", cp.ca.path(name+".crt"), cp.ca.path(name+".key")))
}

func (cp *ControlPlane) kubeconfig(name, user string) string {
	p := filepath.Join(cp.Dir, name+".kubeconfig")
	Expect(os.WriteFile(p, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vpccni
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: %s
contexts:
- name: vpccni
  context: {cluster: vpccni, user: %s}
current-context: vpccni
`, cp.URL(), cp.CAFile(), name, user, name)), 0o600)).To(Succeed())
	return p
}

func handle(ns *testns.NS) netns.NsHandle {
	h, err := netns.GetFromPath(ns.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { h.Close() })
	return h
}
