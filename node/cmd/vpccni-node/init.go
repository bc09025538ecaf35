package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/vpccni/vpccni/kernel/linux"
	"github.com/vpccni/vpccni/node"
)

func newInit(log *slog.Logger, getenv func(string) string) *cobra.Command {
	var cniDir, primary string
	c := &cobra.Command{
		Use:   "init",
		Short: "Install the CNI plugins and set the node's sysctls (the aws-vpc-cni-init container)",
		Long: `init installs every plugin of the image's CNI directory (vpc-cni,
portmap, loopback, bandwidth, tuning) into HOST_CNI_BIN_PATH (default
/host/opt/cni/bin), each atomically, replacing the node's copy as the
reference's init container does. Then it sets, in its network namespace
(the node's: the container runs with hostNetwork):

  net/ipv4/conf/<primary>/rp_filter = 2    loose: a pod's reply may arrive
                                           on another ENI than its request
                                           left by
  net/ipv4/tcp_early_demux = 1, or 0 with DISABLE_TCP_EARLY_DEMUX=true
                                           (left out on a kernel without it)
  with ENABLE_IPv6=true: net/ipv6/conf/all/disable_ipv6 = 0,
  net/ipv6/conf/all/forwarding = 1, net/ipv6/conf/<primary>/accept_ra = 2

The primary interface is the link of the default route (the reference asks
the instance metadata service for its MAC address), or --primary-interface.
Each sysctl changed is logged with its old value. Writing them needs the
container privileged (the reference's manifest makes it so).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := node.InitSettingsFromEnv(getenv)
			if err != nil {
				return failed(err)
			}
			names, err := node.InstallBinaries(cniDir, s.HostBinDir, nil)
			if err != nil {
				return failed(fmt.Errorf("install the plugins from %s into %s: %w", cniDir, s.HostBinDir, err))
			}
			log.Info("CNI plugins installed", "dir", s.HostBinDir, "plugins", names)
			k, err := linux.Opener{}.Open("")
			if err != nil {
				return failed(err)
			}
			defer k.Close()
			if primary == "" {
				if primary, err = node.PrimaryInterface(k); err != nil {
					return failed(err)
				}
			} else if _, err := k.LinkByName(primary); err != nil {
				return failed(fmt.Errorf("--primary-interface %s: %w", primary, err))
			}
			log.Info("primary interface", "name", primary)
			if err := node.ApplySysctls(k, log, node.Sysctls(s, primary)); err != nil {
				return failed(err)
			}
			log.Info("init done")
			return nil
		},
	}
	c.Flags().StringVar(&cniDir, "cni-dir", besideMe("cni"), "the image's directory of CNI plugins to install")
	c.Flags().StringVar(&primary, "primary-interface", "", "the primary ENI's link (default: the link of the default route)")
	return c
}
