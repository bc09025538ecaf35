package kubecluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// ReadManifests decodes every object of the YAML files in dir (as
// kubectl apply -f dir reads them), in file order.
func ReadManifests(dir string) []runtime.Object {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty(), "no manifests in %s", dir)
	decode := scheme.Codecs.UniversalDeserializer().Decode
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		Expect(err).NotTo(HaveOccurred())
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, _, err := decode([]byte(doc), nil, nil)
			Expect(err).NotTo(HaveOccurred(), "%s", f)
			objs = append(objs, obj)
		}
	}
	return objs
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Create creates one object of the kinds deploy/kubernetes holds through
// the API server.
func (cp *ControlPlane) Create(ctx context.Context, obj runtime.Object) error {
	c := cp.Client
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.DaemonSet:
		_, err = c.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		Fail("cannot create a " + obj.GetObjectKind().GroupVersionKind().Kind + ": kubecluster.Create knows deploy/kubernetes's kinds only")
	}
	return err
}
