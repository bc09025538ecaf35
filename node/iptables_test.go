package node

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// fakeSaves answers save commands from a table: "ip legacy" → output;
// a missing key is a command that is not there.
func fakeSaves(outs map[string]string) Saver {
	return func(_ context.Context, family, mode string) (string, error) {
		out, ok := outs[family+" "+mode]
		if !ok {
			return "", exec.ErrNotFound
		}
		return out, nil
	}
}

func rules(n int, chain string) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	for i := 0; i < n; i++ {
		b.WriteString("-A " + chain + " -j ACCEPT\n")
	}
	return b.String() + "COMMIT\n"
}

func TestPickIptablesMode(t *testing.T) {
	hint := "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	for _, tc := range []struct {
		name string
		outs map[string]string
		want string
	}{
		{"empty node: nft", map[string]string{"ip legacy": "", "ip nft": "", "ip6 legacy": "", "ip6 nft": ""}, ModeNFT},
		{"legacy holds kube-proxy's rules", map[string]string{"ip legacy": rules(12, "KUBE-SERVICES"), "ip nft": rules(1, "INPUT"), "ip6 legacy": rules(2, "X")}, ModeLegacy},
		{"IPv6 rules count too", map[string]string{"ip legacy": rules(1, "X"), "ip nft": rules(2, "X"), "ip6 legacy": rules(3, "Y"), "ip6 nft": ""}, ModeLegacy},
		{"a tie is nft", map[string]string{"ip legacy": rules(3, "X"), "ip nft": rules(3, "X")}, ModeNFT},
		{"kubelet's hint in legacy wins over rule counts", map[string]string{"ip legacy": hint, "ip nft": rules(40, "X")}, ModeLegacy},
		{"kubelet's hint in nft", map[string]string{"ip legacy": rules(40, "X") + hint, "ip nft": hint}, ModeNFT},
		{"no legacy binaries", map[string]string{"ip nft": ""}, ModeNFT},
		{"no nft binaries", map[string]string{"ip legacy": ""}, ModeLegacy},
		{"no nft binaries, legacy rules", map[string]string{"ip legacy": rules(1, "X")}, ModeLegacy},
	} {
		c, err := PickIptablesMode(context.Background(), fakeSaves(tc.outs))
		if err != nil || c.Mode != tc.want {
			t.Errorf("%s: %+v %v, want %s", tc.name, c, err, tc.want)
		}
	}
	_, err := PickIptablesMode(context.Background(), fakeSaves(nil))
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "iptables-legacy-save") || !strings.Contains(err.Error(), "iptables-nft-save") {
		t.Errorf("with neither mode's commands: %v", err)
	}
}
