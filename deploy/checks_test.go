package deploy

// What the deploy files must agree on: each check returns every problem it
// finds, each naming what is wrong and why it matters.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/ipamd/introspect"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin"
)

// What the manifests are expected to hold.
const (
	dsName           = "vpccni-node"
	dsNamespace      = "kube-system"
	ipamdContainer   = "ipamd"
	installContainer = "install-cni"
	// networkName is the reference's network name: ipamd keys allocations
	// (and the checkpoint) by it, so a node moves between the reference
	// and vpccni only if both use it.
	networkName = "aws-cni"
	// cniVersion is the newest version containerd 1.6 speaks (a 1.1.0
	// result is refused) and the newest vpc-cni supports.
	cniVersion = "1.0.0"
	// defaultMetricsAddress is ipamd's --metrics-address default, the
	// reference's port (docs/reference-facts.md#introspection-metrics-and-health). ipamd keeps it unexported.
	defaultMetricsAddress = ":61678"
	rbacGroup             = "rbac.authorization.k8s.io"
)

// checks run in this order; see check.
var checks = []struct {
	name string
	fn   func(*bundle) error
}{
	{"objects", checkObjects},
	{"daemonset", checkDaemonSet},
	{"volumes", checkVolumes},
	{"service account", checkServiceAccount},
	{"rbac", checkRBAC},
	{"images", checkImages},
	{"install-cni", checkInstall},
	{"ipamd", checkIpamd},
	{"probes", checkProbes},
	{"metrics", checkMetrics},
	{"conflist", checkConflist},
	{"conflist and ipamd", checkConflistAgainstDaemonSet},
	{"dockerfile", checkDockerfile},
	{"kind", checkKind},
}

func checkObjects(b *bundle) error {
	var errs []error
	seen := map[string]string{}
	for _, o := range b.objects {
		m, err := metaOf(o.obj)
		if err != nil {
			return err
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

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
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
		bad("DaemonSet is %s/%s, want %s/%s", ds.Namespace, ds.Name, dsNamespace, dsName)
	}
	if spec.PriorityClassName != "system-node-critical" {
		bad("priorityClassName %q, want system-node-critical: pod networking must outlast the pods that need it", spec.PriorityClassName)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 10 {
		bad("terminationGracePeriodSeconds must be 10, the reference's (ipamd finishes its calls and writes its checkpoint on SIGTERM)")
	}
	if !spec.HostNetwork {
		bad("hostNetwork must be true: ipamd configures the node's network namespace, and its probes use the node's loopback")
	}
	if spec.DNSPolicy != corev1.DNSDefault {
		bad("dnsPolicy %q, want Default (the node's resolver): cluster DNS runs in pods that wait for this one", spec.DNSPolicy)
	}
	all := slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	})
	if !all {
		bad("tolerations must tolerate every taint (operator Exists, no key, no effect): every node needs pod networking")
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		bad("the selector %v does not select the pod template's labels %v", ds.Spec.Selector, ds.Spec.Template.Labels)
	}
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			bad("container %s has no cpu and memory requests", c.Name)
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

func checkVolumes(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var errs []error
	volumes := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if volumes[v.Name] {
			errs = append(errs, fmt.Errorf("two volumes are named %q", v.Name))
		}
		volumes[v.Name] = true
	}
	mounted := map[string]bool{}
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
			if !volumes[m.Name] {
				errs = append(errs, fmt.Errorf("container %s mounts volume %q, which the pod does not have", c.Name, m.Name))
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

func checkRBAC(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
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
		return fmt.Errorf("no ClusterRoleBinding binds ServiceAccount %s/%s to a ClusterRole of the manifests", ds.Namespace, sa)
	}
	var errs []error
	for _, n := range neededRules {
		if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return allows(r, n.group, n.resource, n.verb) }) {
			errs = append(errs, fmt.Errorf("ServiceAccount %s may not %s %s (ipamd --enable-pod-eni GETs the pod of every ADD)", sa, n.verb, n.resource))
		}
	}
	// Least privilege: every grant must be one ipamd uses.
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

var manifestImage = regexp.MustCompile(`(?m)^MANIFEST_IMAGE\s*:?=\s*(\S+)\s*$`)

func checkImages(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	var images []string
	for _, c := range allContainers(ds.Spec.Template.Spec) {
		if !slices.Contains(images, c.Image) {
			images = append(images, c.Image)
		}
	}
	if len(images) != 1 || images[0] == "" {
		return fmt.Errorf("containers use images %q: want one image (the plugin install-cni puts on the node must be the build of the ipamd beside it)", images)
	}
	m := manifestImage.FindStringSubmatch(b.makefile)
	if m == nil {
		return errors.New("the Makefile defines no MANIFEST_IMAGE: make kind-load would not put the built image in the manifests")
	}
	if m[1] != images[0] {
		return fmt.Errorf("the Makefile's MANIFEST_IMAGE is %q but the manifests name %q: make kind-load would not replace it", m[1], images[0])
	}
	return nil
}

// scriptVar is a variable install-cni.sh requires: ${NAME:?...}.
var scriptVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):\?`)

func checkInstall(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	c, err := container(ds, true, installContainer)
	if err != nil {
		return err
	}
	var errs []error
	bad := func(err error) { errs = append(errs, err) }
	// The command runs the script the image got from deploy/install-cni.sh.
	cmd := c.Command
	if len(cmd) == 2 && (cmd[0] == "/bin/sh" || cmd[0] == "sh") {
		cmd = cmd[1:]
	}
	if len(cmd) != 1 {
		bad(fmt.Errorf("command %q: want [/bin/sh, <script>] or [<script>]", c.Command))
	} else if src, err := b.contextFileAt(cmd[0]); err != nil {
		bad(err)
	} else if src != scriptPath {
		bad(fmt.Errorf("the image's %s comes from %s, not %s", cmd[0], src, scriptPath))
	}
	env := envOf(c)
	var required []string
	for _, m := range scriptVar.FindAllStringSubmatch(b.script, -1) {
		required = append(required, m[1])
		if env[m[1]] == "" {
			bad(fmt.Errorf("%s requires %s, which the init container does not set", path.Base(scriptPath), m[1]))
		}
	}
	for name := range env {
		if !slices.Contains(required, name) {
			bad(fmt.Errorf("the init container sets %s, which %s does not read", name, path.Base(scriptPath)))
		}
	}
	// What it installs: the image's files...
	if conf := env["IMAGE_CNI_CONFLIST"]; conf != "" {
		if src, err := b.contextFileAt(conf); err != nil {
			bad(err)
		} else if src != conflistPath {
			bad(fmt.Errorf("the image's %s comes from %s, not %s", conf, src, conflistPath))
		}
		if path.Base(conf) != path.Base(conflistPath) {
			bad(fmt.Errorf("install-cni writes %s on the node, not %s", path.Base(conf), path.Base(conflistPath)))
		}
	}
	if dir := env["IMAGE_CNI_BIN_DIR"]; dir != "" {
		if err := b.builtAt(path.Join(dir, "vpc-cni"), "./plugin/cmd/vpc-cni"); err != nil {
			bad(err)
		}
		for _, p := range []string{"portmap", "loopback"} {
			if _, _, err := b.dockerfile.source(path.Join(dir, p)); err != nil {
				bad(err)
			}
		}
	}
	// ...to the node's CNI directories, writable.
	for _, d := range []struct{ env, host string }{{"HOST_CNI_BIN_DIR", "/opt/cni/bin"}, {"HOST_CNI_NET_DIR", "/etc/cni/net.d"}} {
		v := env[d.env]
		if v == "" {
			continue
		}
		host, mount, err := hostPathOf(ds, c, v)
		switch {
		case err != nil:
			bad(fmt.Errorf("%s: %w", d.env, err))
		case host != d.host:
			bad(fmt.Errorf("%s=%s is the node's %s, want %s", d.env, v, host, d.host))
		case mount.ReadOnly:
			bad(fmt.Errorf("%s=%s is mounted read-only", d.env, v))
		}
	}
	return errors.Join(errs...)
}

// envOf is a container's environment (literal values only).
func envOf(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// hostPathOf says where on the node a path of a container is: the
// longest mount that holds it must be a hostPath volume.
func hostPathOf(ds *appsv1.DaemonSet, c *corev1.Container, p string) (string, *corev1.VolumeMount, error) {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = m
		}
	}
	if best == nil {
		return "", nil, fmt.Errorf("%s (container %s) is not on a hostPath volume: the node never sees it", p, c.Name)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == best.Name {
			if v.HostPath == nil {
				return "", nil, fmt.Errorf("%s (container %s) is on volume %s, not on a hostPath", p, c.Name, v.Name)
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(best.MountPath, "/")), "/")
			return path.Join(v.HostPath.Path, rel), best, nil
		}
	}
	return "", nil, fmt.Errorf("%s (container %s) is on volume %s, which the pod does not have", p, c.Name, best.Name)
}

// flagValue is the last value of --name (or -name, --name=v) in args, as
// Go's flag package reads it.
func flagValue(args []string, name string) (string, bool) {
	var v string
	found := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		n := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if n == a {
			continue
		}
		if k, val, ok := strings.Cut(n, "="); ok {
			if k == name {
				v, found = val, true
			}
			continue
		}
		if n == name && i+1 < len(args) {
			v, found = args[i+1], true
			i++
		}
	}
	return v, found
}

// boolFlag reports whether --name (or --name=true) is in args.
func boolFlag(args []string, name string) bool {
	return slices.Contains(args, "--"+name) || slices.Contains(args, "-"+name) ||
		slices.Contains(args, "--"+name+"=true") || slices.Contains(args, "-"+name+"=true")
}

// setting is an ipamd setting as ipamd resolves it: the flag, else the
// environment variable (when set and not empty), else the default.
func setting(c *corev1.Container, flagName, envName, def string) string {
	if v, ok := flagValue(c.Args, flagName); ok {
		return v
	}
	if v := envOf(c)[envName]; envName != "" && v != "" {
		return v
	}
	return def
}

// ipamdEnvNames are the string literals of ipamd's Go sources that look
// like environment variables: what ipamd can read.
var ipamdEnvNames = sync.OnceValues(func() (map[string]bool, error) {
	lit := regexp.MustCompile(`"([A-Z][A-Z0-9]*_[A-Za-z0-9_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(repoRoot, "ipamd"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src, err := os.ReadFile(p)
		for _, m := range lit.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return err
	})
	return names, err
})

func checkIpamd(b *bundle) error {
	ds, err := b.daemonSet()
	if err != nil {
		return err
	}
	c, err := container(ds, false, ipamdContainer)
	if err != nil {
		return err
	}
	var errs []error
	bad := func(err error) { errs = append(errs, err) }
	if len(c.Command) == 0 {
		bad(errors.New("ipamd's command is not given"))
	} else if err := b.builtAt(c.Command[0], "./ipamd/cmd/ipamd"); err != nil {
		bad(err)
	}
	if cloud := setting(c, "cloud", "", "memory"); cloud != "memory" && cloud != "aws" {
		bad(fmt.Errorf("--cloud %q: ipamd knows memory and aws", cloud))
	}
	known, err := ipamdEnvNames()
	if err != nil {
		return err
	}
	for _, e := range c.Env {
		if !known[e.Name] {
			bad(fmt.Errorf("%s is not an environment variable ipamd reads (ipamd --help lists them)", e.Name))
		}
	}
	sock := setting(c, "socket", "", ipamd.DefaultSocket)
	if _, _, err := hostPathOf(ds, c, sock); err != nil {
		bad(fmt.Errorf("socket: %w: the plugin, on the host, cannot dial it", err))
	}
	cp := setting(c, "checkpoint", checkpoint.EnvPath, checkpoint.DefaultPath)
	if _, _, err := hostPathOf(ds, c, cp); err != nil {
		bad(fmt.Errorf("checkpoint %s: %w: a restarted ipamd would forget its pods", cp, err))
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		var caps []corev1.Capability
		if sc != nil && sc.Capabilities != nil {
			caps = sc.Capabilities.Add
		}
		for _, want := range []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"} {
			if !slices.Contains(caps, want) {
				bad(fmt.Errorf("ipamd needs %s (or privileged): NET_ADMIN for links, routes and rules, SYS_ADMIN for setns(2) in netlink.NewHandleAt", want))
			}
		}
	}
	return errors.Join(errs...)
}

// ipamdOf returns the DaemonSet and its ipamd container.
func (b *bundle) ipamdOf() (*appsv1.DaemonSet, *corev1.Container, error) {
	ds, err := b.daemonSet()
	if err != nil {
		return nil, nil, err
	}
	c, err := container(ds, false, ipamdContainer)
	return ds, c, err
}

func checkProbes(b *bundle) error {
	ds, c, err := b.ipamdOf()
	if err != nil {
		return err
	}
	if boolFlag(c.Args, "disable-introspection") || envOf(c)["DISABLE_INTROSPECTION"] == "true" {
		return errors.New("introspection is disabled, but the probes read it")
	}
	addr := setting(c, "introspection-address", "INTROSPECTION_BIND_ADDRESS", introspect.DefaultAddress)
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("introspection listens on %s, which an httpGet probe cannot reach", addr)
	}
	port, _ := strconv.Atoi(portStr)
	served := []string{introspect.PathPool, introspect.PathENIs, introspect.PathAllocations, introspect.PathSettings}
	var errs []error
	if !ds.Spec.Template.Spec.HostNetwork {
		errs = append(errs, fmt.Errorf("the probes reach ipamd's introspection on %s only with hostNetwork", addr))
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			errs = append(errs, fmt.Errorf("ipamd has no httpGet %s", p.name))
			continue
		}
		h := p.probe.HTTPGet
		if h.Host != host {
			errs = append(errs, fmt.Errorf("%s host %q: introspection listens on %s only (the default host, the pod IP, is the node's address, not loopback)", p.name, h.Host, addr))
		}
		got := h.Port.IntValue()
		if h.Port.StrVal != "" {
			got = 0
			for _, cp := range c.Ports {
				if cp.Name == h.Port.StrVal {
					got = int(cp.ContainerPort)
				}
			}
		}
		if got != port {
			errs = append(errs, fmt.Errorf("%s on port %d: introspection listens on %s", p.name, got, addr))
		}
		if !slices.Contains(served, h.Path) {
			errs = append(errs, fmt.Errorf("%s GETs %q, which introspection does not serve (%v)", p.name, h.Path, served))
		}
		if h.Scheme != "" && h.Scheme != corev1.URISchemeHTTP {
			errs = append(errs, fmt.Errorf("%s scheme %s: introspection is plain HTTP", p.name, h.Scheme))
		}
	}
	return errors.Join(errs...)
}

func checkMetrics(b *bundle) error {
	_, c, err := b.ipamdOf()
	if err != nil {
		return err
	}
	if boolFlag(c.Args, "disable-metrics") || envOf(c)["DISABLE_METRICS"] == "true" {
		return errors.New("metrics are disabled, but the DaemonSet names a metrics port")
	}
	addr := setting(c, "metrics-address", "METRICS_BIND_ADDRESS", defaultMetricsAddress)
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w", addr, err)
	}
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			if strconv.Itoa(int(p.ContainerPort)) != portStr {
				return fmt.Errorf("container port metrics is %d; ipamd serves /metrics on %s", p.ContainerPort, addr)
			}
			return nil
		}
	}
	return fmt.Errorf("no container port named metrics (ipamd serves /metrics on %s)", addr)
}

// conflistKeys are the top-level keys libcni reads, in their exact case.
var conflistKeys = []string{"cniVersion", "cniVersions", "name", "disableCheck", "disableGC", "loadOnlyInlinedPlugins", "plugins"}

// jsonKeys are the JSON names of a struct's fields, embedded ones included.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			keys = append(keys, jsonKeys(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && name != "-" && name != "" {
			keys = append(keys, name)
		}
	}
	return keys
}

// exactKeys fails on a key that is not in allowed, comparing case too:
// libcni's map lookups are exact, and a plugin decoding with encoding/json
// would take "VethPrefix" for vethPrefix, but the file should say it one way.
func exactKeys(what string, raw []byte, allowed []string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s is not JSON: %w", what, err)
	}
	var errs []error
	for k := range m {
		if !slices.Contains(allowed, k) {
			errs = append(errs, fmt.Errorf("%s: key %q is not one it reads (%v)", what, k, allowed))
		}
	}
	return errors.Join(errs...)
}

// parseConflist parses the conflist as a runtime does (libcni) and
// returns the vpc-cni netconf as the plugin parses it.
func parseConflist(raw []byte) (*libcni.NetworkConfigList, *plugin.NetConf, error) {
	if err := exactKeys(conflistPath, raw, conflistKeys); err != nil {
		return nil, nil, err
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return nil, nil, err
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if want := []string{"vpc-cni", "portmap"}; !slices.Equal(types, want) {
		return list, nil, fmt.Errorf("plugin types %q, want %q: vpc-cni, then portmap chained on its result (which has the pod's IP)", types, want)
	}
	// What the plugin gets on stdin: libcni injects the list's name and
	// version into each entry (and the prevResult, here none).
	entry, err := libcni.InjectConf(list.Plugins[0], map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		return list, nil, err
	}
	if err := exactKeys("vpc-cni netconf", entry.Bytes, jsonKeys(reflect.TypeOf(plugin.NetConf{}))); err != nil {
		return list, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(entry.Bytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&plugin.NetConf{}); err != nil {
		return list, nil, fmt.Errorf("vpc-cni netconf: %w", err)
	}
	conf, err := plugin.LoadNetConf(entry.Bytes)
	if err != nil {
		return list, nil, fmt.Errorf("the plugin refuses its netconf: %w", err)
	}
	return list, conf, nil
}

// portmapConf is what the conflist sets of the reference portmap plugin.
type portmapConf struct {
	Type         string          `json:"type"`
	Name         string          `json:"name,omitempty"`
	Capabilities map[string]bool `json:"capabilities"`
	SNAT         *bool           `json:"snat"`
}

func checkConflist(b *bundle) error {
	list, _, err := parseConflist(b.conflist)
	if err != nil {
		return err
	}
	var errs []error
	if list.Name != networkName {
		errs = append(errs, fmt.Errorf("network name %q, want %q: ipamd keys allocations and the checkpoint by it, as the reference does", list.Name, networkName))
	}
	if list.CNIVersion != cniVersion {
		errs = append(errs, fmt.Errorf("cniVersion %q, want %s: the newest containerd 1.6 and vpc-cni both speak", list.CNIVersion, cniVersion))
	}
	pm := list.Plugins[1].Bytes
	if err := exactKeys("portmap", pm, jsonKeys(reflect.TypeOf(portmapConf{}))); err != nil {
		errs = append(errs, err)
	}
	var p portmapConf
	if err := json.Unmarshal(pm, &p); err != nil {
		errs = append(errs, fmt.Errorf("portmap: %w", err))
	}
	if len(p.Capabilities) != 1 || !p.Capabilities["portMappings"] {
		errs = append(errs, fmt.Errorf("portmap capabilities %v, want {portMappings: true}: without it the runtime passes no hostPorts", p.Capabilities))
	}
	if p.SNAT == nil || !*p.SNAT {
		errs = append(errs, errors.New("portmap needs snat: true, or a pod cannot reach a hostPort of its own node"))
	}
	return errors.Join(errs...)
}

func checkConflistAgainstDaemonSet(b *bundle) error {
	_, conf, err := parseConflist(b.conflist)
	if err != nil {
		return nil // checkConflist reports it
	}
	ds, c, err := b.ipamdOf()
	if err != nil {
		return err
	}
	var errs []error
	dial, ok := strings.CutPrefix(conf.IpamdAddress, "unix://")
	sock := setting(c, "socket", "", ipamd.DefaultSocket)
	host, _, err := hostPathOf(ds, c, sock)
	switch {
	case !ok:
		errs = append(errs, fmt.Errorf("the plugin dials %s; ipamd serves a Unix socket only", conf.IpamdAddress))
	case err != nil:
		errs = append(errs, err)
	case dial != host:
		errs = append(errs, fmt.Errorf("the plugin dials %s, but ipamd listens on the node's %s", dial, host))
	}
	if prefix := setting(c, "veth-prefix", "AWS_VPC_K8S_CNI_VETHPREFIX", ownership.DefaultVethPrefix); prefix != conf.VethPrefix {
		errs = append(errs, fmt.Errorf("conflist vethPrefix %q, ipamd's %q: ipamd recognises pods by their host veths", conf.VethPrefix, prefix))
	}
	if conf.PluginLogFile != "" {
		dir := path.Dir(conf.PluginLogFile)
		if !b.podCreates(dir) {
			errs = append(errs, fmt.Errorf("pluginLogFile %s: no mounted hostPath volume (DirectoryOrCreate) makes %s on the node, and without it the plugin logs only warnings, to the runtime's stderr", conf.PluginLogFile, dir))
		}
	}
	return errors.Join(errs...)
}

// podCreates reports whether the pod has a mounted hostPath volume that
// makes dir on the node.
func (b *bundle) podCreates(dir string) bool {
	ds, err := b.daemonSet()
	if err != nil {
		return false
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil || v.HostPath.Path != dir || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
			continue
		}
		for _, c := range allContainers(ds.Spec.Template.Spec) {
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name }) {
				return true
			}
		}
	}
	return false
}

func checkDockerfile(b *bundle) error {
	var errs []error
	d := b.dockerfile
	var build string
	for _, s := range d.stages[:len(d.stages)-1] {
		build += strings.Join(s.instructions, "\n") + "\n"
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		errs = append(errs, errors.New("the build stage must set CGO_ENABLED=0: vpc-cni runs on the node itself, whatever its libc, so the binaries must be static"))
	}
	if !strings.Contains(build, "-X main.buildVersion=") {
		errs = append(errs, errors.New("the build must set -X main.buildVersion: the plugin sends it to ipamd as ClientVersion"))
	}
	// Every file taken from the build context exists and is not ignored.
	for _, s := range d.stages {
		for _, cp := range s.copies {
			if cp.from != "" {
				continue
			}
			for _, src := range cp.srcs {
				if src == "." || src == "./" {
					src = "."
				} else if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
					errs = append(errs, fmt.Errorf("COPY %s: %s does not exist in the build context", src, src))
				}
				if src == "." {
					for _, need := range []string{"go.mod", "ipamd/cmd/ipamd", "plugin/cmd/vpc-cni", "internal", "kernel", "cloud"} {
						if err := b.ignored(need); err != nil {
							errs = append(errs, err)
						}
					}
				} else if err := b.ignored(src); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ignored fails when a Dockerfile.dockerignore pattern leaves p (or a
// directory above it) out of the build context.
func (b *bundle) ignored(p string) error {
	for _, pat := range b.ignore {
		if strings.HasPrefix(pat, "!") {
			continue
		}
		pat = strings.TrimPrefix(strings.TrimSuffix(pat, "/"), "/")
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			if ok, _ := path.Match(pat, q); ok {
				return fmt.Errorf("%s excludes %s (pattern %q), which the image needs", dockerignorePath, p, pat)
			}
		}
	}
	return nil
}

// kindCluster is the part of kind's v1alpha4 Cluster that deploy/kind.yaml
// may use.
type kindCluster struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Networking struct {
		DisableDefaultCNI bool   `json:"disableDefaultCNI"`
		PodSubnet         string `json:"podSubnet,omitempty"`
		ServiceSubnet     string `json:"serviceSubnet,omitempty"`
	} `json:"networking"`
	Nodes []struct {
		Role  string `json:"role"`
		Image string `json:"image,omitempty"`
	} `json:"nodes"`
}

func checkKind(b *bundle) error {
	var k kindCluster
	if err := yaml.UnmarshalStrict(b.kind, &k); err != nil {
		return fmt.Errorf("%s: %w", kindPath, err)
	}
	var errs []error
	if k.Kind != "Cluster" || k.APIVersion != "kind.x-k8s.io/v1alpha4" {
		errs = append(errs, fmt.Errorf("%s is a %s %s, want a kind.x-k8s.io/v1alpha4 Cluster", kindPath, k.APIVersion, k.Kind))
	}
	if !k.Networking.DisableDefaultCNI {
		errs = append(errs, errors.New("networking.disableDefaultCNI must be true, or kind installs kindnet beside vpccni"))
	}
	var roles []string
	for _, n := range k.Nodes {
		roles = append(roles, n.Role)
	}
	if !slices.Equal(roles, []string{"control-plane", "worker"}) {
		errs = append(errs, fmt.Errorf("nodes %q: want one control-plane and one worker", roles))
	}
	return errors.Join(errs...)
}
