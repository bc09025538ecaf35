// Package deploy holds no code: deploy/ is where vpccni meets a cluster.
// It has the Dockerfile of the two node images (the aws-node image and
// the aws-vpc-cni-init image, both around vpccni-node), the manifests
// (kubernetes/: the aws-node DaemonSet and its RBAC, under the
// reference's names) and a kind cluster configuration (kind.yaml). The
// conflist is not here: vpccni-node run writes it from the environment.
// Its tests parse every file into its real type and check that they agree
// with each other and with the binaries, and that the reference's own
// manifest with vpccni's images passes the same pod checks: see
// deploy_test.go.
package deploy
