package podeni

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const goodAnnotation = `[{"eniId":"eni-0123456789abcdef0","ifAddress":"0A:1B:2C:3D:4E:5F","privateIp":"192.168.5.20",` +
	`"ipv6Addr":"2600:1f14:b::20","vlanID":7,"subnetCidr":"192.168.5.0/24","subnetV6Cidr":"2600:1f14:b::/64"},` +
	`{"eniId":"eni-second","ifAddress":"0a:00:00:00:00:02","privateIp":"192.168.6.9","vlanID":8,"subnetCidr":"192.168.6.0/24"}]`

// pod builds a pod whose first container has the given limits.
func pod(name string, limits []string, annotations map[string]string) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	for _, l := range limits {
		rl[corev1.ResourceName(l)] = resource.MustParse("1")
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Resources: corev1.ResourceRequirements{Limits: rl}},
			// A limit on a later container does not count, as in the
			// reference.
			{Name: "sidecar", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourcePrefix: resource.MustParse("1")}}},
		}},
	}
}

func ann(v string) map[string]string { return map[string]string{AnnotationKey: v} }

func TestKubernetesLookup(t *testing.T) {
	noContainers := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "empty"}}
	client := fake.NewClientset(
		pod("branch", []string{"vpc.amazonaws.com/pod-eni"}, ann(goodAnnotation)),
		pod("branch-prefixed", []string{"vpc.amazonaws.com/pod-eni-foo"}, ann(goodAnnotation)),
		pod("regular", nil, nil),
		pod("regular-annotated", []string{"vpc.amazonaws.com/pod-ips"}, ann(goodAnnotation)),
		noContainers,
		pod("no-annotation", []string{ResourcePrefix}, map[string]string{"other": "x"}),
		pod("not-json", []string{ResourcePrefix}, ann(`{"vlanID":1`)),
		pod("object", []string{ResourcePrefix}, ann(`{"vlanID":1}`)),
		pod("empty-array", []string{ResourcePrefix}, ann(`[]`)),
		pod("vlan-string", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.1.0.5","vlanID":"7"}]`)),
		pod("vlan-zero", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.1.0.5","vlanID":0}]`)),
		pod("vlan-4095", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.1.0.5","vlanID":4095}]`)),
		pod("no-mac", []string{ResourcePrefix}, ann(`[{"privateIp":"10.1.0.5","vlanID":3}]`)),
		pod("bad-mac", []string{ResourcePrefix}, ann(`[{"ifAddress":"zz:00:00:00:00:01","privateIp":"10.1.0.5","vlanID":3}]`)),
		pod("long-mac", []string{ResourcePrefix}, ann(`[{"ifAddress":"00:00:00:00:fe:80:00:00","privateIp":"10.1.0.5","vlanID":3}]`)),
		pod("bad-ip", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.1.0.500","vlanID":3}]`)),
		pod("v6-as-v4", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"2600::5","vlanID":3}]`)),
		pod("bad-ipv6", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","ipv6Addr":"2600:::5","vlanID":3}]`)),
		pod("bad-subnet", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.1.0.5","vlanID":3,"subnetCidr":"10.1.0.0/33"}]`)),
		pod("outside-subnet", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","privateIp":"10.2.0.5","vlanID":3,"subnetCidr":"10.1.0.0/24"}]`)),
		pod("no-address", []string{ResourcePrefix}, ann(`[{"ifAddress":"0a:00:00:00:00:01","vlanID":3}]`)),
	)
	client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "api-down" {
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	src := Kubernetes{Client: client}

	b, err := src.Lookup(context.Background(), "prod", "branch")
	if err != nil || b == nil {
		t.Fatalf("branch pod: %v %v", b, err)
	}
	if b.ENIID != "eni-0123456789abcdef0" || b.VlanID != 7 || b.MAC.String() != "0a:1b:2c:3d:4e:5f" ||
		b.IPv4.String() != "192.168.5.20" || b.IPv6.String() != "2600:1f14:b::20" ||
		b.SubnetV4.String() != "192.168.5.0/24" || b.SubnetV6.String() != "2600:1f14:b::/64" {
		t.Fatalf("branch pod: %+v (the first element, every field)", b)
	}
	if b, err := src.Lookup(context.Background(), "prod", "branch-prefixed"); err != nil || b == nil || b.VlanID != 7 {
		t.Fatalf("limit matched by prefix: %v %v", b, err)
	}

	for _, name := range []string{"regular", "regular-annotated", "empty"} {
		if b, err := src.Lookup(context.Background(), "prod", name); b != nil || err != nil {
			t.Errorf("%s: %v %v, want a regular pod", name, b, err)
		}
	}

	if _, err := src.Lookup(context.Background(), "prod", "gone"); !errors.Is(err, ErrPodNotFound) || !strings.Contains(err.Error(), "prod/gone") {
		t.Errorf("missing pod: %v", err)
	}
	if _, err := src.Lookup(context.Background(), "prod", "api-down"); err == nil || errors.Is(err, ErrPodNotFound) ||
		!apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "etcd is sad") {
		t.Errorf("API error: %v", err)
	}
	for _, nsName := range [][2]string{{"", "x"}, {"prod", ""}} {
		if _, err := src.Lookup(context.Background(), nsName[0], nsName[1]); err == nil || errors.Is(err, ErrPodNotFound) {
			t.Errorf("no pod name %q: %v", nsName, err)
		}
	}

	for name, want := range map[string]string{
		"no-annotation":  "no vpc.amazonaws.com/pod-eni annotation",
		"not-json":       "does not parse as a JSON array",
		"object":         "does not parse as a JSON array",
		"empty-array":    "empty array",
		"vlan-string":    "does not parse as a JSON array",
		"vlan-zero":      "vlanID 0 outside 1..4094",
		"vlan-4095":      "vlanID 4095 outside 1..4094",
		"no-mac":         "no ifAddress",
		"bad-mac":        `ifAddress "zz:00:00:00:00:01"`,
		"long-mac":       "not a 6-byte Ethernet address",
		"bad-ip":         `privateIp "10.1.0.500"`,
		"v6-as-v4":       "IPv4 address 2600::5 is not IPv4",
		"bad-ipv6":       `ipv6Addr "2600:::5"`,
		"bad-subnet":     `subnetCidr "10.1.0.0/33"`,
		"outside-subnet": "outside subnet 10.1.0.0/24",
		"no-address":     "neither an IPv4 nor an IPv6 address",
	} {
		b, err := src.Lookup(context.Background(), "prod", name)
		if b != nil || err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "prod/"+name) {
			t.Errorf("%s: %v %v, want an error with %q", name, b, err, want)
		}
	}
}
