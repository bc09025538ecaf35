package rpcgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// Invoker lets rpc's clients call through a grpc-go connection (ipamd's
// own tests, the harness), as the plugin calls through its own.
func Invoker(cc grpc.ClientConnInterface) rpc.Invoker { return invoker{cc} }

type invoker struct{ cc grpc.ClientConnInterface }

func (i invoker) Invoke(ctx context.Context, method string, in, out proto.Message) error {
	return i.cc.Invoke(ctx, method, in, out)
}
