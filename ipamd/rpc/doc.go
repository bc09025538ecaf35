// Package rpc is the contract between the vpc-cni plugin and ipamd: the
// reference AWS VPC CNI's CNIBackend messages with their field numbers,
// so either side interoperates with the reference's other side, vpccni's
// Inventory messages, and the health protocol's two messages. It links no
// gRPC runtime: the plugin calls through the small clients of client.go
// over its own transport (internal/unarygrpc), and the services, with
// grpc-go's server and client code, are in rpcgrpc. The *.pb.go files are
// generated from the .proto files by gen.sh; edit the .proto, never them.
package rpc
