package plugin

import (
	"io"
	"strings"
	"sync"

	"github.com/vpccni/vpccni/internal/unarygrpc"
)

// open connections to ipamd, by target, with how many callers hold each.
// They are unarygrpc's: the plugin makes one or two unary calls and
// exits, and grpc-go's ClientConn spends more on its resolver, balancer
// and transport goroutines than ipamd spends answering (docs/benchmarks.md).
// A DEL asks ipamd twice (what the sandbox holds, then the release) and
// holds the first connection until it returns, so the release rides on
// it: one connection set up per DEL, not two. The last holder's Close
// closes it: nothing outlives the calls that use it (a plugin process
// runs one verb; the harness runs many, each with a fresh connection as a
// fresh process would have).
var conns = struct {
	sync.Mutex
	open map[string]*sharedConn
}{open: map[string]*sharedConn{}}

type sharedConn struct {
	conn    *unarygrpc.Conn
	holders int
}

// dialShared returns a connection to target, shared with the other
// callers that hold one, and the closer that lets go of it.
func dialShared(target string) (*unarygrpc.Conn, io.Closer, error) {
	if err := checkSocket(target); err != nil {
		return nil, nil, err
	}
	conns.Lock()
	defer conns.Unlock()
	if c := conns.open[target]; c != nil {
		c.holders++
		return c.conn, &letGo{target: target, c: c}, nil
	}
	c := &sharedConn{conn: unarygrpc.New(dialAddress(target)), holders: 1}
	conns.open[target] = c
	return c.conn, &letGo{target: target, c: c}, nil
}

// dialAddress is the network and address of an ipamdAddress, one of the
// two forms validateIpamdAddress accepts: unix:///path, or a loopback
// IP:port.
func dialAddress(target string) (network, address string) {
	if path, ok := strings.CutPrefix(target, "unix://"); ok {
		return "unix", path
	}
	return "tcp", target
}

// letGo is one holder's hold on a shared connection.
type letGo struct {
	target string
	c      *sharedConn
	once   sync.Once
}

func (l *letGo) Close() error {
	var err error
	l.once.Do(func() {
		conns.Lock()
		last := l.c.holders == 1
		l.c.holders--
		if last && conns.open[l.target] == l.c {
			delete(conns.open, l.target)
		}
		conns.Unlock()
		if last {
			err = l.c.conn.Close() // outside the lock: closing waits for the transport
		}
	})
	return err
}
