package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/internal/testsupport/ociimage"
)

// vpccni's two node images, as deploy/Dockerfile lays them out, assembled
// here without a registry or an image builder: the same /app files
// (vpccni-node, ipamd, grpc-health-probe, and the CNI plugins under
// /app/cni), built static from this tree and go.mod's versions. The
// aws-node image also carries Debian 12's iptables (legacy and nft, their
// extensions and libraries), taken from this machine's iptables package —
// the package the Dockerfile installs — since ipamd writes the node's
// SNAT rules with it. The names are the ones deploy/kubernetes runs, as
// containerd normalizes them.
const (
	awsNodeImage = "docker.io/library/vpccni:dev"
	initImage    = "docker.io/library/vpccni-init:dev"
)

// nodeImages are the two image archives of each build, made once per
// suite run: "" is vpccni's, a delete policy's name (ref-v1.11) the same
// images with the test-only legacydelete builds of vpc-cni and ipamd:
// DELs decided by that policy, and ipamd recovering only what that
// policy's ipamd did.
var nodeImages struct {
	sync.Mutex
	built map[string][2]string
}

// buildNodeImages returns the archives of the aws-node and init images of
// a build.
func buildNodeImages(deletePolicy string) (awsNode, init string) {
	nodeImages.Lock()
	defer nodeImages.Unlock()
	if a, ok := nodeImages.built[deletePolicy]; ok {
		return a[0], a[1]
	}
	dir := filepath.Join(binDir, "images", "vpccni")
	if deletePolicy != "" {
		dir = filepath.Join(binDir, "images", deletePolicy)
	}
	awsNode, init, err := writeNodeImages(dir, deletePolicy)
	Expect(err).NotTo(HaveOccurred(), "building the node images")
	if nodeImages.built == nil {
		nodeImages.built = map[string][2]string{}
	}
	nodeImages.built[deletePolicy] = [2]string{awsNode, init}
	return awsNode, init
}

// imageBinaries are the /app files built from this tree: path in /app ->
// package; cniPlugins are the containernetworking plugins the image
// carries, at go.mod's version (go install, as deploy/Dockerfile does:
// bandwidth and tuning are not in this module's build list).
var (
	imageBinaries = map[string]string{
		"vpccni-node":  "./node/cmd/vpccni-node",
		"ipamd":        "./ipamd/cmd/ipamd",
		"cni/vpc-cni":  "./plugin/cmd/vpc-cni",
		"vpccni-audit": "./audit/cmd/vpccni-audit",
	}
	cniPlugins = []string{"meta/portmap", "main/loopback", "meta/bandwidth", "meta/tuning"}
)

func writeNodeImages(dir, deletePolicy string) (string, string, error) {
	app := map[string][]byte{}
	run := func(env []string, args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), append([]string{"CGO_ENABLED=0"}, env...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	for name, pkg := range imageBinaries {
		args := []string{"build", "-trimpath", "-ldflags", "-X main.buildVersion=e2e", "-o", filepath.Join(dir, "app", name), pkg}
		if deletePolicy != "" && (name == "cni/vpc-cni" || name == "ipamd") {
			args = []string{"build", "-trimpath", "-tags", "legacydelete",
				"-ldflags", "-X main.buildVersion=e2e -X main.deletePolicy=" + deletePolicy, "-o", filepath.Join(dir, "app", name), pkg}
		}
		if err := run(nil, args...); err != nil {
			return "", "", err
		}
	}
	v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/containernetworking/plugins").Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m github.com/containernetworking/plugins: %w", err)
	}
	for _, p := range cniPlugins {
		pkg := "github.com/containernetworking/plugins/plugins/" + p + "@" + strings.TrimSpace(string(v))
		if err := run([]string{"GOBIN=" + filepath.Join(dir, "app", "cni")}, "install", "-trimpath", pkg); err != nil {
			return "", "", err
		}
	}
	err = filepath.WalkDir(filepath.Join(dir, "app"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		app[rel] = b
		return err
	})
	if err != nil {
		return "", "", err
	}
	probe := os.Getenv("GRPC_HEALTH_PROBE")
	if probe == "" {
		return "", "", fmt.Errorf("$GRPC_HEALTH_PROBE is not set: run the suite through make, after make tools, which builds grpc-health-probe")
	}
	b, err := os.ReadFile(probe)
	if err != nil {
		return "", "", fmt.Errorf("grpc-health-probe ($GRPC_HEALTH_PROBE): %w", err)
	}
	app["app/grpc-health-probe"] = b

	initArchive := filepath.Join(dir, "init.tar")
	if err := ociimage.Write(ociimage.Image{Name: initImage, Files: app,
		Entrypoint: []string{"/app/vpccni-node", "init"}}, initArchive); err != nil {
		return "", "", err
	}
	files, links, err := iptablesFiles()
	if err != nil {
		return "", "", err
	}
	for k, v := range app {
		files[k] = v
	}
	links["var/run"] = "/run"
	awsArchive := filepath.Join(dir, "aws-node.tar")
	err = ociimage.Write(ociimage.Image{Name: awsNodeImage, Files: files, Symlinks: links,
		Dirs:       []string{"run", "tmp", "proc", "sys", "dev", "etc", "host"},
		Entrypoint: []string{"/app/vpccni-node", "run", "--", "--cloud", "aws"}}, awsArchive)
	return awsArchive, initArchive, err
}

// iptablesFiles are this machine's iptables binaries (both backends),
// the command names pointing at them, their extensions and every shared
// library they load (ldd), at the paths the machine has them.
func iptablesFiles() (map[string][]byte, map[string]string, error) {
	files, links := map[string][]byte{}, map[string]string{}
	var objects []string
	for _, multi := range []string{"xtables-legacy-multi", "xtables-nft-multi"} {
		objects = append(objects, "/usr/sbin/"+multi)
		mode := strings.TrimSuffix(strings.TrimPrefix(multi, "xtables-"), "-multi")
		for _, cmd := range []string{"iptables", "ip6tables"} {
			for _, suffix := range []string{"", "-save", "-restore"} {
				links["usr/sbin/"+cmd+"-"+mode+suffix] = multi
			}
		}
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			links["usr/sbin/"+cmd+suffix] = "xtables-nft-multi" // Debian's default alternative
		}
	}
	ext, err := filepath.Glob("/usr/lib/x86_64-linux-gnu/xtables/*.so")
	if err != nil || len(ext) == 0 {
		return nil, nil, fmt.Errorf("iptables' extensions in /usr/lib/x86_64-linux-gnu/xtables: %v (apt-get install iptables)", err)
	}
	objects = append(objects, ext...)
	libs := map[string]bool{}
	for _, o := range objects {
		b, err := os.ReadFile(o)
		if err != nil {
			return nil, nil, err
		}
		files[strings.TrimPrefix(o, "/")] = b
		deps, err := sharedLibraries(o)
		if err != nil {
			return nil, nil, err
		}
		for _, d := range deps {
			libs[d] = true
		}
	}
	for l := range libs {
		b, err := os.ReadFile(l) // follows the soname's link to the library
		if err != nil {
			return nil, nil, err
		}
		files[strings.TrimPrefix(l, "/")] = b
	}
	for _, f := range []string{"/etc/protocols", "/etc/services", "/etc/ethertypes"} {
		if b, err := os.ReadFile(f); err == nil {
			files[strings.TrimPrefix(f, "/")] = b
		}
	}
	return files, links, nil
}

// sharedLibraries are the paths ldd resolves an ELF object's libraries to
// (the dynamic loader included).
func sharedLibraries(object string) ([]string, error) {
	out, err := exec.Command("ldd", object).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", object, err)
	}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths, sc.Err()
}
