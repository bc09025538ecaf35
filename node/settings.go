// Package node is what the aws-node DaemonSet's two containers do on a
// node besides running ipamd: the init container installs the CNI plugins
// and sets the node's sysctls; the main container's entrypoint checks the
// environment, installs vpc-cni, starts ipamd, and once ipamd answers
// writes the conflist that tells the container runtime to use vpc-cni.
//
// Everything is read from the reference's environment variables, with the
// reference's names, defaults and ranges (internal/awsenv), so the
// reference's manifest drives vpccni's image unchanged.
package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vpccni/vpccni/internal/awsenv"
	"github.com/vpccni/vpccni/ownership"
	"github.com/vpccni/vpccni/plugin"
)

// The environment variables read here.
const (
	EnvHostBinDir     = "HOST_CNI_BIN_PATH"
	EnvHostConfDir    = "HOST_CNI_CONFDIR_PATH"
	EnvVethPrefix     = "AWS_VPC_K8S_CNI_VETHPREFIX"
	EnvENIMTU         = "AWS_VPC_ENI_MTU"
	EnvPodMTU         = "POD_MTU"
	EnvIPv6           = "ENABLE_IPv6"
	EnvPodENI         = "ENABLE_POD_ENI"
	EnvSGMode         = "POD_SECURITY_GROUP_ENFORCING_MODE"
	EnvPluginLogFile  = "AWS_VPC_K8S_PLUGIN_LOG_FILE"
	EnvPluginLogLevel = "AWS_VPC_K8S_PLUGIN_LOG_LEVEL"
	EnvBandwidth      = "ENABLE_BANDWIDTH_PLUGIN"
	EnvNoPodV6        = "DISABLE_POD_V6"
	EnvNoEarlyDemux   = "DISABLE_TCP_EARLY_DEMUX"
	// EnvJournalFile is vpccni's own: the plugin's invocation journal
	// (journalFile), a node path; unset, none.
	EnvJournalFile = "VPCCNI_PLUGIN_JOURNAL_FILE"
)

// Settings are what the main container's entrypoint writes into the
// conflist, read from its environment.
type Settings struct {
	// HostConfDir is the node's CNI configuration directory as mounted in
	// the container; HostBinDir its CNI binary directory.
	HostConfDir, HostBinDir string
	VethPrefix              string
	// PodMTU is the MTU of the pods' veths: POD_MTU, or AWS_VPC_ENI_MTU
	// when that is unset, as the reference derives it.
	PodMTU int
	IPv6   bool
	// SGMode is the security-groups-for-pods enforcing mode, strict or
	// standard.
	SGMode string
	// PluginLogFile is an absolute path, or "" for the runtime's stderr
	// ("stderr" in the environment).
	PluginLogFile, PluginLogLevel string
	// Bandwidth chains the bandwidth plugin (pod annotations
	// kubernetes.io/ingress-bandwidth and egress-bandwidth).
	Bandwidth bool
	// NoPodV6 chains the tuning plugin with IPv6 turned off in the pod.
	NoPodV6 bool
	// IpamdAddress is ipamd's socket for the plugin, "" for the default.
	IpamdAddress string
	// JournalFile is where the plugin journals every invocation, for
	// replay; "" for no journal.
	JournalFile string
}

// SettingsFromEnv reads and checks the main container's settings. Each
// problem is one line of the error, naming the variable and its value: a
// manifest with two mistakes is fixed in one round.
func SettingsFromEnv(getenv awsenv.Getenv) (Settings, error) {
	var errs []error
	s := Settings{
		HostConfDir:    awsenv.Str(getenv, EnvHostConfDir),
		HostBinDir:     awsenv.Str(getenv, EnvHostBinDir),
		VethPrefix:     awsenv.Str(getenv, EnvVethPrefix),
		SGMode:         awsenv.Str(getenv, EnvSGMode),
		PluginLogFile:  awsenv.Str(getenv, EnvPluginLogFile),
		PluginLogLevel: awsenv.Str(getenv, EnvPluginLogLevel),
	}
	boolean := func(name string) bool {
		b, err := awsenv.Bool(getenv, name)
		errs = append(errs, err)
		return b
	}
	s.IPv6 = boolean(EnvIPv6)
	podENI := boolean(EnvPodENI)
	s.Bandwidth = boolean(EnvBandwidth)
	s.NoPodV6 = boolean(EnvNoPodV6)

	_, err := awsenv.MTU(getenv, EnvENIMTU, s.IPv6)
	errs = append(errs, err)
	mtuVar := EnvPodMTU
	if getenv(EnvPodMTU) == "" {
		mtuVar = EnvENIMTU // the reference's pod MTU is the ENIs' unless set
	}
	if s.PodMTU, err = awsenv.MTU(getenv, mtuVar, s.IPv6); mtuVar == EnvPodMTU {
		errs = append(errs, err)
	}

	if err := checkVethPrefix(s.VethPrefix); err != nil {
		errs = append(errs, &awsenv.Error{Name: EnvVethPrefix, Value: s.VethPrefix, Want: err.Error()})
	}
	if s.SGMode != plugin.ModeStrict && s.SGMode != plugin.ModeStandard {
		// The reference checks it only with ENABLE_POD_ENI; it is written
		// into the conflist either way, where vpc-cni would refuse it on
		// every ADD.
		want := "want strict or standard"
		if !podENI {
			want += " (it is written into the conflist even with ENABLE_POD_ENI off)"
		}
		errs = append(errs, &awsenv.Error{Name: EnvSGMode, Value: s.SGMode, Want: want})
	}
	switch {
	case strings.EqualFold(s.PluginLogFile, "stdout"):
		errs = append(errs, &awsenv.Error{Name: EnvPluginLogFile, Value: s.PluginLogFile,
			Want: "not stdout: a CNI plugin's stdout carries its result to the runtime"})
	case strings.EqualFold(s.PluginLogFile, "stderr"):
		s.PluginLogFile = "" // vpc-cni logs to the runtime's stderr without one
	case !filepath.IsAbs(s.PluginLogFile) || filepath.Clean(s.PluginLogFile) != s.PluginLogFile:
		errs = append(errs, &awsenv.Error{Name: EnvPluginLogFile, Value: s.PluginLogFile,
			Want: "want a clean absolute path or stderr: the plugin runs in the runtime's working directory"})
	}
	if _, ok := pluginLevels[strings.ToLower(s.PluginLogLevel)]; !ok {
		errs = append(errs, &awsenv.Error{Name: EnvPluginLogLevel, Value: s.PluginLogLevel,
			Want: "want debug, info, warn or error, in any case"})
	}
	s.JournalFile = getenv(EnvJournalFile)
	if s.JournalFile != "" && (!filepath.IsAbs(s.JournalFile) || filepath.Clean(s.JournalFile) != s.JournalFile) {
		errs = append(errs, &awsenv.Error{Name: EnvJournalFile, Value: s.JournalFile,
			Want: "want a clean absolute path on the node, or unset for no journal"})
	}
	for _, d := range []struct{ name, dir string }{{EnvHostConfDir, s.HostConfDir}, {EnvHostBinDir, s.HostBinDir}} {
		if !filepath.IsAbs(d.dir) {
			errs = append(errs, &awsenv.Error{Name: d.name, Value: d.dir, Want: "want an absolute path"})
		}
	}
	return s, errors.Join(errs...)
}

// pluginLevels are the levels vpc-cni's pluginLogLevel takes (lowercased).
var pluginLevels = map[string]bool{"debug": true, "trace": true, "info": true, "warn": true, "warning": true, "error": true}

// reservedPrefixes are link names of the node's own (ENIs, loopback,
// branch VLANs) that a pod's host veth must never look like: recovery and
// the reconciler recognise pods by their veths' prefix.
var reservedPrefixes = []string{"eth", "lo", "vlan"}

func checkVethPrefix(p string) error {
	if err := ownership.ValidatePrefix(p); err != nil {
		return err
	}
	for _, r := range reservedPrefixes {
		if p == r {
			return fmt.Errorf("want a prefix other than eth, lo and vlan (the node's own links)")
		}
	}
	return nil
}
