package deploy

// The pod's shape: its objects, the DaemonSet, its containers, volumes,
// identity and privileges. podChecks hold for vpccni's manifests and for
// the reference's run with vpccni's images (reference_test.go); ownChecks
// only for vpccni's own files.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The reference's names, which vpccni takes over: the DaemonSet, its
// ServiceAccount and role, its pod label and its two containers.
const (
	dsName        = "aws-node"
	dsNamespace   = "kube-system"
	appLabel      = "k8s-app"
	nodeContainer = "aws-node"
	initContainer = "aws-vpc-cni-init"
	rbacGroup     = "rbac.authorization.k8s.io"
)

// podChecks run in this order, on vpccni's manifests and on the
// reference's with vpccni's images.
var podChecks = []namedCheck{
	{"objects", checkObjects},
	{"daemonset", checkDaemonSet},
	{"containers", checkContainers},
	{"volumes", checkVolumes},
	{"service account", checkServiceAccount},
	{"rbac", checkRBAC},
	{"images", checkImages},
	{"capabilities", checkCapabilities},
	{"aws-vpc-cni-init", checkInit},
	{"aws-node", checkNode},
	{"environment", checkEnvAccountedFor},
	{"host paths", checkHostPaths},
	{"probes", checkProbes},
	{"metrics", checkMetrics},
	{"conflist", checkConflist},
	{"conflist and ipamd", checkConflistAgainstIpamd},
}

// ownChecks hold for vpccni's files only: the reference's role grants
// what its other components need, its containers request no memory, and
// its image build, Makefile and kind cluster are not vpccni's.
var ownChecks = []namedCheck{
	{"least privilege", checkLeastPrivilege},
	{"memory requests", checkMemoryRequests},
	{"environment read", checkEnvRead},
	{"dockerfile", checkDockerfile},
	{"makefile", checkMakefile},
	{"kind", checkKind},
}

func checkObjects(b *bundle) error {
	var errs []error
	seen := map[string]string{}
	for _, o := range b.objects {
		m, ok := o.obj.(metav1.Object)
		if !ok {
			return fmt.Errorf("%s: %T has no object metadata", o.where, o.obj)
		}
		kind := fmt.Sprintf("%T", o.obj)
		key := kind + " " + m.GetNamespace() + "/" + m.GetName()
		if prev, ok := seen[key]; ok {
			errs = append(errs, fmt.Errorf("%s: %s is also defined in %s", o.where, key, prev))
		}
		seen[key] = o.where
		switch o.obj.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			if m.GetNamespace() != "" {
				errs = append(errs, fmt.Errorf("%s: %s is cluster-scoped but names namespace %q", o.where, kind, m.GetNamespace()))
			}
		default:
			if m.GetNamespace() != dsNamespace {
				errs = append(errs, fmt.Errorf("%s: %s %s is in namespace %q, want %s", o.where, kind, m.GetName(), m.GetNamespace(), dsNamespace))
			}
		}
	}
	return errors.Join(errs...)
}

func checkDaemonSet(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	spec := &ds.Spec.Template.Spec
	if ds.Name != dsName || ds.Namespace != dsNamespace {
		bad("DaemonSet is %s/%s, want %s/%s: the reference's name, so that vpccni replaces aws-node instead of running beside it", ds.Namespace, ds.Name, dsNamespace, dsName)
	}
	for _, l := range []string{appLabel, "app.kubernetes.io/name"} {
		if ds.Spec.Template.Labels[l] != dsName {
			bad("the pod template's label %s is %q, want %s, the reference's (tools select aws-node pods by it)", l, ds.Spec.Template.Labels[l], dsName)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		bad("the selector %v does not select the pod template's labels %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		bad("updateStrategy %q, want RollingUpdate: with OnDelete a new image reaches no node until its pod is deleted by hand", ds.Spec.UpdateStrategy.Type)
	}
	if spec.PriorityClassName != "system-node-critical" {
		bad("priorityClassName %q, want system-node-critical: pod networking must outlast the pods that need it", spec.PriorityClassName)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 10 {
		bad("terminationGracePeriodSeconds must be 10, the reference's (ipamd finishes its calls and writes its checkpoint on SIGTERM)")
	}
	if !spec.HostNetwork {
		bad("hostNetwork must be true: ipamd configures the node's network namespace, and init its sysctls")
	}
	// With hostNetwork, ClusterFirst (the default) falls back to Default.
	if p := spec.DNSPolicy; p != "" && p != corev1.DNSDefault && p != corev1.DNSClusterFirst {
		bad("dnsPolicy %q, want Default (or unset, as the reference): cluster DNS runs in pods that wait for this one", p)
	}
	all := slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	})
	if !all {
		bad("tolerations must tolerate every taint (operator Exists, no key, no effect): every node needs pod networking")
	}
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		if c.Resources.Requests.Cpu().IsZero() {
			bad("container %s has no cpu request", c.Name)
		}
	}
	return errors.Join(errs...)
}

// allContainers lists the init containers, then the containers.
func allContainers(spec corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// checkContainers: the pod runs vpccni's two containers and nothing else.
// Any other (the reference's aws-eks-nodeagent) would need an image
// vpccni does not build.
func checkContainers(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range []struct {
		what string
		list []corev1.Container
		want string
	}{{"init container", ds.Spec.Template.Spec.InitContainers, initContainer}, {"container", ds.Spec.Template.Spec.Containers, nodeContainer}} {
		var names []string
		for _, c := range l.list {
			names = append(names, c.Name)
			if c.Name != l.want {
				errs = append(errs, fmt.Errorf("%s %s (image %s) is not one of vpccni's: vpccni's pod has the %s %s only", l.what, c.Name, c.Image, l.what, l.want))
			}
		}
		if !slices.Contains(names, l.want) {
			errs = append(errs, fmt.Errorf("no %s %s (the %ss are %q)", l.what, l.want, l.what, names))
		}
	}
	return errors.Join(errs...)
}

func checkVolumes(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	volumes := map[string]*corev1.Volume{}
	for i, v := range ds.Spec.Template.Spec.Volumes {
		if volumes[v.Name] != nil {
			errs = append(errs, fmt.Errorf("two volumes are named %q", v.Name))
		}
		volumes[v.Name] = &ds.Spec.Template.Spec.Volumes[i]
	}
	mounted := map[string]bool{}
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
			v := volumes[m.Name]
			if v == nil {
				errs = append(errs, fmt.Errorf("container %s mounts volume %q, which the pod does not have", c.Name, m.Name))
				continue
			}
			// A lock file must stay a file: without a type, a missing
			// one is made a directory, and iptables then fails on it.
			if m.MountPath == "/run/xtables.lock" && (v.HostPath == nil || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFileOrCreate) {
				errs = append(errs, fmt.Errorf("volume %s holds /run/xtables.lock but is not a FileOrCreate hostPath", v.Name))
			}
		}
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if !mounted[v.Name] {
			errs = append(errs, fmt.Errorf("volume %q is mounted by no container", v.Name))
		}
	}
	return errors.Join(errs...)
}

func checkServiceAccount(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	name := ds.Spec.Template.Spec.ServiceAccountName
	if name == "" {
		return errors.New("the DaemonSet names no serviceAccountName (it would run as default)")
	}
	for _, sa := range b.serviceAccounts() {
		if sa.Name == name && sa.Namespace == ds.Namespace {
			return nil
		}
	}
	return fmt.Errorf("serviceAccountName: no ServiceAccount %s/%s in the manifests", ds.Namespace, name)
}

// neededRules is what ipamd does with the API server: with --enable-pod-eni
// it GETs the pod of an ADD (ipamd/podeni). Nothing else.
var neededRules = []struct{ group, resource, verb string }{{"", "pods", "get"}}

// boundRules are the rules of the ClusterRoles bound to the pod's
// ServiceAccount.
func boundRules(b *bundle) (string, []rbacv1.PolicyRule, error) {
	ds, err := b.daemonSet()
	if err != nil {
		return "", nil, err
	}
	sa := ds.Spec.Template.Spec.ServiceAccountName
	roles := map[string]*rbacv1.ClusterRole{}
	for _, r := range b.clusterRoles() {
		roles[r.Name] = r
	}
	var rules []rbacv1.PolicyRule
	bound := false
	for _, crb := range b.clusterRoleBindings() {
		role, ok := roles[crb.RoleRef.Name]
		if !ok || crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.APIGroup != rbacGroup {
			continue
		}
		for _, s := range crb.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ds.Namespace {
				bound = true
				rules = append(rules, role.Rules...)
			}
		}
	}
	if !bound {
		return sa, nil, fmt.Errorf("no ClusterRoleBinding binds ServiceAccount %s/%s to a ClusterRole of the manifests", ds.Namespace, sa)
	}
	return sa, rules, nil
}

func checkRBAC(b *bundle) error {
	sa, rules, err := boundRules(b)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range neededRules {
		if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return allows(r, n.group, n.resource, n.verb) }) {
			errs = append(errs, fmt.Errorf("ServiceAccount %s may not %s %s (ipamd --enable-pod-eni GETs the pod of every ADD)", sa, n.verb, n.resource))
		}
	}
	return errors.Join(errs...)
}

// checkLeastPrivilege: every grant of vpccni's roles is one ipamd uses.
func checkLeastPrivilege(b *bundle) error {
	var errs []error
	for _, r := range b.clusterRoles() {
		for _, rule := range r.Rules {
			if len(rule.NonResourceURLs) > 0 {
				errs = append(errs, fmt.Errorf("ClusterRole %s grants non-resource URLs %v: more than ipamd uses", r.Name, rule.NonResourceURLs))
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						if !slices.ContainsFunc(neededRules, func(n struct{ group, resource, verb string }) bool {
							return n.group == g && n.resource == res && n.verb == v
						}) {
							errs = append(errs, fmt.Errorf("ClusterRole %s grants %q on %s (API group %q): more than ipamd uses (it only GETs pods)", r.Name, v, res, g))
						}
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func allows(r rbacv1.PolicyRule, group, resource, verb string) bool {
	in := func(list []string, s string) bool { return slices.Contains(list, s) || slices.Contains(list, "*") }
	return len(r.ResourceNames) == 0 && in(r.APIGroups, group) && in(r.Resources, resource) && in(r.Verbs, verb)
}

func checkMemoryRequests(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		if c.Resources.Requests.Memory().IsZero() {
			errs = append(errs, fmt.Errorf("container %s has no memory request: the scheduler would not count what it uses", c.Name))
		}
	}
	return errors.Join(errs...)
}

// makeVar is a := or ?= assignment of the Makefile.
func makeVar(makefile, name string) (string, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*[:?]?=\s*(\S+)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// imageStages maps the manifests' image names (the Makefile's, which
// make kind-load replaces) to the Dockerfile targets they are built from.
func (b *bundle) imageStages() (map[string]*stage, error) {
	out := map[string]*stage{}
	var errs []error
	for _, v := range []struct{ name, target string }{{"MANIFEST_IMAGE", ""}, {"MANIFEST_INIT_IMAGE", "init"}} {
		img, ok := makeVar(b.makefile, v.name)
		if !ok {
			errs = append(errs, fmt.Errorf("the Makefile defines no %s: make kind-load would not put the built image in the manifests", v.name))
			continue
		}
		st := b.dockerfile.last()
		if v.target != "" {
			var err error
			if st, err = b.dockerfile.named(v.target); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		out[img] = st
	}
	return out, errors.Join(errs...)
}

// stageOf is the Dockerfile target container c's image is built from.
func (b *bundle) stageOf(c *corev1.Container) (*stage, error) {
	stages, err := b.imageStages()
	if err != nil {
		return nil, err
	}
	st, ok := stages[c.Image]
	if !ok {
		var names []string
		for n := range stages {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("container %s runs image %s, which is none of vpccni's %q", c.Name, c.Image, names)
	}
	return st, nil
}

// checkImages: aws-node runs the aws-node image and aws-vpc-cni-init the
// init image, each the Makefile's name for its Dockerfile target.
func checkImages(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range []struct {
		init       bool
		name, want string
	}{{true, initContainer, "MANIFEST_INIT_IMAGE"}, {false, nodeContainer, "MANIFEST_IMAGE"}} {
		c, err := container(ds, w.init, w.name)
		if err != nil {
			continue // checkContainers reports it
		}
		img, _ := makeVar(b.makefile, w.want)
		if c.Image != img {
			errs = append(errs, fmt.Errorf("container %s runs image %s, want %s (the Makefile's %s, which make kind-load replaces with the built one)", c.Name, c.Image, img, w.want))
		}
	}
	return errors.Join(errs...)
}

// checkCapabilities: aws-node gets exactly what ipamd needs, and init
// what writing sysctls needs.
func checkCapabilities(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	if c, err := container(ds, false, nodeContainer); err == nil {
		sc := c.SecurityContext
		var caps []string
		if sc != nil && sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				caps = append(caps, string(c))
			}
		}
		slices.Sort(caps)
		if !slices.Equal(caps, []string{"NET_ADMIN", "NET_RAW"}) {
			errs = append(errs, fmt.Errorf("aws-node adds capabilities %q, want exactly NET_ADMIN and NET_RAW: NET_ADMIN for the ENIs' links, routes and rules, NET_RAW as the reference; nothing more is needed", caps))
		}
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, errors.New("aws-node is privileged: ipamd needs NET_ADMIN and NET_RAW only (init writes the sysctls)"))
		}
	}
	if c, err := container(ds, true, initContainer); err == nil {
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
			errs = append(errs, errors.New("aws-vpc-cni-init is not privileged: it writes the node's sysctls under /proc/sys, which is read-only in an unprivileged container"))
		}
	}
	return errors.Join(errs...)
}
