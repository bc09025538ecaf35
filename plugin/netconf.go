// Package plugin is the vpc-cni CNI plugin: it reads the runtime's request,
// asks ipamd for an address, has the driver make or remove the pod's kernel
// objects, and writes the cleanup state into the CNI result so that DEL can
// tear the pod down when ipamd cannot help.
package plugin

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/vpccni/vpccni/internal/naming"
)

// Defaults of the netconf (REFERENCE.md §1.3).
const (
	DefaultMTU          = 9001
	MinMTU              = 576
	MaxMTU              = 9001
	DefaultIpamdAddress = "unix:///var/run/aws-node/ipamd.sock"
	DefaultIpamdTimeout = 5 * time.Second
	ModeStrict          = "strict"
	ModeStandard        = "standard"
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

	// Parsed values.
	mtu     int
	timeout time.Duration
}

// LoadNetConf parses and validates stdin. A JSON error is a decoding
// failure (CNI code 6); a bad value is an invalid network config (code 7).
// The prevResult, if any, is parsed here too (conf.PrevResult).
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
	}
	return conf, nil
}

func (c *NetConf) validate() error {
	if c.CNIVersion == "" {
		return fmt.Errorf("cniVersion is missing")
	}
	if c.VethPrefix == "" {
		c.VethPrefix = naming.DefaultVethPrefix
	}
	if err := naming.ValidatePrefix(c.VethPrefix); err != nil {
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
	if _, err := parseLevel(c.PluginLogLevel); err != nil {
		return err
	}
	if c.IpamdAddress == "" {
		c.IpamdAddress = DefaultIpamdAddress
	}
	if err := validateIpamdAddress(c.IpamdAddress); err != nil {
		return err
	}
	c.timeout = DefaultIpamdTimeout
	if c.IpamdTimeout != "" {
		d, err := time.ParseDuration(c.IpamdTimeout)
		if err != nil || d <= 0 || d > 5*time.Minute {
			return fmt.Errorf("ipamdTimeout %q is not a duration between 0 and 5m (e.g. \"5s\")", c.IpamdTimeout)
		}
		c.timeout = d
	}
	return nil
}

// validateIpamdAddress accepts unix:///absolute/path, or a TCP address on
// loopback (the reference before v1.23 listened on 127.0.0.1:50051). Any
// other address would send pod requests off the node.
func validateIpamdAddress(a string) error {
	if path, ok := strings.CutPrefix(a, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("ipamdAddress %q: a unix socket path must be absolute (unix:///run/x.sock)", a)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("ipamdAddress %q is neither unix:///path nor a loopback host:port", a)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("ipamdAddress %q: bad port", a)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("ipamdAddress %q: a TCP address must be on loopback", a)
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
	for _, v := range []string{string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)} {
		if len(v) > 253 || strings.ContainsAny(v, "\x00\n") {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "failed to parse CNI_ARGS",
				fmt.Sprintf("pod namespace or name %q is not a Kubernetes name", v))
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
