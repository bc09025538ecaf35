// Package rpc is the gRPC contract between the vpc-cni plugin and ipamd:
// the service rpc.CNIBackend (AddNetwork, DelNetwork) with the reference
// AWS VPC CNI's messages and field numbers, so either side interoperates
// with the reference's other side. rpc.pb.go and rpc_grpc.pb.go are
// generated from rpc.proto by gen.sh; edit the .proto, never them.
package rpc
