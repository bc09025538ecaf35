package refcni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// The environment `make` exports (tools/install.sh builds both there).
const (
	// EnvBinary names the reference plugin's binary (aws-cni).
	EnvBinary = "VPCCNI_REFCNI"
	// EnvSource names the writable copy of the reference's module it was
	// built from.
	EnvSource = "VPCCNI_REFCNI_SRC"
)

var errUnset = errors.New("is not set: run the suite through make (make tools builds the reference plugin " +
	"from the Go module proxy into ~/.cache/vpccni-tools)")

// Binary is the reference plugin's path: $VPCCNI_REFCNI, which must exist.
func Binary() (string, error) { return fromEnv(EnvBinary, false) }

// Source is the reference module's writable copy: $VPCCNI_REFCNI_SRC.
func Source() (string, error) { return fromEnv(EnvSource, true) }

func fromEnv(name string, dir bool) (string, error) {
	p := os.Getenv(name)
	if p == "" {
		return "", fmt.Errorf("refcni: $%s %w", name, errUnset)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("refcni: $%s: %w (make tools builds it)", name, err)
	}
	if fi.IsDir() != dir {
		return "", fmt.Errorf("refcni: $%s=%s is not a %s", name, p, map[bool]string{true: "directory", false: "file"}[dir])
	}
	return p, nil
}

// Allocation is one pod's address for the checkpoint generator: the ENI
// (its ID and device number) the reference's datastore puts it on, and
// the pod's key and names.
type Allocation struct {
	ENI          string `json:"eni"`
	DeviceNumber int    `json:"deviceNumber"`
	IP           string `json:"ip"`
	NetworkName  string `json:"networkName"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
}

// BuildCheckpointGen builds the checkpoint generator (testdata/ckptgen,
// laid over the reference module's copy with -overlay, so neither tree
// changes) into dir and returns its path. The reference's datastore code
// writes the file, not a copy of its format.
func BuildCheckpointGen(dir string) (string, error) {
	src, err := Source()
	if err != nil {
		return "", err
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("refcni: cannot find testdata/ckptgen")
	}
	gen := filepath.Join(filepath.Dir(self), "testdata", "ckptgen", "main.go")
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(src, "vpccni_ckptgen", "main.go"): gen}})
	if err != nil {
		return "", err
	}
	ovFile := filepath.Join(dir, "ckptgen-overlay.json")
	if err := os.WriteFile(ovFile, overlay, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "ckptgen")
	cmd := exec.Command("go", "build", "-overlay", ovFile, "-o", out, "./vpccni_ckptgen")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("refcni: build the checkpoint generator in %s: %w\n%s", src, err, b)
	}
	return out, nil
}

// WriteCheckpoint runs the generator in the jail: path gets the
// checkpoint the reference's datastore writes for allocs, assigned in
// order. The jail, because the reference's packages log at init to
// /host/var/log/aws-routed-eni/ipamd.log whatever the generator asks.
func WriteCheckpoint(j *Jail, gen, path string, allocs []Allocation) error {
	in, err := json.Marshal(allocs)
	if err != nil {
		return err
	}
	var out []byte
	err = j.Run(func() error {
		cmd := exec.Command(gen, path)
		cmd.Stdin = bytes.NewReader(in)
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("refcni: ckptgen: %w\n%s", err, out)
	}
	return nil
}
