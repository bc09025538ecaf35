package ipamd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// TestDefaultLimits pins the bounds the binary runs with: a CNI request
// is a few hundred bytes, so 64 KiB is far more than any real one.
func TestDefaultLimits(t *testing.T) {
	l := Limits{}.withDefaults()
	if l != DefaultLimits {
		t.Fatalf("zero Limits give %+v, want DefaultLimits %+v", l, DefaultLimits)
	}
	if l.MaxRecvMsgSize != 64<<10 || l.MaxConnections <= 0 || l.MaxStreams == 0 || l.HandshakeTimeout <= 0 ||
		l.MaxConnectionIdle <= 0 || l.MaxConnectionAge <= 0 || l.MaxConnectionAgeGrace <= 0 || l.MaxHeaderListSize == 0 {
		t.Fatalf("DefaultLimits %+v leave something unbounded", l)
	}
}

// TestHugeRequestRefusedThenServed checks that an AddNetwork whose message
// is larger than MaxRecvMsgSize (64 KiB by default: here just over it and
// 4 MiB) is refused with ResourceExhausted and assigns nothing, and that
// the daemon then serves a normal request, on the same connection and on
// a new one.
func TestHugeRequestRefusedThenServed(t *testing.T) {
	sock := sockPath(t)
	d := start(t, sock, Config{})
	c := client(t, sock)
	for _, size := range []int{DefaultLimits.MaxRecvMsgSize, 4 << 20} {
		req := addReq("huge")
		req.K8S_POD_NAME = strings.Repeat("a", size)
		_, err := c.AddNetwork(ctx(t), req)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
			t.Fatalf("AddNetwork of %d bytes: %v, want ResourceExhausted", size, err)
		}
	}
	if n := len(d.Allocations()); n != 0 {
		t.Fatalf("%d addresses assigned by refused requests", n)
	}
	if r, err := c.AddNetwork(ctx(t), addReq("c1")); err != nil || !r.Success {
		t.Fatalf("normal AddNetwork on the same connection: %v %v", r, err)
	}
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("c2")); err != nil || !r.Success {
		t.Fatalf("normal AddNetwork on a new connection: %v %v", r, err)
	}
}

// rawConn is a connection the test drives byte by byte, recording when the
// server first writes to it (it was accepted: grpc writes its SETTINGS
// first) and when the server closes it.
type rawConn struct {
	net.Conn
	accepted, closed chan struct{}
}

// dialRaw connects and watches the connection; write sends bytes first
// (nil: the client says nothing, ever).
func dialRaw(t *testing.T, sock string, write func(net.Conn) error) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if write != nil {
		if err := write(c); err != nil {
			t.Fatal(err)
		}
	}
	r := &rawConn{Conn: c, accepted: make(chan struct{}), closed: make(chan struct{})}
	go func() {
		defer close(r.closed)
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return
		}
		close(r.accepted)
		io.Copy(io.Discard, c) // never answers: no SETTINGS ack, no PING ack
	}()
	return r
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitAll(t *testing.T, what string, conns []*rawConn, ch func(*rawConn) chan struct{}, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for i, c := range conns {
		select {
		case <-ch(c):
		case <-deadline:
			t.Fatalf("connection %d of %d not %s within %v", i, len(conns), what, within)
		}
	}
}

// TestConnectionLimitAndSilentClients checks the bound on simultaneous
// connections (4 here) and that silent clients cannot hold it: ten
// connections that never send a byte are opened; the daemon takes exactly
// four (the rest wait in the listen backlog), drops each after the
// handshake timeout (1s here) without the client closing anything, and so
// a normal client that queued behind all ten is served.
func TestConnectionLimitAndSilentClients(t *testing.T) {
	t.Parallel()
	const limit, silent = 4, 10
	sock := sockPath(t)
	start(t, sock, Config{}, WithLimits(Limits{MaxConnections: limit, HandshakeTimeout: time.Second}))
	var conns []*rawConn
	for range silent {
		conns = append(conns, dialRaw(t, sock, nil))
	}
	waitAll(t, "accepted", conns[:limit], func(c *rawConn) chan struct{} { return c.accepted }, 5*time.Second)
	time.Sleep(300 * time.Millisecond) // well inside the handshake timeout
	n := 0
	for _, c := range conns {
		if isClosed(c.accepted) {
			n++
		}
	}
	if n != limit {
		t.Fatalf("%d of %d connections accepted at once, want the limit %d", n, silent, limit)
	}

	begin := time.Now()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r, err := client(t, sock).AddNetwork(c, addReq("c1")); err != nil || !r.Success {
		t.Fatalf("normal client behind %d silent connections: %v %v", silent, r, err)
	}
	t.Logf("normal client served after %v behind %d silent connections (limit %d, handshake timeout 1s)",
		time.Since(begin).Round(time.Millisecond), silent, limit)
	waitAll(t, "dropped by the daemon", conns, func(c *rawConn) chan struct{} { return c.closed }, 5*time.Second)
}

// h2 writes HTTP/2 as a hostile client would: only what it wants.
type h2 struct {
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newH2(c net.Conn) *h2 {
	h := &h2{fr: http2.NewFramer(c, c)}
	h.enc = hpack.NewEncoder(&h.hb)
	return h
}

// handshake sends the client preface and an empty SETTINGS frame: enough
// for grpc to consider the connection established.
func (h *h2) handshake(c net.Conn) error {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	return h.fr.WriteSettings()
}

// openStream sends a gRPC call's headers (split into HEADERS and
// CONTINUATION frames of at most 16 KiB), without ending the stream.
func (h *h2) openStream(id uint32, extra ...hpack.HeaderField) error {
	h.hb.Reset()
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: rpc.MethodAddNetwork}, {Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}, extra...) {
		if err := h.enc.WriteField(f); err != nil {
			return err
		}
	}
	block := h.hb.Bytes()
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), 16<<10)
		chunk, end := block[:n], n == len(block)
		block = block[n:]
		var err error
		if first {
			err = h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndHeaders: end})
		} else {
			err = h.fr.WriteContinuation(id, end, chunk)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestStuckClientsLoseTheirSlot checks that a client which completes the
// handshake cannot hold one of the (2 here) connection slots forever,
// neither by staying idle (closed after MaxConnectionIdle and grpc's 5s
// wait for a PING ack it never gets) nor by starting a call whose request
// never finishes arriving (closed after MaxConnectionAge plus grace): in
// both cases the daemon closes the connection itself and a normal client
// queued behind is served.
func TestStuckClientsLoseTheirSlot(t *testing.T) {
	cases := []struct {
		name   string
		limits Limits
		stall  func(c net.Conn) error
		within time.Duration
	}{
		{"idle after the handshake", Limits{MaxConnections: 2, MaxConnectionIdle: 300 * time.Millisecond},
			func(c net.Conn) error { return newH2(c).handshake(c) }, 15 * time.Second},
		{"call never finished", Limits{MaxConnections: 2, MaxConnectionAge: 500 * time.Millisecond, MaxConnectionAgeGrace: 300 * time.Millisecond},
			func(c net.Conn) error {
				h := newH2(c)
				if err := h.handshake(c); err != nil {
					return err
				}
				if err := h.openStream(1); err != nil {
					return err
				}
				// A gRPC message announcing 100 bytes, of which 10 come.
				msg := binary.BigEndian.AppendUint32([]byte{0}, 100)
				return h.fr.WriteData(1, false, append(msg, make([]byte, 10)...))
			}, 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sock := sockPath(t)
			start(t, sock, Config{}, WithLimits(tc.limits))
			stuck := []*rawConn{dialRaw(t, sock, tc.stall), dialRaw(t, sock, tc.stall)}
			waitAll(t, "accepted", stuck, func(c *rawConn) chan struct{} { return c.accepted }, 5*time.Second)
			begin := time.Now()
			c, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			if r, err := client(t, sock).AddNetwork(c, addReq("c1")); err != nil || !r.Success {
				t.Fatalf("normal client behind 2 stuck connections: %v %v", r, err)
			}
			t.Logf("normal client served after %v", time.Since(begin).Round(time.Millisecond))
			waitAll(t, "closed by the daemon", stuck, func(c *rawConn) chan struct{} { return c.closed }, 5*time.Second)
		})
	}
}

// serverFrames reads what the server sends on c until stop says so, and
// fails the test if that takes more than 5s. It returns the
// SETTINGS_MAX_CONCURRENT_STREAMS the server advertised (0 if none yet)
// and the error that ended the reading, if any (EOF: the server closed).
func serverFrames(t *testing.T, c net.Conn, h *h2, stop func(http2.Frame) bool) (advertised uint32, err error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the server sent nothing conclusive within 5s")
			}
			return advertised, err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
				advertised = v
			}
		}
		if stop(f) {
			return advertised, nil
		}
	}
}

func handshaken(t *testing.T, sock string) (net.Conn, *h2) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := newH2(c)
	if err := h.handshake(c); err != nil {
		t.Fatal(err)
	}
	return c, h
}

// TestStreamsAndHeadersPerConnectionBounded checks, with a hand-written
// HTTP/2 client that ignores what the server advertises:
//   - a connection cannot run more calls at once than MaxStreams (2 here,
//     advertised in SETTINGS): with two calls hanging, a third stream is
//     refused with REFUSED_STREAM;
//   - a call whose header list exceeds MaxHeaderListSize (16 KiB by
//     default; 20 KiB sent as one 1 KiB field repeated, which HPACK sends
//     as one literal and 19 one-byte references) is reset and reaches no
//     handler, and the connection survives;
//   - a single 32 KiB header value, far over the limit, costs the sender
//     its connection;
//
// and the daemon then serves a normal request.
func TestStreamsAndHeadersPerConnectionBounded(t *testing.T) {
	t.Parallel()
	sock := sockPath(t)
	d := start(t, sock, Config{}, WithLimits(Limits{MaxStreams: 2}))

	c, h := handshaken(t, sock)
	for _, id := range []uint32{1, 3, 5} { // requests never sent: the calls hang
		if err := h.openStream(id); err != nil {
			t.Fatal(err)
		}
	}
	resets := map[uint32]http2.ErrCode{}
	advertised, err := serverFrames(t, c, h, func(f http2.Frame) bool {
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			resets[rst.StreamID] = rst.ErrCode
		}
		return len(resets) > 0
	})
	if err != nil {
		t.Fatalf("streams: reading the server: %v", err)
	}
	if advertised != 2 {
		t.Errorf("server advertised SETTINGS_MAX_CONCURRENT_STREAMS %d, want 2", advertised)
	}
	if len(resets) != 1 || resets[5] != http2.ErrCodeRefusedStream {
		t.Errorf("resets %v, want only the third stream (5) refused with REFUSED_STREAM", resets)
	}

	c, h = handshaken(t, sock)
	pad := hpack.HeaderField{Name: "x-padding", Value: strings.Repeat("a", 1<<10)}
	var fields []hpack.HeaderField
	for range 20 {
		fields = append(fields, pad)
	}
	if err := h.openStream(1, fields...); err != nil {
		t.Fatal(err)
	}
	var reset *http2.RSTStreamFrame
	if _, err := serverFrames(t, c, h, func(f http2.Frame) bool {
		reset, _ = f.(*http2.RSTStreamFrame)
		return reset != nil
	}); err != nil || reset.StreamID != 1 {
		t.Fatalf("20 KiB of headers: %v %v, want stream 1 reset", reset, err)
	}
	// The connection is still served: a PING is answered.
	ping := [8]byte{'v', 'p', 'c', 'c', 'n', 'i'}
	if err := h.fr.WritePing(false, ping); err != nil {
		t.Fatal(err)
	}
	if _, err := serverFrames(t, c, h, func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck() && p.Data == ping
	}); err != nil {
		t.Fatalf("after the reset, the connection is gone: %v", err)
	}

	c, h = handshaken(t, sock)
	// The server may close before the last CONTINUATION frame is written.
	err = h.openStream(1, hpack.HeaderField{Name: "x-padding", Value: strings.Repeat("a", 32<<10)})
	if err == nil {
		_, err = serverFrames(t, c, h, func(http2.Frame) bool { return false })
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("32 KiB header value: the connection ended with %v, want it closed by the server", err)
	}

	if n := len(d.Allocations()); n != 0 {
		t.Fatalf("%d addresses assigned by calls that never sent a request", n)
	}
	if r, err := client(t, sock).AddNetwork(ctx(t), addReq("c1")); err != nil || !r.Success {
		t.Fatalf("normal AddNetwork afterwards: %v %v", r, err)
	}
}
