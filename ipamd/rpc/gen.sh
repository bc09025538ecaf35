#!/bin/sh
# Regenerate the Go code of rpc.proto with the protoc plugins pinned in
# go.mod (go tool) and Debian's protoc. Run from the module root.
set -eu
cd "$(dirname "$0")/../.."
protoc --plugin=protoc-gen-go="$(go tool -n protoc-gen-go)" \
  --plugin=protoc-gen-go-grpc="$(go tool -n protoc-gen-go-grpc)" \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  ipamd/rpc/rpc.proto
