package deploy

// The deploy files are parsed into their real types (Kubernetes objects
// with the client-go scheme's strict decoder, the Dockerfile's stages, the
// kind cluster strictly) and checked against each other, against the
// binaries (what vpccni-node and ipamd read, where they look) and against
// the conflist vpccni-node run would write for the DaemonSet's
// environment. The checks are in checks_*_test.go; TestBrokenCopies
// (broken_test.go) shows that every check can fail for its reason, and
// reference_test.go runs the same pod checks on the reference's own
// manifest with vpccni's images in it.

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

	"github.com/vpccni/vpccni/node"
)

// Files, relative to the repository root.
const (
	dockerfilePath   = "deploy/Dockerfile"
	dockerignorePath = "deploy/Dockerfile.dockerignore"
	kindPath         = "deploy/kind.yaml"
	manifestDir      = "deploy/kubernetes"
	makefilePath     = "Makefile"
	goModPath        = "go.mod"
)

// repoRoot is the repository root as seen from this package's directory,
// where go test runs.
const repoRoot = ".."

// files are the deploy files' contents by repository-relative path.
type files map[string][]byte

// inputs reads the manifest at path (repository-relative; its checks
// decode it themselves, as they do broken copies of it) and decodes the
// bundle it is checked against.
func inputs(t *testing.T, path string) ([]byte, *bundle) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parse(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	return raw, b
}

// readFiles reads every file the checks look at.
func readFiles(t *testing.T) files {
	t.Helper()
	fs := files{}
	for _, p := range []string{dockerfilePath, dockerignorePath, kindPath, makefilePath, goModPath} {
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
	dockerfile *dockerfile
	ignore     []string // patterns of Dockerfile.dockerignore
	kind       []byte
	makefile   string
	goMod      string
	// conflistFor is what vpccni-node run writes for its settings:
	// node.Conflist, which a broken copy may replace to show that the
	// conflist checks look at its output.
	conflistFor func(node.Settings) ([]byte, error)
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
	b := &bundle{kind: fs[kindPath], makefile: string(fs[makefilePath]), goMod: string(fs[goModPath]), conflistFor: node.Conflist}
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
		return nil, fmt.Errorf("want exactly one DaemonSet in the manifests, found %d", len(found))
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

// ofType lists the objects of type T.
func ofType[T runtime.Object](b *bundle) []T {
	var out []T
	for _, o := range b.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func (b *bundle) serviceAccounts() []*corev1.ServiceAccount { return ofType[*corev1.ServiceAccount](b) }
func (b *bundle) clusterRoles() []*rbacv1.ClusterRole       { return ofType[*rbacv1.ClusterRole](b) }
func (b *bundle) clusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	return ofType[*rbacv1.ClusterRoleBinding](b)
}

// namedCheck is one check; each returns every problem it finds, each
// naming what is wrong and why it matters.
type namedCheck struct {
	name string
	fn   func(*bundle) error
}

// run runs the checks in order.
func run(b *bundle, list []namedCheck) []error {
	var errs []error
	for _, c := range list {
		if err := c.fn(b); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errs
}

// check runs every check on vpccni's own files: the pod checks the
// reference's manifest must pass too, then those only vpccni's files
// are held to (least privilege, the image build, the Makefile, kind).
func check(b *bundle) []error {
	return run(b, append(append([]namedCheck{}, podChecks...), ownChecks...))
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
	t.Logf("decoded %d objects: %v; %d checks", len(b.objects), kinds, len(podChecks)+len(ownChecks))
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

// joined is the errors as one text, for the broken copies' matches.
func joined(errs []error) string { return errors.Join(errs...).Error() }
