package node

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/vpccni/vpccni/internal/awsenv"
	"github.com/vpccni/vpccni/kernel"
)

// Sysctl is one value the init container sets in the node's namespace.
type Sysctl struct {
	Key, Value string
	// IfPresent: an older kernel may not have the key; it is then left
	// out, as the reference does with tcp_early_demux.
	IfPresent bool
}

// InitSettings are what the init container reads from its environment.
type InitSettings struct {
	HostBinDir string
	// NoEarlyDemux turns tcp_early_demux off: with it on, a reply from a
	// pod of a branch ENI can take the node's cached route and leave by
	// the wrong interface.
	NoEarlyDemux bool
	IPv6         bool
}

// InitSettingsFromEnv reads the init container's environment.
func InitSettingsFromEnv(getenv awsenv.Getenv) (InitSettings, error) {
	s := InitSettings{HostBinDir: awsenv.Str(getenv, EnvHostBinDir)}
	var err1, err2 error
	s.NoEarlyDemux, err1 = awsenv.Bool(getenv, EnvNoEarlyDemux)
	s.IPv6, err2 = awsenv.Bool(getenv, EnvIPv6)
	return s, errors.Join(err1, err2)
}

// Sysctls are the values the node needs, the reference's: loose reverse
// path filtering on the primary interface (a pod's reply arrives on one
// ENI and its request may have left by another), tcp_early_demux as
// asked, and for IPv6 forwarding on and router advertisements accepted on
// the primary interface although it forwards.
func Sysctls(s InitSettings, primary string) []Sysctl {
	demux := "1"
	if s.NoEarlyDemux {
		demux = "0"
	}
	out := []Sysctl{
		{Key: "net/ipv4/conf/" + primary + "/rp_filter", Value: "2"},
		{Key: "net/ipv4/tcp_early_demux", Value: demux, IfPresent: true},
	}
	if s.IPv6 {
		out = append(out,
			Sysctl{Key: "net/ipv6/conf/all/disable_ipv6", Value: "0"},
			Sysctl{Key: "net/ipv6/conf/all/forwarding", Value: "1"},
			Sysctl{Key: "net/ipv6/conf/" + primary + "/accept_ra", Value: "2"})
	}
	return out
}

// ApplySysctls sets each value in k's namespace, logging each change, and
// stops at the first failure, naming the key.
func ApplySysctls(k kernel.API, log *slog.Logger, sysctls []Sysctl) error {
	for _, s := range sysctls {
		was, err := k.SysctlGet(s.Key)
		if err != nil {
			if s.IfPresent && kernel.IsNotFound(err) {
				log.Info("sysctl not on this kernel; left out", "key", s.Key)
				continue
			}
			return fmt.Errorf("read %s: %w", s.Key, err)
		}
		if strings.TrimSpace(was) == s.Value {
			log.Info("sysctl already set", "key", s.Key, "value", s.Value)
			continue
		}
		if err := k.SysctlSet(s.Key, s.Value); err != nil {
			return fmt.Errorf("set %s to %s: %w", s.Key, s.Value, err)
		}
		log.Info("sysctl set", "key", s.Key, "value", s.Value, "was", strings.TrimSpace(was))
	}
	return nil
}

// PrimaryInterface is the link of the namespace's default route (IPv4,
// else IPv6): on an instance, the primary ENI. The reference finds it by
// the MAC address the instance metadata gives; the default route needs
// no metadata service and names the same link on an EC2 node.
func PrimaryInterface(k kernel.API) (string, error) {
	for _, fam := range []kernel.Family{kernel.FamilyV4, kernel.FamilyV6} {
		routes, err := k.RouteList(fam, kernel.TableMain)
		if err != nil {
			return "", err
		}
		for _, r := range routes {
			if r.LinkIndex == 0 || (r.Dst != nil && !isDefault(r.Dst.Mask)) {
				continue
			}
			l, err := k.LinkByIndex(r.LinkIndex)
			if err != nil {
				return "", err
			}
			return l.Name, nil
		}
	}
	return "", errors.New("no default route in the main table: name the primary interface with --primary-interface")
}

func isDefault(mask []byte) bool {
	for _, b := range mask {
		if b != 0 {
			return false
		}
	}
	return true
}
