package deploy

// What the two containers run: vpccni-node init and run as the image's
// entrypoint (or the manifest's command) starts them, the binaries and
// plugins they need in the image, the environment they read, and where
// on the node what they write lands.

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vpccni/vpccni/internal/awsenv"
	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
	"github.com/vpccni/vpccni/node"
)

// Go packages of the image's binaries.
const (
	nodePkg        = "./node/cmd/vpccni-node"
	ipamdPkg       = "./ipamd/cmd/ipamd"
	pluginPkg      = "./plugin/cmd/vpc-cni"
	cniPluginsMod  = "github.com/containernetworking/plugins"
	healthProbePkg = "github.com/grpc-ecosystem/grpc-health-probe"
)

// cniPlugins are what vpccni-node init installs from its --cni-dir: the
// plugins the conflist may chain (portmap always, bandwidth and tuning
// when asked) and loopback, which the runtime needs for every pod.
var cniPlugins = map[string]string{
	"vpc-cni":   pluginPkg,
	"portmap":   cniPluginsMod + "/plugins/meta/portmap",
	"loopback":  cniPluginsMod + "/plugins/main/loopback",
	"bandwidth": cniPluginsMod + "/plugins/meta/bandwidth",
	"tuning":    cniPluginsMod + "/plugins/meta/tuning",
}

// runFlags are vpccni-node run's flags (before --); initFlags init's.
var (
	runFlags  = []string{"cni-dir", "ipamd", "socket", "healthy-timeout", "health-interval"}
	initFlags = []string{"cni-dir", "primary-interface"}
)

// nodeCmd is a vpccni-node command line as a container runs it.
type nodeCmd struct {
	st        *stage // the image's Dockerfile target
	exe, sub  string
	flags     []string // the subcommand's, before --
	ipamdArgs []string // after --: run passes them on to ipamd
}

// commandOf is what container c runs: its command, else its image's
// ENTRYPOINT, then its args.
func (b *bundle) commandOf(c *corev1.Container) (nodeCmd, error) {
	st, err := b.stageOf(c)
	if err != nil {
		return nodeCmd{}, err
	}
	argv := c.Command
	if len(argv) == 0 {
		if st.shellEntry {
			return nodeCmd{}, fmt.Errorf("%s's ENTRYPOINT is in shell form, and the image has no shell", st.label(b.dockerfile))
		}
		argv = st.entrypoint
	}
	argv = append(slices.Clone(argv), c.Args...)
	if len(argv) < 2 {
		return nodeCmd{}, fmt.Errorf("container %s runs %q: want /app/vpccni-node init|run ...", c.Name, argv)
	}
	n := nodeCmd{st: st, exe: argv[0], sub: argv[1], flags: argv[2:]}
	if i := slices.Index(n.flags, "--"); i >= 0 {
		n.flags, n.ipamdArgs = n.flags[:i], n.flags[i+1:]
	}
	return n, nil
}

// flag is the value of one of the subcommand's flags, or its default.
func (n nodeCmd) flag(name, def string) string {
	if v, ok := flagValue(n.flags, name); ok {
		return v
	}
	return def
}

func (n nodeCmd) cniDir() string    { return n.flag("cni-dir", path.Join(path.Dir(n.exe), "cni")) }
func (n nodeCmd) ipamdPath() string { return n.flag("ipamd", path.Join(path.Dir(n.exe), "ipamd")) }

// socket is where ipamd listens: run's --socket, which run passes to
// ipamd, probes, and writes in the conflist.
func (n nodeCmd) socket() string { return n.flag("socket", ipamd.DefaultSocket) }

// checkFlags fails on a flag the subcommand does not have.
func (n nodeCmd) checkFlags(known []string) error {
	var errs []error
	for _, a := range n.flags {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("vpccni-node %s has no flag %s (it has %q)", n.sub, a, known))
		}
	}
	return errors.Join(errs...)
}

// envOf is a container's environment (literal values; a downward-API
// value reads as empty, which every reader takes as unset).
func envOf(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// readsOf runs read over env and returns the names it asked for.
func readsOf(env map[string]string, read func(awsenv.Getenv) error) (map[string]bool, error) {
	names := map[string]bool{}
	err := read(func(name string) string { names[name] = true; return env[name] })
	return names, err
}

func initSettings(env map[string]string) (map[string]bool, error) {
	return readsOf(env, func(g awsenv.Getenv) error { _, err := node.InitSettingsFromEnv(g); return err })
}

func runSettings(env map[string]string) (map[string]bool, error) {
	return readsOf(env, func(g awsenv.Getenv) error { _, err := node.SettingsFromEnv(g); return err })
}

// ipamdEnvNames are the string literals of ipamd's Go sources that look
// like environment variables: what ipamd can read. (ipamd's command is a
// main package, so its reading cannot be called from here.)
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

// pod is the DaemonSet with its two containers and what they run. A
// missing container is checkContainers' to report, a command that cannot
// be made out checkInit's or checkNode's; the other checks skip them.
type pod struct {
	ds               *appsv1.DaemonSet
	init, node       *corev1.Container
	initCmd, runCmd  nodeCmd
	initErr, nodeErr error
}

// podOf finds the two containers and their command lines.
func (b *bundle) podOf() (*pod, error) {
	ds, err := b.daemonSet()
	if err != nil {
		return nil, err
	}
	p := &pod{ds: ds}
	if p.init, p.initErr = container(ds, true, initContainer); p.initErr == nil {
		p.initCmd, p.initErr = b.commandOf(p.init)
	}
	if p.node, p.nodeErr = container(ds, false, nodeContainer); p.nodeErr == nil {
		p.runCmd, p.nodeErr = b.commandOf(p.node)
	}
	return p, nil
}

// runOf is the pod when aws-node's command could be made out (else nil:
// checkNode reports why).
func (b *bundle) runOf() (*pod, error) {
	p, err := b.podOf()
	if err != nil || p.nodeErr != nil {
		return nil, err
	}
	return p, nil
}

// checkInit: aws-vpc-cni-init runs vpccni-node init, which finds every
// plugin in its --cni-dir and installs them on the node's /opt/cni/bin.
func checkInit(b *bundle) error {
	p, err := b.podOf()
	if err != nil {
		return err
	}
	if p.initErr != nil {
		return p.initErr
	}
	n := p.initCmd
	var errs []error
	if _, err := b.builtAt(n.st, n.exe, nodePkg); err != nil {
		errs = append(errs, err)
	}
	if n.sub != "init" {
		errs = append(errs, fmt.Errorf("aws-vpc-cni-init runs vpccni-node %s, want init (the plugins and the sysctls)", n.sub))
	}
	errs = append(errs, n.checkFlags(initFlags))
	for _, name := range sortedKeys(cniPlugins) {
		if _, err := b.builtAt(n.st, path.Join(n.cniDir(), name), cniPlugins[name]); err != nil {
			errs = append(errs, fmt.Errorf("vpccni-node init installs every plugin of --cni-dir %s: %w", n.cniDir(), err))
		}
	}
	bin := awsenv.Str(func(k string) string { return envOf(p.init)[k] }, node.EnvHostBinDir)
	errs = append(errs, onHost(p.ds, p.init, node.EnvHostBinDir, bin, "/opt/cni/bin"))
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// onHost checks that the container's path p (the value of variable name)
// is the node's directory want, writable.
func onHost(ds *appsv1.DaemonSet, c *corev1.Container, name, p, want string) error {
	host, mount, err := hostPathOf(ds, c, p)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	case host != want:
		return fmt.Errorf("%s=%s is the node's %s, want %s", name, p, host, want)
	case mount.ReadOnly:
		return fmt.Errorf("%s=%s is mounted read-only in %s", name, p, c.Name)
	}
	return nil
}

// checkNode: aws-node runs vpccni-node run, which installs the image's
// vpc-cni and starts the image's ipamd with a cloud ipamd knows.
func checkNode(b *bundle) error {
	p, err := b.podOf()
	if err != nil {
		return err
	}
	if p.nodeErr != nil {
		return p.nodeErr
	}
	n := p.runCmd
	var errs []error
	if _, err := b.builtAt(n.st, n.exe, nodePkg); err != nil {
		errs = append(errs, err)
	}
	if n.sub != "run" {
		errs = append(errs, fmt.Errorf("aws-node runs vpccni-node %s, want run (vpc-cni, ipamd, the conflist)", n.sub))
	}
	errs = append(errs, n.checkFlags(runFlags))
	if _, err := b.builtAt(n.st, n.ipamdPath(), ipamdPkg); err != nil {
		errs = append(errs, fmt.Errorf("vpccni-node run starts --ipamd %s: %w", n.ipamdPath(), err))
	}
	if _, err := b.builtAt(n.st, path.Join(n.cniDir(), "vpc-cni"), pluginPkg); err != nil {
		errs = append(errs, fmt.Errorf("vpccni-node run installs vpc-cni from --cni-dir %s: %w", n.cniDir(), err))
	}
	if cloud, _ := flagValue(n.ipamdArgs, "cloud"); cloud != "" && cloud != "memory" && cloud != "aws" {
		errs = append(errs, fmt.Errorf("ipamd --cloud %q: ipamd knows memory and aws", cloud))
	}
	if _, ok := flagValue(n.ipamdArgs, "socket"); ok {
		errs = append(errs, errors.New("ipamd's --socket is given after --: vpccni-node run refuses it (give it as run's --socket, which run also probes)"))
	}
	return errors.Join(errs...)
}

// accounted says whether a variable vpccni does not read is one the
// catalogue says it leaves alone, and why.
func accounted(name string) (string, bool) {
	v, ok := awsenv.Lookup(name)
	if !ok || v.Status == awsenv.Supported || v.Note == "" {
		return "", false
	}
	return v.Status.String() + ": " + v.Note, true
}

// envCheck runs over both containers' variables: bad says what is wrong
// with a name neither vpccni-node nor (for aws-node) ipamd reads.
func envCheck(b *bundle, bad func(container, name string) error) error {
	p, err := b.podOf()
	if err != nil || p.init == nil || p.node == nil {
		return err
	}
	var errs []error
	initReads, err := initSettings(envOf(p.init))
	if err != nil {
		errs = append(errs, fmt.Errorf("vpccni-node init refuses aws-vpc-cni-init's environment: %w", err))
	}
	runReads, err := runSettings(envOf(p.node))
	if err != nil {
		errs = append(errs, fmt.Errorf("vpccni-node run refuses aws-node's environment: %w", err))
	}
	ipamdReads, err := ipamdEnvNames()
	if err != nil {
		return err
	}
	for _, e := range p.init.Env {
		if !initReads[e.Name] {
			errs = append(errs, bad(initContainer, e.Name))
		}
	}
	for _, e := range p.node.Env {
		if !runReads[e.Name] && !ipamdReads[e.Name] {
			errs = append(errs, bad(nodeContainer, e.Name))
		}
	}
	return errors.Join(errs...)
}

// checkEnvAccountedFor: every variable is read by vpccni, or one the
// catalogue (internal/awsenv) says vpccni leaves alone, with its reason;
// and vpccni-node accepts both environments.
func checkEnvAccountedFor(b *bundle) error {
	return envCheck(b, func(c, name string) error {
		if _, ok := accounted(name); ok {
			return nil
		}
		return fmt.Errorf("%s sets %s, which vpccni does not read and internal/awsenv does not account for", c, name)
	})
}

// checkEnvRead: vpccni's own manifest sets only what vpccni reads.
func checkEnvRead(b *bundle) error {
	return envCheck(b, func(c, name string) error {
		why, _ := accounted(name)
		if why != "" {
			why = " (" + why + ")"
		}
		return fmt.Errorf("%s sets %s, which vpccni does not read%s", c, name, why)
	})
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
// Go's flag package reads it, up to a "--".
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

// ipamdSetting is an ipamd setting as ipamd resolves it: the flag, else
// the environment variable (when set and not empty), else the default.
func ipamdSetting(n nodeCmd, c *corev1.Container, flagName, envName, def string) string {
	if v, ok := flagValue(n.ipamdArgs, flagName); ok {
		return v
	}
	if v := envOf(c)[envName]; envName != "" && v != "" {
		return v
	}
	return def
}

// checkHostPaths: what aws-node writes for the node lands on the node's
// directories, writable: vpc-cni, the conflist, ipamd's socket,
// checkpoint and log file.
func checkHostPaths(b *bundle) error {
	p, err := b.runOf()
	if p == nil {
		return err
	}
	getenv := func(k string) string { return envOf(p.node)[k] }
	errs := []error{
		onHost(p.ds, p.node, node.EnvHostBinDir, awsenv.Str(getenv, node.EnvHostBinDir), "/opt/cni/bin"),
		onHost(p.ds, p.node, node.EnvHostConfDir, awsenv.Str(getenv, node.EnvHostConfDir), "/etc/cni/net.d"),
	}
	sock := p.runCmd.socket()
	if _, m, err := hostPathOf(p.ds, p.node, path.Dir(sock)); err != nil {
		errs = append(errs, fmt.Errorf("socket %s: %w: the plugin, on the host, cannot dial it", sock, err))
	} else if m.ReadOnly {
		errs = append(errs, fmt.Errorf("socket %s: its directory is mounted read-only", sock))
	}
	cp := ipamdSetting(p.runCmd, p.node, "checkpoint", checkpoint.EnvPath, checkpoint.DefaultPath)
	if _, m, err := hostPathOf(p.ds, p.node, cp); err != nil || m.ReadOnly {
		errs = append(errs, fmt.Errorf("checkpoint %s: not on a writable hostPath (%v): a restarted ipamd would forget its pods", cp, err))
	}
	// ipamd logs to stderr unless told otherwise; a file must be on the
	// node (the root filesystem may be read-only, and is lost anyway).
	logFile := ipamdSetting(p.runCmd, p.node, "log-file", "AWS_VPC_K8S_CNI_LOG_FILE", "stderr")
	if !slices.Contains([]string{"stderr", "stdout"}, strings.ToLower(logFile)) {
		if _, m, err := hostPathOf(p.ds, p.node, logFile); err != nil || m.ReadOnly {
			errs = append(errs, fmt.Errorf("ipamd's log file %s: not on a writable hostPath (%v)", logFile, err))
		}
	}
	return errors.Join(errs...)
}
