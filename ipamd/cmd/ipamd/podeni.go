package main

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vpccni/vpccni/cloud"
	"github.com/vpccni/vpccni/ipamd"
	"github.com/vpccni/vpccni/ipamd/podeni"
	"github.com/vpccni/vpccni/kernel/linux"
)

// Values of --pod-eni-source.
const (
	sourceKubernetes = "kubernetes"
	sourceStatic     = "static"
)

// podENIFlags are the flags of security groups for pods.
type podENIFlags struct {
	enabled    bool
	source     string
	file       string // --pod-eni-file, static only
	kubeconfig string // --kubeconfig, kubernetes only
}

// check reports a combination that cannot mean what its user wants: a
// flag that would be silently ignored is a usage error. set holds the
// names of the flags given on the command line.
func (f podENIFlags) check(set map[string]bool) error {
	if !f.enabled {
		for _, name := range []string{"pod-eni-source", "pod-eni-file", "kubeconfig"} {
			if set[name] {
				return fmt.Errorf("--%s needs --enable-pod-eni (or ENABLE_POD_ENI=true)", name)
			}
		}
		return nil
	}
	switch f.source {
	case sourceKubernetes:
		if f.file != "" {
			return errors.New("--pod-eni-file is for --pod-eni-source static")
		}
	case sourceStatic:
		if f.file == "" {
			return errors.New("--pod-eni-source static needs --pod-eni-file PATH")
		}
		if f.kubeconfig != "" {
			return errors.New("--kubeconfig is for --pod-eni-source kubernetes")
		}
	default:
		return fmt.Errorf("--pod-eni-source %q: want kubernetes or static", f.source)
	}
	return nil
}

// source builds the pod-ENI source the flags name (nil when disabled).
// It does not contact the API server: a cluster that is down at startup
// fails branch pods' ADDs, not ipamd.
func (f podENIFlags) sourceOf(version string) (podeni.Source, error) {
	if !f.enabled {
		return nil, nil
	}
	if f.source == sourceStatic {
		s, err := podeni.ReadStaticFile(f.file)
		if err != nil {
			return nil, fmt.Errorf("--pod-eni-file: %w", err)
		}
		return s, nil
	}
	var cfg *rest.Config
	var err error
	if f.kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("--pod-eni-source kubernetes: not running in a cluster (KUBERNETES_SERVICE_HOST and _PORT unset) and no --kubeconfig given")
	} else if err != nil {
		return nil, fmt.Errorf("--pod-eni-source kubernetes: in-cluster config: %w", err)
	}
	cfg.UserAgent = "vpccni-ipamd/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--pod-eni-source kubernetes: %w", err)
	}
	return podeni.Kubernetes{Client: client}, nil
}

// trunkLinkIndex resolves the trunk ENI's link in ipamd's own network
// namespace, by MAC, on every call: the link may appear after startup.
// Nil when the instance has no trunk ENI (the daemon then refuses branch
// pods, saying so).
func trunkLinkIndex(inst cloud.Instance, cloudKind string) func() (int, error) {
	trunk, ok := inst.Trunk()
	if !ok {
		return nil
	}
	return func() (int, error) {
		api, err := linux.Opener{}.Open("")
		if err != nil {
			return 0, fmt.Errorf("open ipamd's network namespace: %w", err)
		}
		defer api.Close()
		idx, err := ipamd.TrunkIndexByMAC(api, trunk.MAC)
		if err != nil && cloudKind == "memory" {
			return 0, fmt.Errorf("%w: with --cloud memory the trunk ENI %s exists in the inventory only, unless a harness created a link with its MAC in ipamd's namespace", err, trunk.ID)
		}
		return idx, err
	}
}
