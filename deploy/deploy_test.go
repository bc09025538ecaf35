package deploy

// The deploy files are parsed into their real types (Kubernetes objects
// with the client-go scheme's strict decoder, the conflist with libcni and
// the plugin's own parser) and checked against each other and against the
// binaries' defaults (checks_test.go). TestBrokenCopies shows that every
// check can fail: each entry breaks one thing in a copy of the files, and
// the copy must be rejected for that reason.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// Files, relative to the repository root.
const (
	conflistPath     = "deploy/10-vpccni.conflist"
	dockerfilePath   = "deploy/Dockerfile"
	dockerignorePath = "deploy/Dockerfile.dockerignore"
	scriptPath       = "deploy/install-cni.sh"
	kindPath         = "deploy/kind.yaml"
	manifestDir      = "deploy/kubernetes"
	makefilePath     = "Makefile"
)

// repoRoot is the repository root as seen from this package's directory,
// where go test runs.
const repoRoot = ".."

// files are the deploy files' contents by repository-relative path.
type files map[string][]byte

// readFiles reads every file the checks look at.
func readFiles(t *testing.T) files {
	t.Helper()
	fs := files{}
	for _, p := range []string{conflistPath, dockerfilePath, dockerignorePath, scriptPath, kindPath, makefilePath} {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		fs[p] = b
	}
	manifests, err := filepath.Glob(filepath.Join(repoRoot, manifestDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifests {
		rel, _ := filepath.Rel(repoRoot, m)
		if ext := filepath.Ext(m); ext != ".yaml" && ext != ".yml" {
			t.Fatalf("%s: only .yaml manifests belong in %s (kubectl apply -f applies the whole directory)", rel, manifestDir)
		}
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		fs[filepath.ToSlash(rel)] = b
	}
	return fs
}

// object is one decoded manifest document.
type object struct {
	where string // file:document
	obj   runtime.Object
}

// bundle is everything the checks look at, parsed.
type bundle struct {
	objects    []object
	conflist   []byte
	dockerfile *dockerfile
	ignore     []string // patterns of Dockerfile.dockerignore
	script     string
	kind       []byte
	makefile   string
}

// strictDecoder decodes any type the client-go scheme knows, by its
// apiVersion and kind, and fails on unknown or duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// separator is a YAML document separator line.
var separator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits multi-document YAML on '---' lines, dropping
// documents that hold nothing but comments and blank lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		for _, line := range strings.Split(cur.String(), "\n") {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
				docs = append(docs, bytes.Clone(cur.Bytes()))
				break
			}
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if separator.MatchString(strings.TrimRight(line, "\r\n")) {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// decodeManifests decodes every document of one file into its type.
func decodeManifests(name string, data []byte) ([]object, error) {
	var objs []object
	for i, doc := range splitDocuments(data) {
		where := fmt.Sprintf("%s:document %d", name, i+1)
		obj, _, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		objs = append(objs, object{where, obj})
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%s: no Kubernetes object in it", name)
	}
	return objs, nil
}

// parse decodes the files; a parse error is a rejection, as a check's is.
func parse(fs files) (*bundle, error) {
	b := &bundle{conflist: fs[conflistPath], script: string(fs[scriptPath]), kind: fs[kindPath], makefile: string(fs[makefilePath])}
	var names []string
	for name := range fs {
		if strings.HasPrefix(name, manifestDir+"/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no manifest in %s", manifestDir)
	}
	for _, name := range names {
		objs, err := decodeManifests(name, fs[name])
		if err != nil {
			return nil, err
		}
		b.objects = append(b.objects, objs...)
	}
	var err error
	if b.dockerfile, err = parseDockerfile(string(fs[dockerfilePath])); err != nil {
		return nil, fmt.Errorf("%s: %w", dockerfilePath, err)
	}
	for _, line := range strings.Split(string(fs[dockerignorePath]), "\n") {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			b.ignore = append(b.ignore, s)
		}
	}
	return b, nil
}

// daemonSet is the one DaemonSet of the manifests.
func (b *bundle) daemonSet() (*appsv1.DaemonSet, error) {
	var found []*appsv1.DaemonSet
	for _, o := range b.objects {
		if ds, ok := o.obj.(*appsv1.DaemonSet); ok {
			found = append(found, ds)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("want exactly one DaemonSet in %s, found %d", manifestDir, len(found))
	}
	return found[0], nil
}

// container returns the DaemonSet's (init) container of that name.
func container(ds *appsv1.DaemonSet, init bool, name string) (*corev1.Container, error) {
	list, what := ds.Spec.Template.Spec.Containers, "container"
	if init {
		list, what = ds.Spec.Template.Spec.InitContainers, "init container"
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], nil
		}
	}
	return nil, fmt.Errorf("DaemonSet %s has no %s %q", ds.Name, what, name)
}

func (b *bundle) serviceAccounts() []*corev1.ServiceAccount {
	var out []*corev1.ServiceAccount
	for _, o := range b.objects {
		if v, ok := o.obj.(*corev1.ServiceAccount); ok {
			out = append(out, v)
		}
	}
	return out
}

func (b *bundle) clusterRoles() []*rbacv1.ClusterRole {
	var out []*rbacv1.ClusterRole
	for _, o := range b.objects {
		if v, ok := o.obj.(*rbacv1.ClusterRole); ok {
			out = append(out, v)
		}
	}
	return out
}

func (b *bundle) clusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	var out []*rbacv1.ClusterRoleBinding
	for _, o := range b.objects {
		if v, ok := o.obj.(*rbacv1.ClusterRoleBinding); ok {
			out = append(out, v)
		}
	}
	return out
}

// check runs every check; each names what is wrong.
func check(b *bundle) []error {
	var errs []error
	for _, c := range checks {
		if err := c.fn(b); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errs
}

func TestDeployFilesParseAndAgree(t *testing.T) {
	b, err := parse(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range b.objects {
		kinds[fmt.Sprintf("%T", o.obj)]++
	}
	t.Logf("decoded %d objects: %v", len(b.objects), kinds)
	for _, err := range check(b) {
		t.Error(err)
	}
}

func TestSplitDocuments(t *testing.T) {
	in := "# header only\n---\na: 1\n--- # second\nb: 2\n---\n\n# nothing\n---\nc: |\n  x --- y\n"
	got := splitDocuments([]byte(in))
	want := []string{"a: 1\n", "b: 2\n", "c: |\n  x --- y\n"}
	if len(got) != len(want) {
		t.Fatalf("got %d documents %q, want %q", len(got), got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("document %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// brokenCopy breaks one thing in a copy of the files. Either a text edit
// (old must occur in file; every occurrence is replaced by new) or an edit of the parsed
// objects; the copy must be rejected with an error that contains want.
type brokenCopy struct {
	name     string
	file     string
	old, new string
	edit     func(t *testing.T, b *bundle)
	want     string
}

func brokenCopies() []brokenCopy {
	ds := func(t *testing.T, b *bundle) *appsv1.DaemonSet {
		d, err := b.daemonSet()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ipamdC := func(t *testing.T, b *bundle) *corev1.Container {
		c, err := container(ds(t, b), false, ipamdContainer)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	initC := func(t *testing.T, b *bundle) *corev1.Container {
		c, err := container(ds(t, b), true, installContainer)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	setEnv := func(c *corev1.Container, name, value string) {
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i].Value = value
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	}
	dsFile := manifestDir + "/daemonset.yaml"
	rbacFile := manifestDir + "/rbac.yaml"
	return []brokenCopy{
		// Typos the strict decoder must catch.
		{name: "misspelt field", file: dsFile, old: "terminationGracePeriodSeconds:", new: "terminationGracePeriodSecond:", want: `unknown field "spec.template.spec.terminationGracePeriodSecond"`},
		{name: "field in the wrong case", file: dsFile, old: "hostNetwork:", new: "hostnetwork:", want: `unknown field "spec.template.spec.hostnetwork"`},
		{name: "value of the wrong type", file: dsFile, old: "terminationGracePeriodSeconds: 10", new: "terminationGracePeriodSeconds: ten", want: "terminationGracePeriodSeconds"},
		{name: "duplicate field", file: dsFile, old: "      hostNetwork: true\n", new: "      hostNetwork: true\n      hostNetwork: false\n", want: `key "hostNetwork" already set`},
		{name: "misspelt kind", file: dsFile, old: "kind: DaemonSet", new: "kind: DeamonSet", want: `no kind "DeamonSet"`},
		{name: "unknown field in a later document", file: rbacFile, old: "roleRef:", new: "roleref:", want: `unknown field "roleref"`},

		// The DaemonSet itself.
		{name: "volume mount names no volume", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).VolumeMounts[0].Name = "run-dri"
		}, want: `mounts volume "run-dri", which the pod does not have`},
		{name: "volume nobody mounts", edit: func(t *testing.T, b *bundle) {
			d := ds(t, b)
			d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "xtables-lock",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock"}}})
		}, want: `volume "xtables-lock" is mounted by no container`},
		{name: "not hostNetwork", edit: func(t *testing.T, b *bundle) { ds(t, b).Spec.Template.Spec.HostNetwork = false }, want: "hostNetwork"},
		{name: "priority class dropped", edit: func(t *testing.T, b *bundle) { ds(t, b).Spec.Template.Spec.PriorityClassName = "" }, want: "system-node-critical"},
		{name: "longer grace period", edit: func(t *testing.T, b *bundle) {
			g := int64(30)
			ds(t, b).Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}, want: "terminationGracePeriodSeconds"},
		{name: "tolerates only NoSchedule", edit: func(t *testing.T, b *bundle) {
			ds(t, b).Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, want: "tolerate every taint"},
		{name: "cluster DNS", edit: func(t *testing.T, b *bundle) {
			ds(t, b).Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		}, want: "dnsPolicy"},
		{name: "selector does not select the pods", edit: func(t *testing.T, b *bundle) {
			ds(t, b).Spec.Template.Labels = map[string]string{"app": "other"}
		}, want: "selector"},
		{name: "two images", edit: func(t *testing.T, b *bundle) { initC(t, b).Image = "vpccni:old" }, want: "one image"},
		{name: "no resource requests", edit: func(t *testing.T, b *bundle) { ipamdC(t, b).Resources = corev1.ResourceRequirements{} }, want: "requests"},
		{name: "ipamd without SYS_ADMIN", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, want: "SYS_ADMIN"},

		// Service account and RBAC.
		{name: "service account that does not exist", edit: func(t *testing.T, b *bundle) {
			ds(t, b).Spec.Template.Spec.ServiceAccountName = "aws-node"
		}, want: `ServiceAccount kube-system/aws-node`},
		{name: "role without get", edit: func(t *testing.T, b *bundle) {
			b.clusterRoles()[0].Rules[0].Verbs = []string{"list", "watch"}
		}, want: "get pods"},
		{name: "role with pods in another group", edit: func(t *testing.T, b *bundle) {
			b.clusterRoles()[0].Rules[0].APIGroups = []string{"apps"}
		}, want: "get pods"},
		{name: "role that may do anything", edit: func(t *testing.T, b *bundle) {
			b.clusterRoles()[0].Rules = append(b.clusterRoles()[0].Rules, rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}})
		}, want: "more than ipamd uses"},
		{name: "role that may patch pods", edit: func(t *testing.T, b *bundle) {
			r := &b.clusterRoles()[0].Rules[0]
			r.Verbs = append(r.Verbs, "patch")
		}, want: `"patch" on pods`},
		{name: "binding to another account", edit: func(t *testing.T, b *bundle) {
			b.clusterRoleBindings()[0].Subjects[0].Name = "default"
		}, want: "no ClusterRoleBinding"},
		{name: "binding to a missing role", edit: func(t *testing.T, b *bundle) {
			b.clusterRoleBindings()[0].RoleRef.Name = "aws-node"
		}, want: "no ClusterRoleBinding"},

		// The init container, the script and the image.
		{name: "script not in the image", edit: func(t *testing.T, b *bundle) {
			initC(t, b).Command = []string{"/bin/sh", "/app/install.sh"}
		}, want: `"/app/install.sh" is not in the image`},
		{name: "script copied from a file that does not exist", file: dockerfilePath, old: "COPY deploy/install-cni.sh", new: "COPY deploy/install.sh", want: "deploy/install.sh does not exist"},
		{name: "script needs a variable the manifest does not set", edit: func(t *testing.T, b *bundle) {
			c := initC(t, b)
			c.Env = c.Env[1:]
		}, want: "IMAGE_CNI_BIN_DIR"},
		{name: "installs another conflist", edit: func(t *testing.T, b *bundle) {
			setEnv(initC(t, b), "IMAGE_CNI_CONFLIST", "/etc/cni/net.d/10-aws.conflist")
		}, want: "10-aws.conflist"},
		{name: "image's conflist is another file", file: dockerfilePath, old: "COPY deploy/10-vpccni.conflist", new: "COPY deploy/kind.yaml", want: "deploy/10-vpccni.conflist"},
		{name: "conflist into the bin directory", edit: func(t *testing.T, b *bundle) {
			setEnv(initC(t, b), "HOST_CNI_NET_DIR", "/host/opt/cni/bin")
		}, want: "/etc/cni/net.d"},
		{name: "bin directory mounted read-only", edit: func(t *testing.T, b *bundle) {
			initC(t, b).VolumeMounts[0].ReadOnly = true
		}, want: "read-only"},
		{name: "plugin built from the wrong package", file: dockerfilePath, old: "-o /out/vpc-cni ./plugin/cmd/vpc-cni", new: "-o /out/vpc-cni ./ipamd/cmd/ipamd", want: "./plugin/cmd/vpc-cni"},
		{name: "cgo on", file: dockerfilePath, old: "ENV CGO_ENABLED=0", new: "ENV CGO_ENABLED=1", want: "CGO_ENABLED=0"},
		{name: "no version", file: dockerfilePath, old: "-X main.buildVersion=${VERSION}", new: "", want: "buildVersion"},
		{name: "build context ignores deploy/", file: dockerignorePath, old: "bin\n", new: "bin\ndeploy\n", want: "excludes deploy/"},
		{name: "ipamd binary not in the image", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).Command = []string{"/app/ipamd"}
		}, want: `"/app/ipamd" is not in the image`},
		{name: "Makefile substitutes another image", file: makefilePath, old: "MANIFEST_IMAGE := vpccni:dev", new: "MANIFEST_IMAGE := vpccni:latest", want: "MANIFEST_IMAGE"},

		// ipamd against the plugin's conflist and its own defaults.
		{name: "socket elsewhere", edit: func(t *testing.T, b *bundle) {
			c := ipamdC(t, b)
			c.Args = append(c.Args, "--socket", "/var/run/aws-node/other.sock")
		}, want: "/var/run/aws-node/other.sock"},
		{name: "socket directory not on the host", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).VolumeMounts[0].MountPath = "/run/vpccni"
		}, want: "not on a hostPath"},
		{name: "checkpoint inside the container", edit: func(t *testing.T, b *bundle) {
			setEnv(ipamdC(t, b), "AWS_VPC_K8S_CNI_BACKING_STORE", "/tmp/ipam.json")
		}, want: "checkpoint /tmp/ipam.json"},
		{name: "veth prefix differs from the conflist's", edit: func(t *testing.T, b *bundle) {
			setEnv(ipamdC(t, b), "AWS_VPC_K8S_CNI_VETHPREFIX", "vpc")
		}, want: "vethPrefix"},
		{name: "environment variable ipamd does not read", edit: func(t *testing.T, b *bundle) {
			setEnv(ipamdC(t, b), "WARM_IP_TARGETS", "5")
		}, want: "WARM_IP_TARGETS"},
		{name: "unknown cloud", edit: func(t *testing.T, b *bundle) { ipamdC(t, b).Args = []string{"--cloud", "gcp"} }, want: "--cloud"},
		{name: "probe on another port", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).ReadinessProbe.HTTPGet.Port.IntVal = 61680
		}, want: "port 61680"},
		{name: "probe on the pod IP", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).LivenessProbe.HTTPGet.Host = ""
		}, want: "host"},
		{name: "probe on a path ipamd does not serve", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).LivenessProbe.HTTPGet.Path = "/healthz"
		}, want: "/healthz"},
		{name: "no liveness probe", edit: func(t *testing.T, b *bundle) { ipamdC(t, b).LivenessProbe = nil }, want: "livenessProbe"},
		{name: "introspection disabled under the probes", edit: func(t *testing.T, b *bundle) {
			setEnv(ipamdC(t, b), "DISABLE_INTROSPECTION", "true")
		}, want: "introspection is disabled"},
		{name: "introspection moved", edit: func(t *testing.T, b *bundle) {
			setEnv(ipamdC(t, b), "INTROSPECTION_BIND_ADDRESS", "127.0.0.1:61690")
		}, want: "61690"},
		{name: "metrics port wrong", edit: func(t *testing.T, b *bundle) {
			ipamdC(t, b).Ports[0].ContainerPort = 9090
		}, want: "61678"},

		// The conflist.
		{name: "conflist not JSON", file: conflistPath, old: `"plugins": [`, new: `"plugins": [,`, want: "is not JSON"},
		{name: "conflist key misspelt", file: conflistPath, old: `"disableCheck"`, new: `"disablecheck"`, want: `"disablecheck"`},
		{name: "plugin type misspelt", file: conflistPath, old: `"type": "vpc-cni"`, new: `"type": "vpccni"`, want: "plugin types"},
		{name: "portmap not chained", file: conflistPath, old: `"type": "portmap"`, new: `"type": "bandwidth"`, want: "plugin types"},
		{name: "portmap without snat", file: conflistPath, old: `"snat": true`, new: `"snat": false`, want: "snat"},
		{name: "network renamed", file: conflistPath, old: `"name": "aws-cni",
  "disableCheck"`, new: `"name": "vpccni",
  "disableCheck"`, want: "aws-cni"},
		{name: "CNI version containerd 1.6 refuses", file: conflistPath, old: `"cniVersion": "1.0.0"`, new: `"cniVersion": "1.1.0"`, want: "1.0.0"},
		{name: "netconf field misspelt", file: conflistPath, old: `"ipamdAddress"`, new: `"ipamdAdress"`, want: `"ipamdAdress"`},
		{name: "netconf field in the wrong case", file: conflistPath, old: `"vethPrefix"`, new: `"vethprefix"`, want: `"vethprefix"`},
		{name: "netconf value the plugin refuses", file: conflistPath, old: `"mtu": "9001"`, new: `"mtu": "90001"`, want: "mtu"},
		{name: "netconf timeout the plugin refuses", file: conflistPath, old: `"ipamdTimeout": "5s"`, new: `"ipamdTimeout": "5"`, want: "ipamdTimeout"},
		{name: "plugin dials another socket", file: conflistPath, old: "unix:///var/run/aws-node/ipamd.sock", new: "unix:///run/vpccni/ipamd.sock", want: "/run/vpccni/ipamd.sock"},
		{name: "plugin log where the node has no directory", file: conflistPath, old: "/var/log/aws-routed-eni/plugin.log", new: "/var/log/vpccni/plugin.log", want: "/var/log/vpccni"},

		// The kind cluster.
		{name: "kind keeps its CNI", file: kindPath, old: "disableDefaultCNI: true", new: "disableDefaultCNI: false", want: "disableDefaultCNI"},
		{name: "kind field misspelt", file: kindPath, old: "disableDefaultCNI", new: "disabledDefaultCNI", want: "disabledDefaultCNI"},
		{name: "kind without a worker", file: kindPath, old: "  - role: worker\n", new: "", want: "worker"},
	}
}

func TestBrokenCopies(t *testing.T) {
	for _, bc := range brokenCopies() {
		t.Run(bc.name, func(t *testing.T) {
			fs := readFiles(t)
			if bc.file != "" {
				if !bytes.Contains(fs[bc.file], []byte(bc.old)) {
					t.Fatalf("%s does not contain %q: the broken copy would be the original", bc.file, bc.old)
				}
				fs[bc.file] = bytes.ReplaceAll(fs[bc.file], []byte(bc.old), []byte(bc.new))
			}
			b, err := parse(fs)
			var errs []error
			if err != nil {
				errs = []error{err}
			} else {
				if bc.edit != nil {
					bc.edit(t, b)
				}
				errs = check(b)
			}
			if len(errs) == 0 {
				t.Fatalf("accepted; want an error naming %q", bc.want)
			}
			got := errors.Join(errs...).Error()
			if !strings.Contains(got, bc.want) {
				t.Fatalf("rejected, but no error names %q:\n%s", bc.want, got)
			}
			t.Logf("rejected:\n%s", got)
		})
	}
}
