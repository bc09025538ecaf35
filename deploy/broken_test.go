package deploy

// TestBrokenCopies shows that every check can fail: each entry breaks one
// thing in a copy of the files, and the copy must be rejected with an
// error that names what was broken.

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/vpccni/vpccni/node"
)

// brokenCopy breaks one thing in a copy of the files. Either a text edit
// (old must occur in file; every occurrence is replaced by new) or an edit
// of the parsed objects; the copy must be rejected with an error that
// contains want.
type brokenCopy struct {
	name     string
	file     string
	old, new string
	edit     func(t *testing.T, b *bundle)
	want     string
}

// Accessors for the broken copies' edits.
func dsOf(t *testing.T, b *bundle) *appsv1.DaemonSet {
	t.Helper()
	d, err := b.daemonSet()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func nodeC(t *testing.T, b *bundle) *corev1.Container {
	t.Helper()
	c, err := container(dsOf(t, b), false, nodeContainer)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func initC(t *testing.T, b *bundle) *corev1.Container {
	t.Helper()
	c, err := container(dsOf(t, b), true, initContainer)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

func mountOf(t *testing.T, c *corev1.Container, volume string) *corev1.VolumeMount {
	t.Helper()
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	t.Fatalf("container %s does not mount %s", c.Name, volume)
	return nil
}

// wrapConflist makes the copy's conflist what node.Conflist writes with
// old replaced by new.
func wrapConflist(old, new string) func(t *testing.T, b *bundle) {
	return func(t *testing.T, b *bundle) {
		b.conflistFor = func(s node.Settings) ([]byte, error) {
			raw, err := node.Conflist(s)
			if err == nil && !bytes.Contains(raw, []byte(old)) {
				t.Fatalf("node.Conflist's output has no %q", old)
			}
			return bytes.ReplaceAll(raw, []byte(old), []byte(new)), err
		}
	}
}

const (
	dsFile   = manifestDir + "/daemonset.yaml"
	rbacFile = manifestDir + "/rbac.yaml"
)

func brokenCopies() []brokenCopy {
	return []brokenCopy{
		// Typos the strict decoder must catch.
		{name: "misspelt field", file: dsFile, old: "terminationGracePeriodSeconds:", new: "terminationGracePeriodSecond:", want: `unknown field "spec.template.spec.terminationGracePeriodSecond"`},
		{name: "field in the wrong case", file: dsFile, old: "hostNetwork:", new: "hostnetwork:", want: `unknown field "spec.template.spec.hostnetwork"`},
		{name: "value of the wrong type", file: dsFile, old: "terminationGracePeriodSeconds: 10", new: "terminationGracePeriodSeconds: ten", want: "terminationGracePeriodSeconds"},
		{name: "duplicate field", file: dsFile, old: "      hostNetwork: true\n", new: "      hostNetwork: true\n      hostNetwork: false\n", want: `key "hostNetwork" already set`},
		{name: "misspelt kind", file: dsFile, old: "kind: DaemonSet", new: "kind: DeamonSet", want: `no kind "DeamonSet"`},
		{name: "unknown field in a later document", file: rbacFile, old: "roleRef:", new: "roleref:", want: `unknown field "roleref"`},

		// Objects and the DaemonSet.
		{name: "object in another namespace", file: rbacFile, old: "  name: aws-node\n  namespace: kube-system\n  labels", new: "  name: aws-node\n  namespace: default\n  labels", want: `namespace "default"`},
		{name: "DaemonSet under vpccni's old name", edit: func(t *testing.T, b *bundle) { dsOf(t, b).Name = "vpccni-node" }, want: "want kube-system/aws-node"},
		{name: "pods without the reference's label", edit: func(t *testing.T, b *bundle) {
			d := dsOf(t, b)
			delete(d.Spec.Template.Labels, appLabel)
			d.Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/name": dsName}
		}, want: "label k8s-app"},
		{name: "selector does not select the pods", edit: func(t *testing.T, b *bundle) {
			dsOf(t, b).Spec.Selector.MatchLabels = map[string]string{appLabel: "other"}
		}, want: "selector"},
		{name: "OnDelete updates", edit: func(t *testing.T, b *bundle) {
			d := dsOf(t, b)
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		}, want: "RollingUpdate"},
		{name: "not hostNetwork", edit: func(t *testing.T, b *bundle) { dsOf(t, b).Spec.Template.Spec.HostNetwork = false }, want: "hostNetwork"},
		{name: "priority class dropped", edit: func(t *testing.T, b *bundle) { dsOf(t, b).Spec.Template.Spec.PriorityClassName = "" }, want: "system-node-critical"},
		{name: "longer grace period", edit: func(t *testing.T, b *bundle) {
			g := int64(30)
			dsOf(t, b).Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}, want: "terminationGracePeriodSeconds"},
		{name: "tolerates only NoSchedule", edit: func(t *testing.T, b *bundle) {
			dsOf(t, b).Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, want: "tolerate every taint"},
		{name: "cluster DNS", edit: func(t *testing.T, b *bundle) {
			dsOf(t, b).Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		}, want: "dnsPolicy"},
		{name: "no cpu request", edit: func(t *testing.T, b *bundle) { initC(t, b).Resources = corev1.ResourceRequirements{} }, want: "no cpu request"},
		{name: "no memory request", edit: func(t *testing.T, b *bundle) { delete(nodeC(t, b).Resources.Requests, corev1.ResourceMemory) }, want: "no memory request"},
		{name: "a third container", edit: func(t *testing.T, b *bundle) {
			d := dsOf(t, b)
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: "aws-eks-nodeagent", Image: "vpccni:dev"})
		}, want: "container aws-eks-nodeagent (image vpccni:dev) is not one of vpccni's"},
		{name: "init container renamed", edit: func(t *testing.T, b *bundle) { initC(t, b).Name = "install-cni" }, want: "no init container aws-vpc-cni-init"},

		// Volumes.
		{name: "volume mount names no volume", edit: func(t *testing.T, b *bundle) {
			mountOf(t, nodeC(t, b), "run-dir").Name = "run-dri"
		}, want: `mounts volume "run-dri", which the pod does not have`},
		{name: "volume nobody mounts", edit: func(t *testing.T, b *bundle) {
			d := dsOf(t, b)
			d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes, corev1.Volume{Name: "bpf-pin-path",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/bpf"}}})
		}, want: `volume "bpf-pin-path" is mounted by no container`},
		{name: "xtables lock without FileOrCreate", file: dsFile, old: "            type: FileOrCreate\n", new: "", want: "not a FileOrCreate hostPath"},

		// Service account and RBAC.
		{name: "service account that does not exist", edit: func(t *testing.T, b *bundle) {
			dsOf(t, b).Spec.Template.Spec.ServiceAccountName = "vpccni-node"
		}, want: `ServiceAccount kube-system/vpccni-node`},
		{name: "role without get", edit: func(t *testing.T, b *bundle) {
			b.clusterRoles()[0].Rules[0].Verbs = []string{"list", "watch"}
		}, want: "may not get pods"},
		{name: "role with pods in another group", edit: func(t *testing.T, b *bundle) {
			b.clusterRoles()[0].Rules[0].APIGroups = []string{"apps"}
		}, want: "may not get pods"},
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
			b.clusterRoleBindings()[0].RoleRef.Name = "vpccni-node"
		}, want: "no ClusterRoleBinding"},

		// Images and privileges.
		{name: "init runs the aws-node image", edit: func(t *testing.T, b *bundle) { initC(t, b).Image = "vpccni:dev" }, want: "container aws-vpc-cni-init runs image vpccni:dev, want vpccni-init:dev"},
		{name: "image vpccni does not build", edit: func(t *testing.T, b *bundle) { nodeC(t, b).Image = "vpccni:old" }, want: "vpccni:old"},
		{name: "Makefile substitutes another image", file: makefilePath, old: "MANIFEST_INIT_IMAGE := vpccni-init:dev", new: "MANIFEST_INIT_IMAGE := vpccni-init:latest", want: "want vpccni-init:latest"},
		{name: "aws-node with SYS_ADMIN", edit: func(t *testing.T, b *bundle) {
			c := nodeC(t, b)
			c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "SYS_ADMIN")
		}, want: "want exactly NET_ADMIN and NET_RAW"},
		{name: "aws-node without NET_RAW", file: dsFile, old: `add: ["NET_ADMIN", "NET_RAW"]`, new: `add: ["NET_ADMIN"]`, want: "want exactly NET_ADMIN and NET_RAW"},
		{name: "aws-node privileged", edit: func(t *testing.T, b *bundle) {
			yes := true
			nodeC(t, b).SecurityContext.Privileged = &yes
		}, want: "aws-node is privileged"},
		{name: "init not privileged", edit: func(t *testing.T, b *bundle) { initC(t, b).SecurityContext = nil }, want: "aws-vpc-cni-init is not privileged"},

		// aws-vpc-cni-init.
		{name: "init runs run", edit: func(t *testing.T, b *bundle) {
			initC(t, b).Command = []string{"/app/vpccni-node", "run"}
		}, want: "aws-vpc-cni-init runs vpccni-node run, want init"},
		{name: "init's plugin directory lacks a plugin", edit: func(t *testing.T, b *bundle) {
			initC(t, b).Args = []string{"--cni-dir", "/app"}
		}, want: "the image's /app/portmap: stage build never builds /out/app/portmap"},
		{name: "tuning not built", file: dockerfilePath, old: " \\\n      github.com/containernetworking/plugins/plugins/meta/tuning@${CNI_PLUGINS_VERSION}", new: "", want: "never builds /out/app/cni/tuning"},
		{name: "init installs into the conf directory", edit: func(t *testing.T, b *bundle) {
			setEnv(initC(t, b), "HOST_CNI_BIN_PATH", "/host/etc/cni/net.d")
		}, want: "HOST_CNI_BIN_PATH: /host/etc/cni/net.d (container aws-vpc-cni-init) is not on a hostPath volume"},
		{name: "init's bin directory read-only", edit: func(t *testing.T, b *bundle) {
			mountOf(t, initC(t, b), "cni-bin-dir").ReadOnly = true
		}, want: "mounted read-only in aws-vpc-cni-init"},
		{name: "init flag run has", edit: func(t *testing.T, b *bundle) {
			initC(t, b).Args = []string{"--socket", "/x"}
		}, want: "vpccni-node init has no flag --socket"},

		// aws-node's command.
		{name: "entrypoint not in the image", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/usr/local/bin/vpccni-node", "run"}
		}, want: `"/usr/local/bin/vpccni-node" is not in the image`},
		{name: "ipamd run directly", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/app/ipamd", "--cloud", "memory"}
		}, want: "is built from ./ipamd/cmd/ipamd, not ./node/cmd/vpccni-node"},
		{name: "ipamd binary elsewhere", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/app/vpccni-node", "run", "--ipamd", "/usr/bin/ipamd"}
		}, want: `"/usr/bin/ipamd" is not in the image`},
		{name: "ipamd built from the wrong package", file: dockerfilePath, old: "-o /out/app/ipamd ./ipamd/cmd/ipamd", new: "-o /out/app/ipamd ./plugin/cmd/vpc-cni", want: "the image's /app/ipamd is built from ./plugin/cmd/vpc-cni"},
		{name: "unknown cloud", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/app/vpccni-node", "run", "--", "--cloud", "gcp"}
		}, want: `--cloud "gcp"`},
		{name: "socket after --", edit: func(t *testing.T, b *bundle) {
			c := nodeC(t, b)
			c.Command = append(c.Command, "--socket", "/var/run/aws-node/other.sock")
		}, want: "after --"},
		{name: "run flag misspelt", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/app/vpccni-node", "run", "--sockett", "/x", "--", "--cloud", "memory"}
		}, want: "vpccni-node run has no flag --sockett"},

		// The environment.
		{name: "variable vpccni does not read", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "WARM_IP_TARGETS", "5")
		}, want: "aws-node sets WARM_IP_TARGETS, which vpccni does not read and internal/awsenv does not account for"},
		{name: "exempt variable in vpccni's manifest", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "ENABLE_MULTI_NIC", "false")
		}, want: "aws-node sets ENABLE_MULTI_NIC, which vpccni does not read (not supported: multi-NIC"},
		{name: "ipamd's variable on init", edit: func(t *testing.T, b *bundle) {
			setEnv(initC(t, b), "WARM_ENI_TARGET", "1")
		}, want: "aws-vpc-cni-init sets WARM_ENI_TARGET"},
		{name: "value vpccni-node run refuses", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "POD_SECURITY_GROUP_ENFORCING_MODE", "lenient")
		}, want: "vpccni-node run refuses aws-node's environment"},
		{name: "value vpccni-node init refuses", edit: func(t *testing.T, b *bundle) {
			setEnv(initC(t, b), "DISABLE_TCP_EARLY_DEMUX", "maybe")
		}, want: "vpccni-node init refuses aws-vpc-cni-init's environment"},

		// Where aws-node's files land.
		{name: "conflist into the bin directory", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "HOST_CNI_CONFDIR_PATH", "/host/opt/cni/bin")
		}, want: "HOST_CNI_CONFDIR_PATH=/host/opt/cni/bin is the node's /opt/cni/bin, want /etc/cni/net.d"},
		{name: "socket directory not on the host", edit: func(t *testing.T, b *bundle) {
			mountOf(t, nodeC(t, b), "run-dir").MountPath = "/run/vpccni"
		}, want: "cannot dial it"},
		{name: "checkpoint inside the container", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "AWS_VPC_K8S_CNI_BACKING_STORE", "/tmp/ipam.json")
		}, want: "checkpoint /tmp/ipam.json"},
		{name: "ipamd log file inside the container", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "AWS_VPC_K8S_CNI_LOG_FILE", "/var/log/ipamd.log")
		}, want: "ipamd's log file /var/log/ipamd.log"},

		// Probes and metrics.
		{name: "probe binary not in the image", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).ReadinessProbe.Exec.Command[0] = "/bin/grpc_health_probe"
		}, want: `readinessProbe: "/bin/grpc_health_probe" is not in the image`},
		{name: "probe on another socket", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).LivenessProbe.Exec.Command[1] = "-addr=unix:///var/run/aws-node/other.sock"
		}, want: "livenessProbe checks -addr=unix:///var/run/aws-node/other.sock"},
		{name: "probe left behind when the socket moves", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Command = []string{"/app/vpccni-node", "run", "--socket", "/var/run/aws-node/v2.sock", "--", "--cloud", "memory"}
		}, want: "but ipamd listens on unix:///var/run/aws-node/v2.sock"},
		{name: "probe timeout below the probe's own", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).LivenessProbe.TimeoutSeconds = 0
		}, want: "livenessProbe timeoutSeconds 0 is below"},
		{name: "httpGet probe", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/v1/pool"}}}
		}, want: "no exec readinessProbe"},
		{name: "metrics port wrong", edit: func(t *testing.T, b *bundle) {
			nodeC(t, b).Ports[0].ContainerPort = 9090
		}, want: "61678"},
		{name: "metrics disabled under a metrics port", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "DISABLE_METRICS", "true")
		}, want: "metrics are disabled"},

		// The conflist vpccni-node run writes.
		{name: "conflist not JSON", edit: wrapConflist(`"plugins": [`, `"plugins": [,`), want: "is not JSON"},
		{name: "conflist key misspelt", edit: wrapConflist(`"cniVersion"`, `"cniversion"`), want: `"cniversion"`},
		{name: "plugin type misspelt", edit: wrapConflist(`"type": "vpc-cni"`, `"type": "vpccni"`), want: "plugin types"},
		{name: "portmap not chained", edit: wrapConflist(`"type": "portmap"`, `"type": "bandwidth"`), want: "plugin types"},
		{name: "portmap without snat", edit: wrapConflist(`"snat": true`, `"snat": false`), want: "snat"},
		{name: "portmap without its capability", edit: wrapConflist(`"portMappings": true`, `"portMappings": false`), want: "portMappings"},
		{name: "network renamed", edit: wrapConflist(`"name": "aws-cni"`, `"name": "vpccni"`), want: `want "aws-cni"`},
		{name: "CNI version containerd 1.6 refuses", edit: wrapConflist(`"cniVersion": "1.0.0"`, `"cniVersion": "1.1.0"`), want: "want 1.0.0"},
		{name: "netconf field in the wrong case", edit: wrapConflist(`"vethPrefix"`, `"vethprefix"`), want: `"vethprefix"`},
		{name: "netconf value the plugin refuses", edit: wrapConflist(`"mtu": "9001"`, `"mtu": "90001"`), want: "mtu"},
		{name: "plugin dials another socket", edit: wrapConflist(`"mtu"`, `"ipamdAddress": "unix:///run/vpccni/ipamd.sock", "mtu"`), want: "the plugin dials /run/vpccni/ipamd.sock"},
		{name: "veth prefix differs from ipamd's", edit: func(t *testing.T, b *bundle) {
			c := nodeC(t, b)
			c.Command = append(c.Command, "--veth-prefix", "vpc")
		}, want: "vethPrefix"},
		{name: "plugin log where the node has no directory", edit: func(t *testing.T, b *bundle) {
			setEnv(nodeC(t, b), "AWS_VPC_K8S_PLUGIN_LOG_FILE", "/var/log/vpccni/plugin.log")
		}, want: "no mounted hostPath volume (DirectoryOrCreate) makes /var/log/vpccni"},

		// The Dockerfile.
		{name: "cgo on", file: dockerfilePath, old: "ENV CGO_ENABLED=0", new: "ENV CGO_ENABLED=1", want: "CGO_ENABLED=0"},
		{name: "no version", file: dockerfilePath, old: "-X main.buildVersion=${VERSION}", new: "", want: "buildVersion"},
		{name: "build context ignores node/", file: dockerignorePath, old: "bin\n", new: "bin\nnode\n", want: "excludes node/cmd/vpccni-node"},
		{name: "aws-node image without --cloud aws", file: dockerfilePath, old: `"run", "--", "--cloud", "aws"]`, new: `"run"]`, want: "the default target (last stage)'s ENTRYPOINT"},
		{name: "init image in shell form", file: dockerfilePath, old: `ENTRYPOINT ["/app/vpccni-node", "init"]`, new: `ENTRYPOINT /app/vpccni-node init`, want: "target init's ENTRYPOINT is in shell form"},
		{name: "no init target", file: dockerfilePath, old: "AS init", new: "AS initial", want: "no stage named init"},
		{name: "no iptables in the aws-node image", file: dockerfilePath, old: "apt-get install -y --no-install-recommends iptables", new: "apt-get install -y --no-install-recommends curl", want: "must install Debian's iptables"},
		{name: "no CA bundle", file: dockerfilePath, old: "COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n", new: "", want: "CA bundle"},
		{name: "probe version differs from the Makefile's", file: dockerfilePath, old: "ARG GRPC_HEALTH_PROBE_VERSION=v0.4.63", new: "ARG GRPC_HEALTH_PROBE_VERSION=v0.4.40", want: "grpc-health-probe is v0.4.40"},
		{name: "CNI plugins version differs from go.mod's", file: dockerfilePath, old: "ARG CNI_PLUGINS_VERSION=v1.10.0", new: "ARG CNI_PLUGINS_VERSION=v1.9.0", want: "CNI plugins are v1.9.0"},

		// The Makefile.
		{name: "make image builds one image", file: makefilePath, old: "--target init -t $(INIT_IMAGE)", new: "-t $(INIT_IMAGE)", want: "make image must build --target init"},
		{name: "kind-load waits for the old DaemonSet", file: makefilePath, old: "daemonset/aws-node", new: "daemonset/vpccni-node", want: `"daemonset/aws-node"`},
		{name: "no MANIFEST_INIT_IMAGE", file: makefilePath, old: "MANIFEST_INIT_IMAGE := vpccni-init:dev", new: "", want: "defines no MANIFEST_INIT_IMAGE"},

		// The kind cluster.
		{name: "kind keeps its CNI", file: kindPath, old: "disableDefaultCNI: true", new: "disableDefaultCNI: false", want: "disableDefaultCNI"},
		{name: "kind field misspelt", file: kindPath, old: "disableDefaultCNI", new: "disabledDefaultCNI", want: "disabledDefaultCNI"},
		{name: "kind without a worker", file: kindPath, old: "  - role: worker\n", new: "", want: "worker"},
		{name: "EC2 on kind", edit: func(t *testing.T, b *bundle) { nodeC(t, b).Command = nil }, want: `--cloud "aws": the manifests are for kind`},
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
			if got := joined(errs); !strings.Contains(got, bc.want) {
				t.Fatalf("rejected, but no error names %q:\n%s", bc.want, got)
			} else {
				t.Logf("rejected:\n%s", got)
			}
		})
	}
}
