#!/bin/sh
# Regenerates the Go of ipamd/rpc (messages only: rpc.proto,
# inventory.proto, health.proto) and of ipamd/rpc/rpcgrpc (the services,
# with gRPC's server and client code) with Debian's protoc and the
# protoc-gen-go / protoc-gen-go-grpc versions pinned by the `tool`
# directives in go.mod, so everyone produces byte-identical files. The
# command runs from the module root (paths=source_relative puts the
# output next to each .proto).
set -eu
cd "$(dirname "$0")/../.."
protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=paths=source_relative \
  ipamd/rpc/rpc.proto ipamd/rpc/inventory.proto ipamd/rpc/health.proto
protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) \
  --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  ipamd/rpc/rpcgrpc/cnibackend.proto ipamd/rpc/rpcgrpc/inventory_service.proto
