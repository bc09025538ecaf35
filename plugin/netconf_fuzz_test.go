package plugin

import (
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vpccni/vpccni/ownership"
)

// The netconf, CNI_ARGS and prevResult come from files and processes the
// plugin does not control (docs/architecture.md#untrusted-input). These targets
// check what the plugin promises about them, not only that it does not
// panic. Seeds: the f.Add calls below and testdata/fuzz/<FuzzName>/.

// fzCniErrorCode asserts that err is a *types.Error with a non-zero code
// and a message (what a runtime shows the user) and returns the code.
func fzCniErrorCode(t *testing.T, what string, err error) uint {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v (%T) is not a CNI *types.Error", what, err, err)
	}
	if ce.Code == 0 || ce.Msg == "" {
		t.Fatalf("%s: CNI error without a code or message: %+v", what, ce)
	}
	return ce.Code
}

// FuzzLoadNetConf: LoadNetConf is what every verb runs on stdin. A
// rejected config is a CNI error with the code the spec gives a bad
// config (decoding failure 6, invalid config 7); an accepted one has every
// value the plugin later relies on within its bounds, and reading back
// its own encoding gives the same values (the defaults are not re-applied
// differently, nothing drifts).
func FuzzLoadNetConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni"}`,
		`{"cniVersion":"0.4.0","name":"aws-cni","type":"vpc-cni","vethPrefix":"eni","mtu":"9001","podSGEnforcingMode":"strict",` +
			`"pluginLogFile":"/var/log/aws-routed-eni/plugin.log","pluginLogLevel":"DEBUG"}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","vethPrefix":"abcd","mtu":" 1500 ","podSGEnforcingMode":"standard",` +
			`"ipamdAddress":"127.0.0.1:50051","ipamdTimeout":"200ms"}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","ipamdAddress":"[::1]:50051"}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","ipamdAddress":"unix:///run/ipamd.sock","ipamdTimeout":"5m"}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}]}}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","resultFormat":"spec"}`,
		`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","resultFormat":"reference"}`,
		// Rejected ones, one per rule.
		`{"name":"aws-cni","type":"vpc-cni"}`,
		`{"cniVersion":"1.0.0","vethPrefix":"toolong"}`,
		`{"cniVersion":"1.0.0","vethPrefix":"a/b"}`,
		`{"cniVersion":"1.0.0","mtu":"575"}`,
		`{"cniVersion":"1.0.0","mtu":"9002"}`,
		`{"cniVersion":"1.0.0","mtu":"0x1000"}`,
		`{"cniVersion":"1.0.0","podSGEnforcingMode":"lax"}`,
		`{"cniVersion":"1.0.0","resultFormat":"Spec"}`,
		`{"cniVersion":"1.0.0","pluginLogLevel":"loud"}`,
		`{"cniVersion":"1.0.0","ipamdAddress":"10.0.0.1:50051"}`,
		`{"cniVersion":"1.0.0","ipamdAddress":"unix://relative.sock"}`,
		`{"cniVersion":"1.0.0","ipamdAddress":"localhost:50051"}`,
		`{"cniVersion":"1.0.0","ipamdAddress":"unix:///run/../etc/x.sock"}`,
		`{"cniVersion":"1.0.0","ipamdTimeout":"-1s"}`,
		`{"cniVersion":"1.0.0","ipamdTimeout":"6m"}`,
		`{"cniVersion":"1.0.0","mtu":1500}`,
		`{"cniVersion":"1.0.0","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"nonsense"}]}}`,
		`{"cniVersion":"1.0.0",`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := LoadNetConf(stdin)
		if err != nil {
			if conf != nil {
				t.Fatalf("LoadNetConf returned both a config and %v", err)
			}
			if code := fzCniErrorCode(t, "rejected netconf", err); code != types.ErrDecodingFailure && code != types.ErrInvalidNetworkConfig {
				t.Fatalf("rejected netconf: code %d, want %d or %d: %v", code, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig, err)
			}
			return
		}
		fzCheckNetConf(t, conf)

		// Round trip: the accepted values, written back as a conflist
		// would hold them, read back to the same values (the defaults and
		// normalisations are fixed points). json.Marshal(conf) would not
		// do: types.PluginConf's MarshalJSON is promoted and drops the
		// plugin's own fields.
		b, err := json.Marshal(map[string]string{
			"cniVersion": conf.CNIVersion, "name": conf.Name, "type": conf.Type,
			"vethPrefix": conf.VethPrefix, "mtu": strconv.Itoa(conf.MTUValue()),
			"podSGEnforcingMode": conf.PodSGEnforcingMode, "pluginLogLevel": conf.PluginLogLevel,
			"ipamdAddress": conf.IpamdAddress, "ipamdTimeout": conf.Timeout().String(), "resultFormat": conf.ResultFormat,
		})
		if err != nil {
			t.Fatalf("encoding an accepted config: %v", err)
		}
		again, err := LoadNetConf(b)
		if err != nil {
			t.Fatalf("re-reading an accepted config %s: %v", b, err)
		}
		if again.Name != conf.Name || again.CNIVersion != conf.CNIVersion || again.VethPrefix != conf.VethPrefix ||
			again.IpamdAddress != conf.IpamdAddress || again.MTUValue() != conf.MTUValue() ||
			again.Timeout() != conf.Timeout() || again.PodSGEnforcingMode != conf.PodSGEnforcingMode ||
			again.ResultFormat != conf.ResultFormat {
			t.Fatalf("round trip changed the config:\nfirst  %+v\nsecond %+v", conf, again)
		}
	})
}

// fzCheckNetConf states what an accepted config guarantees, independently
// of how validate() gets there.
func fzCheckNetConf(t *testing.T, c *NetConf) {
	t.Helper()
	if c.CNIVersion == "" {
		t.Fatalf("accepted a config without cniVersion")
	}
	// The host veth is <prefix><11 hex digits>: a prefix outside naming's
	// rules makes a name Linux refuses (or one that is not ours).
	if err := ownership.ValidatePrefix(c.VethPrefix); err != nil {
		t.Fatalf("accepted vethPrefix %q: %v", c.VethPrefix, err)
	}
	if n := len(ownership.HostVeth(c.VethPrefix, "default", "web-1")); n > 15 {
		t.Fatalf("vethPrefix %q makes a %d-byte link name", c.VethPrefix, n)
	}
	if m := c.MTUValue(); m < MinMTU || m > MaxMTU {
		t.Fatalf("accepted mtu %d (from %q)", m, c.MTU)
	}
	if c.MTU == "" && c.MTUValue() != DefaultMTU {
		t.Fatalf("no mtu but MTUValue %d", c.MTUValue())
	}
	if c.MTU != "" {
		if m, err := strconv.Atoi(strings.TrimSpace(c.MTU)); err != nil || m != c.MTUValue() {
			t.Fatalf("mtu %q became %d", c.MTU, c.MTUValue())
		}
	}
	if d := c.Timeout(); d <= 0 || d > 5*time.Minute {
		t.Fatalf("accepted ipamdTimeout %v (from %q)", d, c.IpamdTimeout)
	}
	if c.PodSGEnforcingMode != ModeStrict && c.PodSGEnforcingMode != ModeStandard {
		t.Fatalf("accepted podSGEnforcingMode %q", c.PodSGEnforcingMode)
	}
	if c.ResultFormat != ResultFormatReference && c.ResultFormat != ResultFormatSpec {
		t.Fatalf("accepted resultFormat %q", c.ResultFormat)
	}
	if (c.NetConf.PrevResult == nil) != (c.PrevResult == nil) || (c.PrevResult != nil && c.PrevResult.format != c.ResultFormat) {
		t.Fatalf("the prevResult is not tagged with the netconf's resultFormat %q: %+v", c.ResultFormat, c.PrevResult)
	}
	fzCheckLocalIpamd(t, c.IpamdAddress)
}

// fzCheckLocalIpamd: pod requests must never leave the node, and the
// address dialled must be the one checked: a unix socket at a clean
// absolute path, or a loopback IP literal (a name is resolved at dial
// time) with a port.
func fzCheckLocalIpamd(t *testing.T, a string) {
	t.Helper()
	if path, ok := strings.CutPrefix(a, "unix://"); ok {
		if !strings.HasPrefix(path, "/") || filepath.Clean(path) != path {
			t.Fatalf("accepted ipamdAddress %q: not a clean absolute socket path", a)
		}
		return
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		t.Fatalf("accepted ipamdAddress %q: neither unix:// nor host:port", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		t.Fatalf("accepted ipamdAddress %q: port %q", a, port)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("accepted ipamdAddress %q: %q is not a loopback IP", a, host)
	}
}

// FuzzLoadK8sArgs: CNI_ARGS name the pod. The names become the host veth's
// hash, ipamd's allocation metadata and the branch-ENI lookup in the
// Kubernetes API, so an accepted namespace must be a DNS-1123 label and an
// accepted pod name a DNS-1123 subdomain, as the API server enforces; a
// rejection is a CNI error with code 4 (invalid environment variables).
// An absent (empty) name is LoadK8sArgs's to accept: the verb judges it
// (CHECK and a runtime's second DEL may lack them, and a caller that is
// not Kubernetes passes none).
func FuzzLoadK8sArgs(f *testing.F) {
	for _, s := range []string{
		testArgs,
		"K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-57ff979f67-qqbdh",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web.v1-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u;Other=x",
		"IgnoreUnknown=true;K8S_POD_NAME=web-0;K8S_POD_NAMESPACE=default",
		"",
		"K8S_POD_NAME=web-0",
		// Rejected.
		"K8S_POD_NAMESPACE=default;Unknown=1",
		"K8S_POD_NAMESPACE",
		"K8S_POD_NAMESPACE=a=b",
		"IgnoreUnknown=maybe",
		"CommonArgs=1",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\n0",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + strings.Repeat("a", 254),
		"K8S_POD_NAMESPACE=" + strings.Repeat("a", 64) + ";K8S_POD_NAME=web-0",
		";",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := LoadK8sArgs(s)
		if err != nil {
			if a != nil {
				t.Fatalf("LoadK8sArgs returned both args and %v", err)
			}
			if code := fzCniErrorCode(t, "rejected CNI_ARGS", err); code != types.ErrInvalidEnvironmentVariables {
				t.Fatalf("rejected CNI_ARGS: code %d, want %d: %v", code, types.ErrInvalidEnvironmentVariables, err)
			}
			return
		}
		ns, name := string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)
		if msgs := validation.IsDNS1123Label(ns); ns != "" && len(msgs) > 0 {
			t.Fatalf("accepted CNI_ARGS %q with namespace %q: %s", s, ns, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsDNS1123Subdomain(name); name != "" && len(msgs) > 0 {
			t.Fatalf("accepted CNI_ARGS %q with pod name %q: %s", s, name, strings.Join(msgs, "; "))
		}
	})
}
