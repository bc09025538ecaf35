package deploy

// The vpccni-audit pod (deploy/audit/audit-pod.yaml) is decoded strictly
// as a Pod and checked against what vpccni-audit reads and against the
// aws-node DaemonSet whose node it audits: the same image (the audit reads
// the checkpoint as that ipamd writes it), the same checkpoint file on the
// node, containerd's socket where the CRI default endpoint says, read-only
// mounts and no privilege beyond NET_ADMIN for --fix.
// TestAuditPodBrokenCopies shows that every check can fail. The pod lives
// outside deploy/kubernetes/ (readFiles and kubecluster.ReadManifests
// apply that directory whole), so these are its only checks.

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/vpccni/vpccni/audit/cri"
	"github.com/vpccni/vpccni/ipamd/checkpoint"
)

const (
	auditPodPath = "deploy/audit/audit-pod.yaml"
	auditPkg     = "./audit/cmd/vpccni-audit"
	auditExe     = "/app/vpccni-audit"
	auditName    = "vpccni-audit"
	// auditNodePlaceholder is the nodeName the usage comment tells to
	// replace: no node has it, so an unedited pod never runs anywhere.
	auditNodePlaceholder = "NODE_NAME"
	// criDefaultEndpoint is vpccni-audit's default --cri-endpoint:
	// containerd's socket on EKS nodes.
	criDefaultEndpoint = cri.DefaultEndpoint
)

// decodeAuditPod decodes the file strictly (unknown and duplicate fields
// fail) as exactly one Pod.
func decodeAuditPod(data []byte) (*corev1.Pod, error) {
	objs, err := decodeManifests(auditPodPath, data)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: %d objects, want the one Pod", auditPodPath, len(objs))
	}
	p, ok := objs[0].obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, want a Pod", objs[0].where, objs[0].obj)
	}
	return p, nil
}

// podAsDaemonSet wraps a pod's spec so that hostPathOf, written for the
// DaemonSet, resolves the pod's container paths to the node's.
func podAsDaemonSet(p *corev1.Pod) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: p.Spec}}}
}

// checkAuditPod returns every way the audit pod fails to audit the node
// aws (the DaemonSet's aws-node, as runOf makes it out) runs on.
func checkAuditPod(p *corev1.Pod, aws *pod) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	spec := &p.Spec

	// The usage comment's kubectl commands name kube-system/vpccni-audit,
	// and system-node-critical is admitted in kube-system only.
	if p.Namespace != dsNamespace || p.Name != auditName {
		bad("pod is %s/%s, want %s/%s: the usage comment's kubectl commands name it", p.Namespace, p.Name, dsNamespace, auditName)
	}
	if spec.NodeName != auditNodePlaceholder {
		bad("nodeName %q, want the placeholder %s: the user names the node to audit, and an unedited pod must run nowhere", spec.NodeName, auditNodePlaceholder)
	}
	if !spec.HostNetwork {
		bad("hostNetwork must be true: the links, routes and rules audited are the node's, and ipamd's introspection is on the node's loopback")
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		bad("restartPolicy %q, want Never: one run, whose exit code a restart would replace", spec.RestartPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		bad("priorityClassName %q, want system-node-critical: admitted on a node under pressure, as aws-node is", spec.PriorityClassName)
	}
	all := slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	})
	if !all {
		bad("tolerations must tolerate every taint (operator Exists, no key, no effect): a NotReady node is one to audit, and kubelet refuses pods that do not tolerate its NoExecute taint")
	}
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		bad("automountServiceAccountToken must be false: vpccni-audit never calls the API server, so the pod needs no token")
	}
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 {
		bad("%d init containers and %d containers, want the one container %s", len(spec.InitContainers), len(spec.Containers), auditName)
		return errors.Join(errs...)
	}
	c := &spec.Containers[0]

	if c.Image != aws.node.Image {
		bad("image %s, want aws-node's %s: the audit must read the checkpoint as the running ipamd writes it", c.Image, aws.node.Image)
	}
	if !slices.Equal(c.Command, []string{auditExe}) {
		bad("command %q, want [%s]", c.Command, auditExe)
	}
	args := append(slices.Clone(c.Command[min(1, len(c.Command)):]), c.Args...)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		bad("container %s needs cpu and memory requests", c.Name)
	}

	// Least privilege: NET_ADMIN is for --fix --dry-run=false only.
	var caps []string
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Add {
			caps = append(caps, string(cp))
		}
	}
	if !slices.Equal(caps, []string{"NET_ADMIN"}) {
		bad("adds capabilities %q, want only NET_ADMIN: reading needs none, --fix removes links and rules", caps)
	}
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		bad("container %s is privileged: the audit needs NET_ADMIN at most", c.Name)
	}

	// Nothing the audit reads may be changed by it.
	volumes := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		volumes[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			bad("volume %s is mounted at %s writable: the audit only reads the node's files", m.Name, m.MountPath)
		}
	}
	// mountAt checks that a volume is mounted exactly at dir and is a
	// hostPath of type want: a missing one then stops the pod instead of
	// being made empty on the node.
	mountAt := func(what, dir string, want corev1.HostPathType) {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == dir })
		if i < 0 {
			bad("%s: no volume is mounted at %s", what, dir)
			return
		}
		v := volumes[c.VolumeMounts[i].Name]
		switch {
		case v == nil:
			bad("%s: mounts volume %q, which the pod does not have", what, c.VolumeMounts[i].Name)
		case v.HostPath == nil:
			bad("%s: volume %s is not a hostPath", what, v.Name)
		case v.HostPath.Type == nil || *v.HostPath.Type != want:
			bad("%s: volume %s is not a hostPath of type %s: a missing one would be created empty on the node, not refused", what, v.Name, want)
		}
	}

	// ipamd's checkpoint: the flag's file must be aws-node's on the node,
	// under a mount of the checkpoint's directory.
	cp, ok := flagValue(args, "checkpoint")
	if !ok {
		bad("no --checkpoint: the pod says which file it reads")
		cp = checkpoint.DefaultPath
	}
	if dir := path.Dir(checkpoint.DefaultPath); path.Dir(cp) != dir {
		bad("--checkpoint=%s is not in %s, the directory of ipamd's default checkpoint %s", cp, dir, checkpoint.DefaultPath)
	}
	mountAt("checkpoint "+cp, path.Dir(cp), corev1.HostPathDirectory)
	awsCP := ipamdSetting(aws.runCmd, aws.node, "checkpoint", checkpoint.EnvPath, checkpoint.DefaultPath)
	awsHost, _, err := hostPathOf(aws.ds, aws.node, awsCP)
	if err != nil {
		bad("aws-node's checkpoint: %w", err)
	}
	if host, _, err := hostPathOf(podAsDaemonSet(p), c, cp); err != nil {
		bad("checkpoint: %w", err)
	} else if awsHost != "" && host != awsHost {
		bad("--checkpoint=%s is the node's %s, but aws-node's ipamd writes %s", cp, host, awsHost)
	}

	// The runtime's sandboxes: without them, whether a pod lives is read
	// from its veth alone.
	ep, ok := flagValue(args, "cri-endpoint")
	if !ok {
		ep = criDefaultEndpoint
	}
	if ep != criDefaultEndpoint {
		bad("--cri-endpoint=%q, want the default %s: containerd's socket on EKS nodes", ep, criDefaultEndpoint)
	}
	sock := strings.TrimPrefix(criDefaultEndpoint, "unix://")
	mountAt("CRI endpoint "+criDefaultEndpoint, sock, corev1.HostPathSocket)
	if host, _, err := hostPathOf(podAsDaemonSet(p), c, sock); err != nil {
		bad("CRI endpoint: %w", err)
	} else if host != sock {
		bad("%s in the pod is the node's %s, want containerd's %s", sock, host, sock)
	}
	return errors.Join(errs...)
}

// awsNode is aws-node as the DaemonSet runs it.
func awsNode(t *testing.T, b *bundle) *pod {
	t.Helper()
	aws, err := b.runOf()
	if aws == nil {
		t.Fatalf("aws-node's command cannot be made out (TestDeployFilesParseAndAgree says why): %v", err)
	}
	return aws
}

func TestAuditPodManifest(t *testing.T) {
	raw, b := inputs(t, auditPodPath)
	p, err := decodeAuditPod(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAuditPod(p, awsNode(t, b)); err != nil {
		t.Error(err)
	}
}

// TestAuditPodImageHasAudit: the pod's image (aws-node's) must hold
// /app/vpccni-audit built from its package, or the pod fails to start on
// the node being audited. Skipped while the package does not exist.
func TestAuditPodImageHasAudit(t *testing.T) {
	if _, err := os.Stat(filepath.Join(repoRoot, auditPkg)); errors.Is(err, os.ErrNotExist) {
		t.Skipf("no %s yet", auditPkg)
	}
	raw, b := inputs(t, auditPodPath)
	p, err := decodeAuditPod(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("%d containers; TestAuditPodManifest says why", len(p.Spec.Containers))
	}
	st, err := b.stageOf(&p.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.builtAt(st, auditExe, auditPkg); err != nil {
		t.Error(err)
	}
}

// auditBrokenCopy breaks one thing: a text edit of the pod's file (old
// must occur; every occurrence becomes new) or an edit of the decoded pod
// or of aws-node. The copy must be rejected with an error containing want.
type auditBrokenCopy struct {
	name     string
	old, new string
	edit     func(p *corev1.Pod, aws *pod)
	want     string
}

// Accessors for the broken copies' edits; the file has them, or the
// unbroken check fails first.
func auditC(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }

func auditMount(p *corev1.Pod, volume string) *corev1.VolumeMount {
	c := auditC(p)
	return &c.VolumeMounts[slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })]
}

func auditVolume(p *corev1.Pod, name string) *corev1.Volume {
	return &p.Spec.Volumes[slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })]
}

func auditBrokenCopies() []auditBrokenCopy {
	yes := true
	hostPathType := func(name string, typ corev1.HostPathType) func(*corev1.Pod, *pod) {
		return func(p *corev1.Pod, _ *pod) { auditVolume(p, name).HostPath.Type = &typ }
	}
	return []auditBrokenCopy{
		// The strict decoder.
		{name: "misspelt field", old: "hostNetwork:", new: "hostnetwork:", want: `unknown field "spec.hostnetwork"`},
		{name: "duplicate field", old: "  restartPolicy: Never\n", new: "  restartPolicy: Never\n  restartPolicy: Always\n", want: `key "restartPolicy" already set`},
		{name: "misspelt kind", old: "kind: Pod", new: "kind: Pdo", want: `no kind "Pdo"`},
		{name: "two documents", old: "apiVersion: v1\nkind: Pod\n", new: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: audit\n---\napiVersion: v1\nkind: Pod\n", want: "2 objects"},

		// The pod.
		{name: "other namespace", edit: func(p *corev1.Pod, _ *pod) { p.Namespace = "default" }, want: "pod is default/vpccni-audit"},
		{name: "node filled in", old: "nodeName: NODE_NAME", new: "nodeName: ip-10-0-1-23.ec2.internal", want: "placeholder NODE_NAME"},
		{name: "pod network", edit: func(p *corev1.Pod, _ *pod) { p.Spec.HostNetwork = false }, want: "hostNetwork"},
		{name: "restarts", edit: func(p *corev1.Pod, _ *pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }, want: "restartPolicy"},
		{name: "no priority class", edit: func(p *corev1.Pod, _ *pod) { p.Spec.PriorityClassName = "" }, want: "system-node-critical"},
		{name: "missing toleration", edit: func(p *corev1.Pod, _ *pod) { p.Spec.Tolerations = nil }, want: "tolerate every taint"},
		{name: "tolerates NoSchedule only", edit: func(p *corev1.Pod, _ *pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, want: "tolerate every taint"},
		{name: "token mounted", edit: func(p *corev1.Pod, _ *pod) { p.Spec.AutomountServiceAccountToken = &yes }, want: "automountServiceAccountToken"},
		{name: "token by default", edit: func(p *corev1.Pod, _ *pod) { p.Spec.AutomountServiceAccountToken = nil }, want: "automountServiceAccountToken"},
		{name: "sidecar", edit: func(p *corev1.Pod, _ *pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "shell", Image: "busybox"})
		}, want: "2 containers"},

		// The container.
		{name: "other image", edit: func(p *corev1.Pod, _ *pod) { auditC(p).Image = "vpccni:v0.1.0" }, want: "image vpccni:v0.1.0, want aws-node's vpccni:dev"},
		{name: "aws-node runs another image", edit: func(_ *corev1.Pod, aws *pod) { aws.node.Image = "registry.example/vpccni:v2" }, want: "want aws-node's registry.example/vpccni:v2"},
		{name: "image's entrypoint", edit: func(p *corev1.Pod, _ *pod) { auditC(p).Command = nil }, want: "command []"},
		{name: "other binary", edit: func(p *corev1.Pod, _ *pod) { auditC(p).Command = []string{"/app/vpccni-node"} }, want: "command [\"/app/vpccni-node\"]"},
		{name: "no requests", edit: func(p *corev1.Pod, _ *pod) { auditC(p).Resources = corev1.ResourceRequirements{} }, want: "cpu and memory requests"},

		// Privileges.
		{name: "privileged true", edit: func(p *corev1.Pod, _ *pod) { auditC(p).SecurityContext.Privileged = &yes }, want: "is privileged"},
		{name: "SYS_ADMIN too", old: `add: ["NET_ADMIN"]`, new: `add: ["NET_ADMIN", "SYS_ADMIN"]`, want: "want only NET_ADMIN"},
		{name: "NET_RAW instead", old: `add: ["NET_ADMIN"]`, new: `add: ["NET_RAW"]`, want: "want only NET_ADMIN"},

		// Mounts.
		{name: "checkpoint mount not read-only", edit: func(p *corev1.Pod, _ *pod) {
			auditMount(p, "run-dir").ReadOnly = false
		}, want: "mounted at /var/run/aws-node writable"},
		{name: "socket mount not read-only", old: "          mountPath: /run/containerd/containerd.sock\n          readOnly: true\n", new: "          mountPath: /run/containerd/containerd.sock\n          readOnly: false\n", want: "mounted at /run/containerd/containerd.sock writable"},
		{name: "checkpoint directory elsewhere in the pod", edit: func(p *corev1.Pod, _ *pod) {
			auditMount(p, "run-dir").MountPath = "/host/var/run/aws-node"
		}, want: "no volume is mounted at /var/run/aws-node"},
		{name: "--checkpoint elsewhere", edit: func(p *corev1.Pod, _ *pod) {
			auditC(p).Args = []string{"--checkpoint=/var/lib/ipamd/ipam.json"}
		}, want: "not in /var/run/aws-node"},
		{name: "no --checkpoint", edit: func(p *corev1.Pod, _ *pod) { auditC(p).Args = nil }, want: "no --checkpoint"},
		{name: "another node directory", old: "        path: /var/run/aws-node\n", new: "        path: /var/run/vpccni\n", want: "is the node's /var/run/vpccni/ipam.json, but aws-node's ipamd writes /var/run/aws-node/ipam.json"},
		{name: "aws-node keeps its checkpoint elsewhere", edit: func(_ *corev1.Pod, aws *pod) {
			setEnv(aws.node, checkpoint.EnvPath, "/host/var/log/aws-routed-eni/ipam.json")
		}, want: "aws-node's ipamd writes /var/log/aws-routed-eni/ipam.json"},
		{name: "checkpoint directory created if missing", edit: hostPathType("run-dir", corev1.HostPathDirectoryOrCreate), want: "volume run-dir is not a hostPath of type Directory"},
		{name: "checkpoint in an emptyDir", edit: func(p *corev1.Pod, _ *pod) {
			auditVolume(p, "run-dir").VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}, want: "volume run-dir is not a hostPath"},
		{name: "socket untyped", edit: hostPathType("containerd-sock", ""), want: "volume containerd-sock is not a hostPath of type Socket"},
		{name: "socket not mounted", edit: func(p *corev1.Pod, _ *pod) {
			c := auditC(p)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "containerd-sock" })
		}, want: "no volume is mounted at /run/containerd/containerd.sock"},
		{name: "another runtime's socket", old: "        path: /run/containerd/containerd.sock\n", new: "        path: /run/crio/crio.sock\n", want: "is the node's /run/crio/crio.sock"},
		{name: "runtime not asked", edit: func(p *corev1.Pod, _ *pod) {
			c := auditC(p)
			c.Args = append(c.Args, "--cri-endpoint=")
		}, want: `--cri-endpoint=""`},
	}
}

func TestAuditPodBrokenCopies(t *testing.T) {
	for _, bc := range auditBrokenCopies() {
		t.Run(bc.name, func(t *testing.T) {
			raw, b := inputs(t, auditPodPath)
			if bc.old != "" {
				if !strings.Contains(string(raw), bc.old) {
					t.Fatalf("%s does not contain %q: the broken copy would be the original", auditPodPath, bc.old)
				}
				raw = []byte(strings.ReplaceAll(string(raw), bc.old, bc.new))
			}
			p, err := decodeAuditPod(raw)
			if err == nil {
				aws := awsNode(t, b)
				if bc.edit != nil {
					bc.edit(p, aws)
				}
				err = checkAuditPod(p, aws)
			}
			switch {
			case err == nil:
				t.Fatalf("accepted; want an error naming %q", bc.want)
			case !strings.Contains(err.Error(), bc.want):
				t.Fatalf("rejected, but no error names %q:\n%v", bc.want, err)
			default:
				t.Logf("rejected:\n%v", err)
			}
		})
	}
}
