package deploy

// vpccni's own build and cluster files: the Dockerfile's two targets, the
// Makefile's image and kind targets, and the kind cluster.

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The two images' entrypoints. The reference's manifest gives neither
// container a command, so each image starts its own job; aws-node's must
// say --cloud aws, since ipamd's own default is the in-memory cloud.
var (
	initEntrypoint = []string{"/app/vpccni-node", "init"}
	nodeEntrypoint = []string{"/app/vpccni-node", "run", "--", "--cloud", "aws"}
)

// caBundle is where Go's crypto/x509 finds the roots on Debian-based
// images: ipamd --cloud aws calls EC2 over HTTPS.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

func checkDockerfile(b *bundle) error {
	var errs []error
	d := b.dockerfile
	var build string
	for _, s := range d.stages {
		if s.name == "build" {
			build += strings.Join(s.instructions, "\n") + "\n"
		}
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		errs = append(errs, errors.New("the build stage must set CGO_ENABLED=0: vpc-cni and the plugins run on the node itself, whatever its libc, so the binaries must be static"))
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
					for _, need := range []string{"go.mod", ipamdPkg, pluginPkg, nodePkg, "internal", "kernel", "cloud"} {
						if err := b.ignored(path.Clean(need)); err != nil {
							errs = append(errs, err)
						}
					}
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
					errs = append(errs, fmt.Errorf("COPY %s: %s does not exist in the build context", src, src))
				}
				if err := b.ignored(src); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// What each target runs.
	for _, t := range []struct {
		name string
		want []string
	}{{"init", initEntrypoint}, {"", nodeEntrypoint}} {
		st := d.last()
		if t.name != "" {
			var err error
			if st, err = d.named(t.name); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if !slices.Equal(st.entrypoint, t.want) {
			errs = append(errs, fmt.Errorf("%s's ENTRYPOINT is %q (shell form: %v), want the exec form %q", st.label(d), st.entrypoint, st.shellEntry, t.want))
		}
	}
	last := d.last()
	if from, _, err := d.source(last, caBundle); err != nil || from == "" {
		errs = append(errs, fmt.Errorf("the aws-node image must get a CA bundle at %s from the build stage: ipamd --cloud aws calls EC2 over HTTPS (%v)", caBundle, err))
	}
	// ipamd writes the node's SNAT rules with iptables, in the mode
	// vpccni-node run picks: the aws-node image needs both modes'
	// commands, which Debian's iptables package carries.
	if !slices.ContainsFunc(last.instructions, func(ins string) bool {
		return strings.HasPrefix(ins, "RUN ") && strings.Contains(ins, "apt-get install") && slices.Contains(strings.Fields(ins), "iptables")
	}) {
		errs = append(errs, errors.New("the aws-node image must install Debian's iptables (iptables-legacy and iptables-nft): ipamd writes the node's SNAT and connmark rules with it"))
	}
	// The pinned versions agree with the rest of the repository.
	if bu, err := b.builtAt(last, "/app/grpc-health-probe", healthProbePkg); err != nil {
		errs = append(errs, err)
	} else if want, _ := makeVar(b.makefile, "GRPC_HEALTH_PROBE_VERSION"); bu.version != want {
		errs = append(errs, fmt.Errorf("the image's grpc-health-probe is %s, the Makefile's GRPC_HEALTH_PROBE_VERSION (the one the e2e suite runs) %s", bu.version, want))
	}
	if bu, err := b.builtAt(last, "/app/cni/portmap", cniPlugins["portmap"]); err != nil {
		errs = append(errs, err)
	} else if want := goModVersion(b.goMod, cniPluginsMod); bu.version != want {
		errs = append(errs, fmt.Errorf("the image's CNI plugins are %s, go.mod's %s is %s (the version the tests run)", bu.version, cniPluginsMod, want))
	}
	return errors.Join(errs...)
}

// goModVersion is the version go.mod requires of module mod.
func goModVersion(goMod, mod string) string {
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(mod) + `\s+(\S+)`).FindStringSubmatch(goMod)
	if m == nil {
		return ""
	}
	return m[1]
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

// recipe is the recipe of a Makefile target: its tab-indented lines.
func recipe(makefile, target string) string {
	var out []string
	in := false
	for _, line := range strings.Split(makefile, "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			out = append(out, line)
		case in:
			return strings.Join(out, "\n")
		}
	}
	return strings.Join(out, "\n")
}

// checkMakefile: make image builds both targets under the names make
// kind-load loads, and kind-load puts them in the manifests' places.
func checkMakefile(b *bundle) error {
	if _, err := b.imageStages(); err != nil {
		return err
	}
	var errs []error
	var initBuilt, nodeBuilt bool
	for _, line := range strings.Split(recipe(b.makefile, "image"), "\n") {
		if !strings.Contains(line, "docker build") {
			continue
		}
		target, _ := flagValue(strings.Fields(line), "target")
		tag, _ := flagValue(strings.Fields(line), "t")
		initBuilt = initBuilt || target == "init" && tag == "$(INIT_IMAGE)"
		nodeBuilt = nodeBuilt || target == "" && tag == "$(IMAGE)"
	}
	if !initBuilt || !nodeBuilt {
		errs = append(errs, fmt.Errorf("make image must build --target init as $(INIT_IMAGE) (built: %v) and the default target as $(IMAGE) (built: %v)", initBuilt, nodeBuilt))
	}
	load := recipe(b.makefile, "kind-load")
	for _, want := range []string{"image: $(MANIFEST_IMAGE)", "image: $(MANIFEST_INIT_IMAGE)", "$(IMAGE) $(INIT_IMAGE)", "daemonset/" + dsName} {
		if !strings.Contains(load, want) {
			errs = append(errs, fmt.Errorf("make kind-load's recipe has no %q: it must load both images, put them in the manifests and wait for DaemonSet %s", want, dsName))
		}
	}
	return errors.Join(errs...)
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
	// The manifests are for kind, which has no EC2 and no IMDS.
	if p, _ := b.runOf(); p != nil {
		if cloud, _ := flagValue(p.runCmd.ipamdArgs, "cloud"); cloud != "memory" {
			errs = append(errs, fmt.Errorf("aws-node runs ipamd --cloud %q: the manifests are for kind, which has no EC2, so --cloud memory (on EKS, drop the command)", cloud))
		}
	}
	return errors.Join(errs...)
}
