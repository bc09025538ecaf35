package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vpccni/vpccni/internal/testns"
)

// The control plane's link to a node: a veth pair, the API server's end
// in the control plane's namespace, the other moved into the node's.
const (
	apiserverAddr = "192.168.250.2"
	apiNodeAddr   = "192.168.250.1"
	apiPort       = 6443
)

// controlPlane is etcd and kube-apiserver, built by make tools at the
// Makefile's versions, in a network namespace of their own. Nothing is
// written outside its temp dir.
type controlPlane struct {
	ns      *testns.NS
	dir     string
	caPEM   []byte
	client  *kubernetes.Clientset
	log     *lockedBuffer // both processes' output, for a failure's message
	peerEnd string        // the veth end waiting to be moved into a node
}

// kubeBinary is a binary make tools builds; its absence fails the spec.
func kubeBinary(env, rel string) string {
	base := os.Getenv(env)
	if base == "" {
		Fail("$" + env + " is not set: run the suite through make (make integration), after make tools, which builds etcd and kube-apiserver")
	}
	p := filepath.Join(base, rel)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		Fail(fmt.Sprintf("%s ($%s): not an executable (%v): make tools builds it", p, env, err))
	}
	return p
}

// startControlPlane starts etcd and kube-apiserver and waits for /readyz.
// The test talks to the API server as system:masters (a client
// certificate of the control plane's CA), dialling from inside its
// namespace.
func startControlPlane() *controlPlane {
	requireRoot()
	etcd, apiserver := kubeBinary("ETCD", ""), kubeBinary("KUBE_DIR", "kube-apiserver")
	cp := &controlPlane{log: &lockedBuffer{}, peerEnd: "kapi-node"}
	var err error
	cp.ns, err = testns.New("vpccni-kapi")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { cp.ns.Close() })
	cp.dir, err = os.MkdirTemp("", "vpccni-kapi-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { os.RemoveAll(cp.dir) })

	h, err := netlink.NewHandleAt(nsHandle(cp.ns))
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	lo, err := h.LinkByName("lo")
	Expect(err).NotTo(HaveOccurred())
	Expect(h.LinkSetUp(lo)).To(Succeed())
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kapi0"}, PeerName: cp.peerEnd}
	Expect(h.LinkAdd(veth)).To(Succeed())
	l, err := h.LinkByName("kapi0")
	Expect(err).NotTo(HaveOccurred())
	a, err := netlink.ParseAddr(apiserverAddr + "/30")
	Expect(err).NotTo(HaveOccurred())
	Expect(h.AddrAdd(l, a)).To(Succeed())
	Expect(h.LinkSetUp(l)).To(Succeed())

	certs := cp.writeCerts()
	By("etcd, on the control plane's loopback")
	cp.start(etcd, "--name", "vpccni", "--data-dir", filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "vpccni=http://127.0.0.1:2380", "--log-level", "warn")
	By("kube-apiserver, with RBAC and the default admission plugins")
	cp.start(apiserver, "--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", apiserverAddr, "--advertise-address", apiserverAddr, "--secure-port", fmt.Sprint(apiPort),
		"--cert-dir", filepath.Join(cp.dir, "apiserver"),
		"--tls-cert-file", certs["serving.crt"], "--tls-private-key-file", certs["serving.key"],
		"--client-ca-file", certs["ca.crt"],
		"--service-account-key-file", certs["sa.pub"], "--service-account-signing-key-file", certs["sa.key"],
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/16", "--authorization-mode", "Node,RBAC",
		// As kubeadm and EKS run it: aws-vpc-cni-init is privileged (it
		// writes sysctls), which the server's default refuses.
		"--allow-privileged=true")

	admin := &rest.Config{Host: fmt.Sprintf("https://%s:%d", apiserverAddr, apiPort),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.caPEM, CertFile: certs["admin.crt"], KeyFile: certs["admin.key"]},
		Dial:            cp.dial, Timeout: 10 * time.Second}
	cp.client, err = kubernetes.NewForConfig(admin)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		_, err := cp.client.RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		return err
	}, 90*time.Second, 250*time.Millisecond).Should(Succeed(), "kube-apiserver never ready; its log:\n%s", cp.log)
	return cp
}

// start runs one control-plane process in its namespace, killed at
// cleanup.
func (cp *controlPlane) start(bin string, args ...string) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = cp.dir
	w := io.MultiWriter(GinkgoWriter, cp.log)
	cmd.Stdout, cmd.Stderr = w, w
	Expect(cp.ns.Do(cmd.Start)).To(Succeed(), "start %s", bin)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	DeferCleanup(func() {
		cmd.Process.Kill()
		<-done
	})
}

// dial connects from inside the control plane's namespace (a socket
// belongs to the namespace it is made in).
func (cp *controlPlane) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := cp.ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// connect moves the control plane's link end into a node's namespace, so
// that the node reaches the API server at apiserverAddr.
func (cp *controlPlane) connect(node *testns.NS) {
	h, err := netlink.NewHandleAt(nsHandle(cp.ns))
	Expect(err).NotTo(HaveOccurred())
	defer h.Close()
	l, err := h.LinkByName(cp.peerEnd)
	Expect(err).NotTo(HaveOccurred())
	target := nsHandle(node)
	Expect(h.LinkSetNsFd(l, int(target))).To(Succeed())
	nh, err := netlink.NewHandleAt(target)
	Expect(err).NotTo(HaveOccurred())
	defer nh.Close()
	l, err = nh.LinkByName(cp.peerEnd)
	Expect(err).NotTo(HaveOccurred())
	a, err := netlink.ParseAddr(apiNodeAddr + "/30")
	Expect(err).NotTo(HaveOccurred())
	Expect(nh.AddrAdd(l, a)).To(Succeed())
	Expect(nh.LinkSetUp(l)).To(Succeed())
}

// kubeconfig writes a kubeconfig for a bearer token kept in tokenFile
// (written later: client-go reads it on first use).
func (cp *controlPlane) kubeconfig(name, tokenFile string) string {
	ca := filepath.Join(cp.dir, "ca.crt")
	p := filepath.Join(cp.dir, name+".kubeconfig")
	Expect(os.WriteFile(p, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vpccni
  cluster: {server: "https://%s:%d", certificate-authority: %q}
users:
- name: %s
  user: {tokenFile: %q}
contexts:
- name: vpccni
  context: {cluster: vpccni, user: %s}
current-context: vpccni
`, apiserverAddr, apiPort, ca, name, tokenFile, name)), 0o600)).To(Succeed())
	return p
}

// writeCerts makes the control plane's CA, the API server's serving
// certificate, an admin client certificate (system:masters) and the
// service-account signing key, in its dir; it returns their paths.
func (cp *controlPlane) writeCerts() map[string]string {
	paths := map[string]string{}
	write := func(name, typ string, der []byte) {
		p := filepath.Join(cp.dir, name)
		Expect(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)).To(Succeed())
		paths[name] = p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		Expect(err).NotTo(HaveOccurred())
		return k
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) {
		der, err := x509.MarshalECPrivateKey(k)
		Expect(err).NotTo(HaveOccurred())
		write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vpccni-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	ca, err := x509.ParseCertificate(caDER)
	Expect(err).NotTo(HaveOccurred())
	write("ca.crt", "CERTIFICATE", caDER)
	cp.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	leaf := func(name string, serial int64, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subject, NotBefore: now.Add(-time.Hour),
			NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: dns}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		Expect(err).NotTo(HaveOccurred())
		write(name+".crt", "CERTIFICATE", der)
		writeKey(name+".key", k)
	}
	leaf("serving", 2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP(apiserverAddr), net.ParseIP("10.96.0.1"), net.ParseIP("127.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	leaf("admin", 3, pkix.Name{CommonName: "vpccni-test-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	saKey := key()
	writeKey("sa.key", saKey)
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	Expect(err).NotTo(HaveOccurred())
	write("sa.pub", "PUBLIC KEY", pub)
	return paths
}
