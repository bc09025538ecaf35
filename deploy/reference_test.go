package deploy

// The reference's own manifest (config/master/aws-k8s-cni.yaml of the
// module make tools unpacks) with vpccni's two images in it is a way to
// run vpccni: every document decodes strictly, and the pod checks that
// vpccni's manifests pass hold for it too.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const refManifestPath = "config/master/aws-k8s-cni.yaml"

// The reference's network policy agent: vpccni has none, and builds no
// image for it.
const nodeAgentContainer = "aws-eks-nodeagent"

// readReference reads the reference's manifest; without
// VPCCNI_REFCNI_SRC there is nothing to read: a plain go test skips, but
// under CI (make always sets it) that is a failure, never a pass.
func readReference(t *testing.T) []byte {
	t.Helper()
	src := os.Getenv("VPCCNI_REFCNI_SRC")
	if src == "" {
		const why = "VPCCNI_REFCNI_SRC is unset: make sets it (make tools unpacks the reference module there)"
		if os.Getenv("CI") != "" {
			t.Fatal(why + "; under CI this test must run")
		}
		t.Skip(why)
	}
	raw, err := os.ReadFile(filepath.Join(src, refManifestPath))
	if err != nil {
		t.Fatalf("VPCCNI_REFCNI_SRC is set but its manifest is missing (make tools unpacks it): %v", err)
	}
	return raw
}

// adoption is how the reference's manifest is given to vpccni; a broken
// copy leaves a step out.
type adoption struct {
	keepCRD, keepNodeAgent, keepImages bool
}

// adopt is the reference's manifest as vpccni runs it:
//   - the ENIConfig CustomResourceDefinition is left out: it is for
//     custom networking, which vpccni does not do, and the client-go
//     scheme has no type for it to be decoded strictly into;
//   - aws-eks-nodeagent is removed, with the volumes only it mounts;
//   - aws-node and aws-vpc-cni-init run vpccni's images.
func adopt(raw []byte, a adoption, b *bundle) ([]object, error) {
	var objs []object
	for i, doc := range splitDocuments(raw) {
		where := fmt.Sprintf("%s:document %d", refManifestPath, i+1)
		var tm struct{ Kind string }
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if tm.Kind == "CustomResourceDefinition" && !a.keepCRD {
			continue
		}
		obj, _, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		objs = append(objs, object{where, obj})
	}
	for _, o := range objs {
		ds, ok := o.obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		spec := &ds.Spec.Template.Spec
		if !a.keepNodeAgent {
			removeContainer(spec, nodeAgentContainer)
		}
		if !a.keepImages {
			img, _ := makeVar(b.makefile, "MANIFEST_IMAGE")
			initImg, _ := makeVar(b.makefile, "MANIFEST_INIT_IMAGE")
			for _, c := range allContainers(*spec) {
				switch c.Name {
				case nodeContainer:
					c.Image = img
				case initContainer:
					c.Image = initImg
				}
			}
		}
	}
	return objs, nil
}

// removeContainer removes a container and the volumes no other
// container mounts.
func removeContainer(spec *corev1.PodSpec, name string) {
	spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	used := map[string]bool{}
	for _, c := range allContainers(*spec) {
		for _, m := range c.VolumeMounts {
			used[m.Name] = true
		}
	}
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return !used[v.Name] })
}

// checkReference adopts the reference's manifest and runs the pod checks
// on it, beside vpccni's own image build and Makefile.
func checkReference(t *testing.T, raw []byte, a adoption, edit func(*bundle)) (*bundle, []error) {
	t.Helper()
	b, err := parse(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	if b.objects, err = adopt(raw, a, b); err != nil {
		return b, []error{err}
	}
	if edit != nil {
		edit(b)
	}
	return b, run(b, podChecks)
}

func TestReferenceManifestRunsVpccni(t *testing.T) {
	raw := readReference(t)
	b, errs := checkReference(t, raw, adoption{}, nil)
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	// What vpccni leaves alone of the reference's environment, and why:
	// the catalogue's reasons, for the log.
	p, _ := b.podOf()
	runReads, _ := runSettings(envOf(p.node))
	ipamdReads, _ := ipamdEnvNames()
	var exempt []string
	for _, e := range p.node.Env {
		if why, ok := accounted(e.Name); ok && !runReads[e.Name] && !ipamdReads[e.Name] {
			exempt = append(exempt, fmt.Sprintf("%s: %s", e.Name, why))
		}
	}
	sort.Strings(exempt)
	t.Logf("%d objects; variables vpccni does not read (%d):\n%s", len(b.objects), len(exempt), strings.Join(exempt, "\n"))
}

// TestReferenceBrokenCopies: an adoption step left out, or the reference's
// manifest changed, is rejected by a check that names it.
func TestReferenceBrokenCopies(t *testing.T) {
	raw := readReference(t)
	for _, bc := range []struct {
		name string
		a    adoption
		edit func(*bundle)
		want string
	}{
		{name: "network policy agent kept", a: adoption{keepNodeAgent: true}, want: "container aws-eks-nodeagent (image 602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-network-policy-agent"},
		{name: "reference's images kept", a: adoption{keepImages: true}, want: "container aws-node runs image 602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.23.2, want vpccni:dev"},
		{name: "init image not replaced", edit: func(b *bundle) {
			c, _ := container(dsOf(t, b), true, initContainer)
			c.Image = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni-init:v1.23.2"
		}, want: "container aws-vpc-cni-init runs image 602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni-init"},
		{name: "ENIConfig CRD kept", a: adoption{keepCRD: true}, want: `no kind "CustomResourceDefinition"`},
		{name: "variable nobody accounts for", edit: func(b *bundle) {
			c, _ := container(dsOf(t, b), false, nodeContainer)
			setEnv(c, "AWS_VPC_K8S_CNI_NEW_SETTING", "true")
		}, want: "aws-node sets AWS_VPC_K8S_CNI_NEW_SETTING, which vpccni does not read and internal/awsenv does not account for"},
		{name: "value vpccni-node run refuses", edit: func(b *bundle) {
			c, _ := container(dsOf(t, b), false, nodeContainer)
			setEnv(c, "AWS_VPC_K8S_PLUGIN_LOG_FILE", "stdout")
		}, want: "vpccni-node run refuses aws-node's environment"},
		{name: "probe timeout at kubelet's default", edit: func(b *bundle) {
			c, _ := container(dsOf(t, b), false, nodeContainer)
			c.ReadinessProbe.TimeoutSeconds = 0
		}, want: "readinessProbe timeoutSeconds 0 is below"},
	} {
		t.Run(bc.name, func(t *testing.T) {
			_, errs := checkReference(t, raw, bc.a, bc.edit)
			if len(errs) == 0 {
				t.Fatalf("accepted; want an error naming %q", bc.want)
			}
			if got := errors.Join(errs...).Error(); !strings.Contains(got, bc.want) {
				t.Fatalf("rejected, but no error names %q:\n%s", bc.want, got)
			} else {
				t.Logf("rejected:\n%s", got)
			}
		})
	}
}
