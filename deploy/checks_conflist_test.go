package deploy

// ipamd as the rest of the node reaches it: the probes over its socket,
// its metrics port, and the conflist vpccni-node run writes for the
// DaemonSet's environment, read back as the runtime and vpc-cni read it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"

	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/node"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin"
)

// defaultMetricsAddress is ipamd's --metrics-address default, the
// reference's port (docs/reference-facts.md#introspection-metrics-and-health).
// ipamd keeps it unexported.
const defaultMetricsAddress = ":61678"

// grpc-health-probe's own defaults for its two timeouts.
const probeDefaultTimeout = time.Second

// checkProbes: both probes exec the image's grpc-health-probe against
// the socket ipamd listens on, and kubelet waits for the probe's own
// timeouts.
func checkProbes(b *bundle) error {
	p, err := b.runOf()
	if p == nil {
		return err
	}
	c, sock := p.node, p.runCmd.socket()
	var errs []error
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
		if pr.probe == nil || pr.probe.Exec == nil || len(pr.probe.Exec.Command) == 0 {
			errs = append(errs, fmt.Errorf("aws-node has no exec %s (the reference's execs grpc-health-probe)", pr.name))
			continue
		}
		cmd := pr.probe.Exec.Command
		if _, err := b.builtAt(p.runCmd.st, cmd[0], healthProbePkg); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pr.name, err))
		}
		addr, _ := flagValue(cmd[1:], "addr")
		if want := "unix://" + sock; addr != want {
			errs = append(errs, fmt.Errorf("%s checks -addr=%s, but ipamd listens on %s", pr.name, addr, want))
		}
		var total time.Duration
		for _, f := range []string{"connect-timeout", "rpc-timeout"} {
			d := probeDefaultTimeout
			if v, ok := flagValue(cmd[1:], f); ok {
				if d, err = time.ParseDuration(v); err != nil {
					errs = append(errs, fmt.Errorf("%s -%s=%s: %w", pr.name, f, v, err))
				}
			}
			total += d
		}
		timeout := time.Duration(max(pr.probe.TimeoutSeconds, 1)) * time.Second
		if timeout < total {
			errs = append(errs, fmt.Errorf("%s timeoutSeconds %d is below the probe's own timeouts (%v): kubelet would count a slow answer as a failure", pr.name, pr.probe.TimeoutSeconds, total))
		}
	}
	return errors.Join(errs...)
}

func checkMetrics(b *bundle) error {
	p, err := b.runOf()
	if p == nil {
		return err
	}
	c := p.node
	if v, _ := flagValue(p.runCmd.ipamdArgs, "disable-metrics"); v == "true" || slices.Contains(p.runCmd.ipamdArgs, "--disable-metrics") || envOf(c)["DISABLE_METRICS"] == "true" {
		return errors.New("metrics are disabled, but the DaemonSet names a metrics port")
	}
	addr := ipamdSetting(p.runCmd, c, "metrics-address", "METRICS_BIND_ADDRESS", defaultMetricsAddress)
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w", addr, err)
	}
	for _, cp := range c.Ports {
		if cp.Name == "metrics" {
			if strconv.Itoa(int(cp.ContainerPort)) != portStr {
				return fmt.Errorf("container port metrics is %d; ipamd serves /metrics on %s", cp.ContainerPort, addr)
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
// libcni's map lookups are exact, and encoding/json would take
// "VethPrefix" for vethPrefix, but the file should say it one way.
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

// podConflist is what vpccni-node run writes for aws-node's environment
// and socket, as run makes it.
func (b *bundle) podConflist(p *pod) ([]byte, error) {
	s, err := node.SettingsFromEnv(func(k string) string { return envOf(p.node)[k] })
	if err != nil {
		return nil, err
	}
	if sock := p.runCmd.socket(); sock != ipamd.DefaultSocket {
		s.IpamdAddress = "unix://" + sock
	}
	return b.conflistFor(s)
}

// chainOrder is the plugins vpccni-node run chains: vpc-cni, portmap on
// its result (which has the pod's IP), then bandwidth and tuning.
var chainOrder = []string{"vpc-cni", "portmap", "bandwidth", "tuning"}

// parseConflist parses a conflist as a runtime does (libcni) and returns
// the vpc-cni netconf as the plugin parses it.
func parseConflist(raw []byte) (*libcni.NetworkConfigList, *plugin.NetConf, error) {
	if err := exactKeys("the conflist", raw, conflistKeys); err != nil {
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
	if len(types) < 2 || !slices.Equal(types[:2], chainOrder[:2]) || !isSubsequence(types[2:], chainOrder[2:]) {
		return list, nil, fmt.Errorf("plugin types %q: want vpc-cni, portmap, then bandwidth and tuning if asked, in that order", types)
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

// isSubsequence says whether every element of sub is in list, in order.
func isSubsequence(sub, list []string) bool {
	i := 0
	for _, s := range sub {
		for i < len(list) && list[i] != s {
			i++
		}
		if i == len(list) {
			return false
		}
		i++
	}
	return true
}

// portmapConf is what the conflist sets of the reference portmap plugin.
type portmapConf struct {
	Type         string          `json:"type"`
	Name         string          `json:"name,omitempty"`
	Capabilities map[string]bool `json:"capabilities"`
	SNAT         *bool           `json:"snat"`
}

// checkConflist: the conflist for aws-node's environment is one the
// runtime and vpc-cni accept, under the reference's network name.
func checkConflist(b *bundle) error {
	p, err := b.runOf()
	if p == nil {
		return err
	}
	raw, err := b.podConflist(p)
	if err != nil {
		return fmt.Errorf("vpccni-node run writes no conflist for aws-node's environment: %w", err)
	}
	list, _, err := parseConflist(raw)
	if err != nil {
		return err
	}
	var errs []error
	if list.Name != node.NetworkName {
		errs = append(errs, fmt.Errorf("network name %q, want %q: the runtime caches results and ipamd keys allocations by it, as the reference's", list.Name, node.NetworkName))
	}
	if list.CNIVersion != node.CNIVersion {
		errs = append(errs, fmt.Errorf("cniVersion %q, want %s: the newest containerd 1.6 and vpc-cni both speak", list.CNIVersion, node.CNIVersion))
	}
	pm := list.Plugins[1].Bytes
	if err := exactKeys("portmap", pm, jsonKeys(reflect.TypeOf(portmapConf{}))); err != nil {
		errs = append(errs, err)
	}
	var pc portmapConf
	if err := json.Unmarshal(pm, &pc); err != nil {
		errs = append(errs, fmt.Errorf("portmap: %w", err))
	}
	if len(pc.Capabilities) != 1 || !pc.Capabilities["portMappings"] {
		errs = append(errs, fmt.Errorf("portmap capabilities %v, want {portMappings: true}: without it the runtime passes no hostPorts", pc.Capabilities))
	}
	if pc.SNAT == nil || !*pc.SNAT {
		errs = append(errs, errors.New("portmap needs snat: true, or a pod cannot reach a hostPort of its own node"))
	}
	return errors.Join(errs...)
}

// checkConflistAgainstIpamd: the plugin the conflist configures dials the
// node path of ipamd's socket, names veths as ipamd expects, and logs
// where the node has a directory.
func checkConflistAgainstIpamd(b *bundle) error {
	p, err := b.runOf()
	if p == nil {
		return err
	}
	raw, err := b.podConflist(p)
	if err != nil {
		return nil // checkConflist reports it
	}
	_, conf, err := parseConflist(raw)
	if err != nil {
		return nil // checkConflist reports it
	}
	var errs []error
	dial, ok := strings.CutPrefix(conf.IpamdAddress, "unix://")
	host, _, err := hostPathOf(p.ds, p.node, p.runCmd.socket())
	switch {
	case !ok:
		errs = append(errs, fmt.Errorf("the plugin dials %s; ipamd serves a Unix socket only", conf.IpamdAddress))
	case err != nil:
		errs = append(errs, err)
	case dial != host:
		errs = append(errs, fmt.Errorf("the plugin dials %s, but ipamd listens on the node's %s", dial, host))
	}
	if prefix := ipamdSetting(p.runCmd, p.node, "veth-prefix", "AWS_VPC_K8S_CNI_VETHPREFIX", ownership.DefaultVethPrefix); prefix != conf.VethPrefix {
		errs = append(errs, fmt.Errorf("conflist vethPrefix %q, ipamd's %q: ipamd recognises pods by their host veths", conf.VethPrefix, prefix))
	}
	if conf.PluginLogFile != "" {
		dir := path.Dir(conf.PluginLogFile)
		if !podCreates(p, dir) {
			errs = append(errs, fmt.Errorf("pluginLogFile %s: no mounted hostPath volume (DirectoryOrCreate) makes %s on the node, and without it the plugin logs only warnings, to the runtime's stderr", conf.PluginLogFile, dir))
		}
	}
	return errors.Join(errs...)
}

// podCreates reports whether the pod has a mounted hostPath volume that
// makes dir on the node.
func podCreates(p *pod, dir string) bool {
	for _, v := range p.ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil || v.HostPath.Path != dir || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
			continue
		}
		for _, c := range allContainers(p.ds.Spec.Template.Spec) {
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name }) {
				return true
			}
		}
	}
	return false
}
