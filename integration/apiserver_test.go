package integration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vpccni/vpccni/internal/testsupport/kubecluster"
	"github.com/vpccni/vpccni/internal/testsupport/testns"
	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
	"github.com/vpccni/vpccni/kernel"
)

// These specs run a real kube-apiserver (with etcd, RBAC and the default
// admission plugins) where the rest of the suite has none: deploy/'s
// objects must be admitted by it, and ipamd's pod-ENI source must work
// against it with the aws-node ServiceAccount's own token.
var _ = Describe("a real API server", Label("k8s", "real-kernel", "ipamd"), func() {
	It("admits deploy/'s ServiceAccount, RBAC and DaemonSet, and the role lets aws-node get pods and nothing more", func() {
		requireRoot()
		cp := kubecluster.Start()
		ctx := context.Background()
		applyDeploy(ctx, cp)

		ds, err := cp.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "aws-node", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ds.Spec.Template.Labels).To(HaveKeyWithValue("k8s-app", "aws-node"))
		Expect(ds.Spec.Template.Spec.ServiceAccountName).To(Equal("aws-node"))

		By("the API server's authorizer answers for the aws-node ServiceAccount")
		for _, tc := range []struct {
			verb, resource string
			allowed        bool
		}{{"get", "pods", true}, {"list", "pods", false}, {"watch", "pods", false}, {"patch", "pods", false}, {"get", "secrets", false}} {
			review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:kube-system:aws-node",
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"},
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "default", Verb: tc.verb, Resource: tc.resource}}}
			got, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(got.Status.Allowed).To(Equal(tc.allowed), "%s %s: %+v", tc.verb, tc.resource, got.Status)
		}

		By("a DaemonSet whose selector does not select its pods is refused: the server validates what it admits")
		bad := ds.DeepCopy()
		bad.ObjectMeta = metav1.ObjectMeta{Name: "aws-node-bad", Namespace: "kube-system"}
		bad.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "something-else"}}
		_, err = cp.Client.AppsV1().DaemonSets("kube-system").Create(ctx, bad, metav1.CreateOptions{})
		Expect(err).To(MatchError(ContainSubstring("`selector` does not match template `labels`")))
	})

	It("serves ipamd's pod-ENI lookups with the aws-node ServiceAccount's token: a branch pod gets its VLAN, a regular pod an address", func() {
		requireRoot()
		cp := kubecluster.Start()
		ctx := context.Background()
		applyDeploy(ctx, cp)

		By("a token of the aws-node ServiceAccount (TokenRequest), in a kubeconfig for ipamd")
		tok, err := cp.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "aws-node",
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &tokenLifetime}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		tokenFile := filepath.Join(cp.Dir, "aws-node.token")
		Expect(os.WriteFile(tokenFile, []byte(tok.Status.Token), 0o600)).To(Succeed())
		kubeconfig := cp.TokenKubeconfig("aws-node", tokenFile)

		By("the pods, as the VPC resource controller leaves them: db-0 with a pod-ENI limit and its branch ENI's annotation")
		_, err = cp.Client.CoreV1().ServiceAccounts("default").Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		createPod(ctx, cp, "web-0", nil, nil)
		createPod(ctx, cp, "db-0", corev1.ResourceList{"vpc.amazonaws.com/pod-eni": resource.MustParse("1")},
			map[string]string{"vpc.amazonaws.com/pod-eni": `[{"eniId":"eni-0branch00000007","ifAddress":"0a:bb:00:00:00:07",` +
				`"privateIp":"10.1.0.21","vlanID":7,"subnetCidr":"10.1.0.0/24"}]`})

		n := newNodeWith("m5.large", func(h kernel.API) {
			mac, _ := net.ParseMAC(trunkMAC)
			Expect(h.AddVeth(kernel.VethSpec{Name: "eth2", PeerName: "vpc2", HardwareAddr: mac, MTU: 9001})).To(Succeed())
			Expect(h.LinkSetUp("eth2")).To(Succeed())
			Expect(h.LinkSetUp("vpc2")).To(Succeed())
		}, "--enable-pod-eni", "--pod-eni-source", "kubernetes", "--kubeconfig", kubeconfig,
			// The control plane is off the VPC: without the exclusion the
			// node's SNAT rule would give ipamd's connections to it the
			// primary ENI's address, which the control plane cannot
			// answer.
			"--exclude-snat-cidrs", kubecluster.APIServerAddr+"/32")
		cp.Connect(n.NS)

		By("ipamd's answer for db-0: the branch ENI of the annotation, read from the API server")
		reply := n.addNetwork("db-0")
		Expect(reply.Success).To(BeTrue())
		Expect(reply.PodVlanId).To(Equal(int32(7)))
		Expect(reply.PodENIMAC).To(Equal("0a:bb:00:00:00:07"))
		Expect(reply.IPAllocationMetadata).To(HaveLen(1))
		Expect(reply.IPAllocationMetadata[0].IPv4Addr).To(Equal("10.1.0.21"))

		By("a regular pod gets an address from the pool through the plugin")
		p := n.newPod("web-0")
		ip := podAddr(n.add(p))
		Expect(ip.String()).To(HavePrefix("10.0."))
		Expect(n.del(p)).To(Succeed())

		By("db-0 through the plugin: its VLAN path where the kernel has 802.1Q links")
		db := n.newPod("db-0")
		if ok, reason := testns.VlanSupported(); ok {
			res := n.add(db)
			Expect(podAddr(res).String()).To(Equal("10.1.0.21"))
			Expect(n.del(db)).To(Succeed())
		} else {
			// This kernel has no VLAN links: the plugin must refuse the
			// pod and say why, and leave nothing behind.
			GinkgoWriter.Printf("the branch pod's kernel part is not run: %s\n", reason)
			_, err := n.cni.AddNetworkList(ctx, n.list, db.rt)
			Expect(err).To(HaveOccurred())
			Expect(strings.ToLower(err.Error())).To(ContainSubstring("vlan"), "the plugin's refusal names the VLAN link: %v", err)
			Expect(n.del(db)).To(Succeed())
			Expect(linkNames(n.Host)).NotTo(ContainElement(HavePrefix("vlan")))
		}

		By("a pod the API server does not have: ipamd refuses the ADD rather than guess")
		Expect(n.addNetwork("ghost-0").Success).To(BeFalse())
	})
})

// applyDeploy creates every object of deploy/kubernetes through the API
// server, as kubectl apply would on a new cluster.
func applyDeploy(ctx context.Context, cp *kubecluster.ControlPlane) {
	for _, obj := range kubecluster.ReadManifests(filepath.Join("..", "deploy", "kubernetes")) {
		Expect(cp.Create(ctx, obj)).To(Succeed(), "%T", obj)
	}
}

func createPod(ctx context.Context, cp *kubecluster.ControlPlane, name string, limits corev1.ResourceList, annotations map[string]string) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
			Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
	_, err := cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// addNetwork asks ipamd directly, as the plugin does, for a pod's
// address, and returns its reply.
func (n *node) addNetwork(pod string) *rpc.AddNetworkReply {
	conn, err := grpc.NewClient("unix://"+n.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reply, err := rpcgrpc.NewCNIBackendClient(conn).AddNetwork(ctx, &rpc.AddNetworkRequest{ContainerID: "direct-" + pod,
		IfName: "eth0", NetworkName: "aws-cni", K8S_POD_NAMESPACE: "default", K8S_POD_NAME: pod,
		K8S_POD_INFRA_CONTAINER_ID: "direct-" + pod, Netns: "/proc/self/ns/net"})
	Expect(err).NotTo(HaveOccurred())
	return reply
}

// tokenLifetime is the aws-node token's, in seconds: the spec's length.
var tokenLifetime int64 = 3600
