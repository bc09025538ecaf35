package plugin

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestIpamdAddressOnlyUnixOrLoopback checks, through LoadNetConf (what
// every verb runs first), that ipamdAddress accepts only unix:// with a
// clean absolute path or a loopback IP:port, and that every other address
// is CNI error 7 (invalid network config) whose message names the address
// and says what would be accepted.
func TestIpamdAddressOnlyUnixOrLoopback(t *testing.T) {
	ok := []string{
		"",                                    // the default, unix:///var/run/aws-node/ipamd.sock
		"unix:///var/run/aws-node/ipamd.sock", // the reference's since v1.23
		"unix:///run/vpccni/ipamd.sock",
		"127.0.0.1:50051", // the reference's before v1.23
		"127.0.0.2:50051", // all of 127/8 is loopback
		"[::1]:50051",
		"[::ffff:127.0.0.1]:50051", // IPv4-mapped loopback
	}
	for _, a := range ok {
		conf, err := LoadNetConf(netconf(t, map[string]any{"ipamdAddress": a}))
		if err != nil {
			t.Errorf("ipamdAddress %q refused: %v", a, err)
			continue
		}
		if a == "" && conf.IpamdAddress != DefaultIpamdAddress {
			t.Errorf("default ipamdAddress %q, want %q", conf.IpamdAddress, DefaultIpamdAddress)
		}
	}
	bad := []struct{ addr, says string }{
		// Off the node.
		{"10.1.2.3:50051", "not a loopback"},
		{"0.0.0.0:50051", "not a loopback"},
		{"[::]:50051", "not a loopback"},
		{"[2600:1f14::1]:50051", "not a loopback"},
		{":50051", "loopback IP literal"},
		// Names are resolved at dial time.
		{"localhost:50051", "loopback IP literal"},
		{"ipamd.kube-system.svc:50051", "loopback IP literal"},
		// Unix paths that are not clean and absolute.
		{"unix://ipamd.sock", "must be absolute"},
		{"unix://run/ipamd.sock", "must be absolute"}, // grpc would read "run" as a host
		{"unix://", "must be absolute"},
		{"unix:///", "clean absolute"},
		{"unix:///run/../etc/ipamd.sock", "clean absolute"},
		{"unix:///run//ipamd.sock", "clean absolute"},
		{"unix:///run/ipamd.sock/", "clean absolute"},
		{"unix:///run/ipamd.sock?x=1", "no query"},
		{"unix:///" + strings.Repeat("a", 120), "longer than"},
		// Other schemes and forms grpc would take.
		{"unix:/run/ipamd.sock", "only unix:///"},
		{"unix:ipamd.sock", "only unix:///"},
		{"unix-abstract:ipamd", "only unix:///"},
		{"tcp://127.0.0.1:50051", "only unix:///"},
		{"dns:///127.0.0.1:50051", "only unix:///"},
		{"passthrough:///127.0.0.1:50051", "only unix:///"},
		{"http://127.0.0.1:50051", "only unix:///"},
		// Malformed.
		{"127.0.0.1", "neither"},
		{"127.0.0.1:0", "between 1 and 65535"},
		{"127.0.0.1:70000", "between 1 and 65535"},
		{"127.0.0.1:grpc", "between 1 and 65535"},
		{"[::1%lo]:50051", "loopback IP literal"},
		{" unix:///run/ipamd.sock", "space or control"},
		{"unix:///run/ipamd.sock\n", "space or control"},
		{"unix:///run/ipa\x00md.sock", "space or control"},
	}
	for _, c := range bad {
		_, err := LoadNetConf(netconf(t, map[string]any{"ipamdAddress": c.addr}))
		if err == nil {
			t.Errorf("ipamdAddress %q accepted", c.addr)
			continue
		}
		te, isCNI := err.(*types.Error)
		if !isCNI || te.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("ipamdAddress %q: %v, want CNI error %d", c.addr, err, types.ErrInvalidNetworkConfig)
			continue
		}
		if !strings.Contains(te.Details, c.says) || !strings.Contains(te.Details, "ipamdAddress") {
			t.Errorf("ipamdAddress %q: details %q do not say %q", c.addr, te.Details, c.says)
		}
	}
}
