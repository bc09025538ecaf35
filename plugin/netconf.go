// Package plugin is the vpc-cni CNI plugin: it reads the runtime's request,
// asks ipamd for an address, has the driver make or remove the pod's kernel
// objects, and writes the cleanup state into the CNI result so that DEL can
// tear the pod down when ipamd cannot help.
package plugin

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/vpccni/vpccni/ownership"
)

// Defaults of the netconf (docs/reference-facts.md#netconf-defaults).
const (
	DefaultMTU          = 9001
	MinMTU              = 576
	MaxMTU              = 9001
	DefaultIpamdAddress = "unix:///var/run/aws-node/ipamd.sock"
	DefaultIpamdTimeout = 5 * time.Second
	// DefaultStateDir follows the CNI cache directory's conventions
	// (/var/lib/cni): node-local, kept across a plugin upgrade, gone with
	// the node.
	DefaultStateDir = "/var/lib/cni/vpc-cni"
	// ipamdTimeout bounds: a call shorter than a millisecond cannot reach
	// even a local ipamd; one longer than 5 minutes outlasts the runtime's
	// own patience with a DEL.
	MinIpamdTimeout = time.Millisecond
	MaxIpamdTimeout = 5 * time.Minute
	ModeStrict      = "strict"
	ModeStandard    = "standard"
)

// Result formats (resultFormat): how the ADD result carries the cleanup
// state, and so how a prevResult is read back (docs/architecture.md#result-formats).
const (
	// ResultFormatReference is the reference's layout: the route table in
	// the container interface's "mac", a dummy<hash> interface with the
	// VLAN id and device number. Interchangeable with the reference; a
	// strict libcni caller (podman) refuses it.
	ResultFormatReference = "reference"
	// ResultFormatSpec is a result every field of which means what the CNI
	// spec says: real MACs, names and sandboxes, no dummy interface.
	ResultFormatSpec = "spec"
)

// NetConf is the plugin's configuration as it appears in the conflist.
// Field names are the reference's, plus ipamdAddress and ipamdTimeout.
type NetConf struct {
	types.NetConf
	VethPrefix         string `json:"vethPrefix,omitempty"`
	MTU                string `json:"mtu,omitempty"`
	PodSGEnforcingMode string `json:"podSGEnforcingMode,omitempty"`
	PluginLogFile      string `json:"pluginLogFile,omitempty"`
	PluginLogLevel     string `json:"pluginLogLevel,omitempty"`
	IpamdAddress       string `json:"ipamdAddress,omitempty"`
	IpamdTimeout       string `json:"ipamdTimeout,omitempty"`
	// JournalFile, when set, gets one JSON line per invocation
	// (plugin/journal); read by journaled before the verb parses the rest.
	JournalFile string `json:"journalFile,omitempty"`
	// ResultFormat is ResultFormatReference (the default) or
	// ResultFormatSpec.
	ResultFormat string `json:"resultFormat,omitempty"`
	// StateDir holds the plugin's node-local state: the record of each
	// attachment (plugin/attachrec) in its attachments/ subdirectory.
	StateDir string `json:"stateDir,omitempty"`
	// PrevResult shadows types.NetConf's: the prevResult (nil without one)
	// tagged with ResultFormat, since it must be read in the format the
	// netconf says its ADD wrote (decodeCleanupState). Not a types.Result,
	// so that nothing converts it without its format by mistake; the
	// library's parse stays in NetConf.NetConf.PrevResult.
	PrevResult *formattedResult `json:"-"`

	// Parsed values.
	mtu     int
	timeout time.Duration
}

// defaultStateDir is DefaultStateDir, except in this package's tests,
// which must never write to the machine's own (TestMain).
var defaultStateDir = DefaultStateDir

// LoadNetConf parses and validates stdin. A JSON error is a decoding
// failure (CNI code 6); a bad value is an invalid network config (code 7).
// The prevResult, if any, is parsed here too (conf.PrevResult), and
// tagged with the netconf's resultFormat: it must be read in the format
// the netconf says its ADD wrote.
func LoadNetConf(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "failed to parse network configuration", err.Error())
	}
	if err := conf.validate(); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network configuration", err.Error())
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.NetConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, "failed to parse prevResult", err.Error())
		}
		conf.PrevResult = &formattedResult{result: conf.NetConf.PrevResult, format: conf.ResultFormat}
	}
	return conf, nil
}

func (c *NetConf) validate() error {
	if c.CNIVersion == "" {
		return fmt.Errorf("cniVersion is missing")
	}
	if c.VethPrefix == "" {
		c.VethPrefix = ownership.DefaultVethPrefix
	}
	if err := ownership.ValidatePrefix(c.VethPrefix); err != nil {
		return err
	}
	c.mtu = DefaultMTU
	if c.MTU != "" {
		m, err := strconv.Atoi(strings.TrimSpace(c.MTU))
		if err != nil || m < MinMTU || m > MaxMTU {
			return fmt.Errorf("mtu %q is not an integer between %d and %d", c.MTU, MinMTU, MaxMTU)
		}
		c.mtu = m
	}
	switch c.PodSGEnforcingMode {
	case "":
		c.PodSGEnforcingMode = ModeStrict
	case ModeStrict, ModeStandard:
	default:
		return fmt.Errorf("podSGEnforcingMode %q is neither %q nor %q", c.PodSGEnforcingMode, ModeStrict, ModeStandard)
	}
	switch c.ResultFormat {
	case "":
		c.ResultFormat = ResultFormatReference
	case ResultFormatReference, ResultFormatSpec:
	default:
		return fmt.Errorf("resultFormat %q is neither %q (the default) nor %q", c.ResultFormat, ResultFormatReference, ResultFormatSpec)
	}
	if _, err := parseLevel(c.PluginLogLevel); err != nil {
		return err
	}
	if c.IpamdAddress == "" {
		c.IpamdAddress = DefaultIpamdAddress
	}
	if err := validateIpamdAddress(c.IpamdAddress); err != nil {
		return err
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir
	}
	// A relative path would depend on the runtime's working directory: the
	// DEL would not find what its ADD wrote.
	if !filepath.IsAbs(c.StateDir) || filepath.Clean(c.StateDir) != c.StateDir || c.StateDir == "/" ||
		strings.ContainsFunc(c.StateDir, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("stateDir %q is not a clean absolute directory path (no \"..\", \"//\" or trailing \"/\"), as in %s", c.StateDir, DefaultStateDir)
	}
	c.timeout = DefaultIpamdTimeout
	if c.IpamdTimeout != "" {
		d, err := time.ParseDuration(c.IpamdTimeout)
		if err != nil || d < MinIpamdTimeout || d > MaxIpamdTimeout {
			return fmt.Errorf("ipamdTimeout %q is not a duration between %s and %s (e.g. \"5s\")", c.IpamdTimeout, MinIpamdTimeout, MaxIpamdTimeout)
		}
		c.timeout = d
	}
	return nil
}

// maxUnixPath is the longest socket path Linux accepts: sun_path is 108
// bytes with the terminating NUL.
const maxUnixPath = 107

// validateIpamdAddress accepts exactly two forms, which the plugin dials
// as written (dialAddress) and which grpc-go would dial the same:
//
//   - unix:///clean/absolute/path, ipamd's socket since the reference's
//     v1.23 (a relative path would depend on the runtime's working
//     directory, and grpc reads unix://x/y as host x);
//   - IP:port with a loopback IP literal, e.g. 127.0.0.1:50051 or
//     [::1]:50051, the reference's TCP address before v1.23.
//
// Everything else is refused: an address off the node would send the
// pod's identity to another host and take its answer as an allocation; a
// host name (even "localhost") is resolved at dial time, so the address
// dialled would not be the one checked here; other grpc schemes (dns:,
// passthrough:, unix-abstract:, unix:path) are not needed and each has
// its own parsing rules to get wrong.
func validateIpamdAddress(a string) error {
	for _, r := range a {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("ipamdAddress %q contains a space or control character", a)
		}
	}
	if path, ok := strings.CutPrefix(a, "unix://"); ok {
		switch {
		case !strings.HasPrefix(path, "/"):
			return fmt.Errorf("ipamdAddress %q: the socket path must be absolute, as in unix:///var/run/aws-node/ipamd.sock", a)
		case strings.ContainsAny(path, "?#"):
			return fmt.Errorf("ipamdAddress %q: a socket path takes no query or fragment", a)
		case filepath.Clean(path) != path || path == "/":
			return fmt.Errorf("ipamdAddress %q: the socket path must be a clean absolute file path (no \"..\", \"//\" or trailing \"/\")", a)
		case len(path) > maxUnixPath:
			return fmt.Errorf("ipamdAddress %q: the socket path is longer than the %d bytes Linux allows", a, maxUnixPath)
		}
		return nil
	}
	if strings.Contains(a, "://") || strings.HasPrefix(a, "unix:") || strings.HasPrefix(a, "unix-abstract:") {
		return fmt.Errorf("ipamdAddress %q: only unix:///absolute/path or a loopback IP:port without a scheme (e.g. 127.0.0.1:50051) is accepted", a)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("ipamdAddress %q is neither unix:///absolute/path nor a loopback IP:port (e.g. 127.0.0.1:50051)", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("ipamdAddress %q: port %q is not a number between 1 and 65535", a, port)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("ipamdAddress %q: the host must be a loopback IP literal (127.0.0.1 or ::1), not a name that is resolved at dial time", a)
	}
	if !ip.IsLoopback() {
		return fmt.Errorf("ipamdAddress %q: %s is not a loopback address; ipamd must be on this node (127.0.0.1 or ::1)", a, host)
	}
	return nil
}

// MTUValue is the validated MTU.
func (c *NetConf) MTUValue() int { return c.mtu }

// Timeout is the deadline of every call to ipamd.
func (c *NetConf) Timeout() time.Duration { return c.timeout }

// K8sArgs are the CNI_ARGS a Kubernetes runtime passes.
type K8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS keys are upper case
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
	K8S_POD_UID                types.UnmarshallableString
}

// LoadK8sArgs parses CNI_ARGS (invalid environment: CNI code 4).
func LoadK8sArgs(s string) (*K8sArgs, error) {
	a := &K8sArgs{}
	if err := types.LoadArgs(s, a); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "failed to parse CNI_ARGS", err.Error())
	}
	// The names become link names (their hash) and go to ipamd and the
	// API server: only what Kubernetes itself accepts (a namespace is a
	// DNS-1123 label, a pod name a DNS-1123 subdomain). Empty is left to
	// the verb to judge (CHECK and a runtime's second DEL may lack them).
	checks := []struct {
		what, v string
		wrong   func(string) string
	}{
		{"K8S_POD_NAMESPACE", string(a.K8S_POD_NAMESPACE), dns1123Label},
		{"K8S_POD_NAME", string(a.K8S_POD_NAME), dns1123Subdomain},
	}
	for _, c := range checks {
		if c.v == "" {
			continue
		}
		if why := c.wrong(c.v); why != "" {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "failed to parse CNI_ARGS",
				fmt.Sprintf("%s %q is not a Kubernetes name: %s", c.what, c.v, why))
		}
	}
	return a, nil
}

// validateIfName checks CNI_IFNAME the way Linux will.
func validateIfName(n string) error {
	if n == "" || len(n) > 15 || strings.ContainsAny(n, "/ :\t\n\x00") || n == "." || n == ".." {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_IFNAME",
			fmt.Sprintf("%q is not a valid interface name (1-15 bytes, no '/', ':' or spaces)", n))
	}
	return nil
}
