// Package deploy holds no code: deploy/ is where vpccni meets a cluster.
// It has the conflist for the container runtime (10-vpccni.conflist), the
// node image (Dockerfile, install-cni.sh), the manifests
// (kubernetes/: the vpccni-node DaemonSet and its RBAC) and a kind cluster
// configuration (kind.yaml). Its tests parse every one of them into its
// real type and check that they agree with each other and with the
// binaries: see deploy_test.go.
package deploy
