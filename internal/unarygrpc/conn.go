// Package unarygrpc is a gRPC client connection for unary calls only,
// made for a process that lives for one or two calls: the CNI plugin.
//
// grpc-go's ClientConn is built for long-lived clients: a resolver, a
// balancer, a transport whose reader and writer are goroutines of their
// own, a wait for the server's settings before the first request. For a
// process that makes two calls and exits, that machinery is most of the
// cost of a call: about 0.7 ms of a 0.9 ms DelNetwork on a 2-core node,
// of which ipamd's handler is 0.2 ms (docs/benchmarks.md). Conn speaks
// the same wire (HTTP/2 frames from golang.org/x/net/http2, the gRPC
// message framing and status trailers) synchronously on the calling
// goroutine: the client preface, its settings and the first request go
// out in one write, without waiting for the server's settings (HTTP/2
// allows it), and the call reads frames until its stream ends.
//
// It is an rpc.Invoker, so rpc's clients (rpc.NewCNIBackendClient, the
// health client) run on it, and it links no part of grpc-go but its
// status and codes: the gRPC runtime's package initialisation and size
// cost every plugin process about 1.4 ms before main (docs/benchmarks.md).
// Its errors are gRPC status errors with the codes grpc-go gives the same
// failures: Unavailable when the connection cannot be made or breaks,
// DeadlineExceeded or Canceled from the call's context, the server's own
// status otherwise. Calls on one Conn are serialised. Streaming calls and
// compression are not supported and are refused.
package unarygrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vpccni/vpccni/ipamd/rpc"
)

// Limits of what one call sends and accepts. A request must fit the
// HTTP/2 default flow-control window (the client sends before it has the
// server's settings); replies are bounded by the window the client
// grants.
const (
	maxRequest = 65535 - 5
	maxReply   = 16 << 20
	frameSize  = 16384 // the HTTP/2 default SETTINGS_MAX_FRAME_SIZE
)

// Conn is one HTTP/2 connection to a gRPC server, for unary calls.
type Conn struct {
	network, address string

	mu     sync.Mutex
	nc     net.Conn // nil until the first call connects
	w      *bufio.Writer
	fr     *http2.Framer
	hbuf   bytes.Buffer
	henc   *hpack.Encoder
	stream uint32 // the last stream opened
	// broken is why the connection cannot carry another call (it failed,
	// or the server is going away); every later call fails with it.
	broken error
}

// New is a connection to a gRPC server at network/address ("unix", a
// socket path). Like grpc.NewClient it does no I/O: the first call
// connects, within its context, and sends the preface with its request.
func New(network, address string) *Conn {
	return &Conn{network: network, address: address}
}

// Close closes the connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = status.Error(codes.Canceled, "unarygrpc: the connection is closed")
	if c.nc == nil {
		return nil
	}
	return c.nc.Close()
}

// connect dials and writes (not yet sends) the client preface and
// settings.
func (c *Conn) connect(ctx context.Context) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, c.network, c.address)
	if err != nil {
		return err
	}
	c.nc = nc
	c.w = bufio.NewWriterSize(nc, 2*frameSize)
	c.fr = http2.NewFramer(c.w, bufio.NewReader(nc))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 1 << 20
	c.fr.SetMaxReadFrameSize(1 << 20)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := c.w.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	// Streams may take up to maxReply; the connection too (65535 is its
	// initial window, which only a WINDOW_UPDATE raises).
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxReply}); err != nil {
		return err
	}
	return c.fr.WriteWindowUpdate(0, maxReply-65535)
}

// Invoke makes one unary call: method is the full name
// ("/rpc.CNIBackend/DelNetwork"), in and out protobuf messages.
func (c *Conn) Invoke(ctx context.Context, method string, in, out proto.Message) error {
	msg, err := proto.Marshal(in)
	if err != nil {
		return status.Errorf(codes.Internal, "unarygrpc: marshal %s request: %v", method, err)
	}
	if len(msg) > maxRequest {
		return status.Errorf(codes.ResourceExhausted, "unarygrpc: %s request of %d bytes is larger than %d", method, len(msg), maxRequest)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	if c.nc == nil {
		if err := c.connect(ctx); err != nil {
			return c.fail(ctx, err)
		}
	}
	// The call's context bounds every read and write: its deadline is the
	// socket's, and a cancel wakes whatever I/O is blocked.
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetDeadline(deadline); err != nil {
		return c.fail(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	body, err := c.call(method, deadline, msg)
	if err != nil {
		return c.fail(ctx, err)
	}
	if err := proto.Unmarshal(body, out); err != nil {
		return status.Errorf(codes.Internal, "unarygrpc: unmarshal %s reply: %v", method, err)
	}
	return nil
}

// fail is a failed call's error. A failure of the connection (I/O, a
// protocol error) breaks it for later calls too; a gRPC status the server
// sent does not.
func (c *Conn) fail(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	_, bounded := ctx.Deadline()
	switch {
	case ctx.Err() != nil:
		err = status.FromContextError(ctx.Err()).Err()
	case bounded && errors.Is(err, os.ErrDeadlineExceeded):
		// The socket's deadline, which is the context's, passed a moment
		// before the context's own timer fired.
		err = status.FromContextError(context.DeadlineExceeded).Err()
	default:
		err = status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	c.broken = err
	return err
}

// call writes the request and reads the reply's message.
func (c *Conn) call(method string, deadline time.Time, msg []byte) ([]byte, error) {
	c.stream += 2
	if c.stream == 2 {
		c.stream = 1 // client streams are odd: 1, 3, 5…
	}
	id := c.stream
	c.hbuf.Reset()
	for _, f := range requestHeaders(method, deadline) {
		if err := c.henc.WriteField(f); err != nil {
			return nil, err
		}
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return nil, err
	}
	framed := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(framed[1:5], uint32(len(msg)))
	copy(framed[5:], msg)
	for len(framed) > 0 {
		n := min(len(framed), frameSize)
		if err := c.fr.WriteData(id, n == len(framed), framed[:n]); err != nil {
			return nil, err
		}
		framed = framed[n:]
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.readReply(id, deadline)
}

func requestHeaders(method string, deadline time.Time) []hpack.HeaderField {
	h := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "vpccni-unarygrpc"},
	}
	if !deadline.IsZero() {
		// The server's handler gets the same deadline (gRPC's timeout
		// header: at most 8 digits, here microseconds).
		us := max(time.Until(deadline).Microseconds(), 1)
		h = append(h, hpack.HeaderField{Name: "grpc-timeout", Value: strconv.FormatInt(min(us, 99999999), 10) + "u"})
	}
	return h
}

// readReply reads frames until stream id ends and returns its message,
// or the status error the server ended it with.
func (c *Conn) readReply(id uint32, deadline time.Time) ([]byte, error) {
	var body []byte
	var headers []hpack.HeaderField
	sawHeaders := false
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := c.fr.WriteSettingsAck(); err != nil {
					return nil, err
				}
				if err := c.w.Flush(); err != nil {
					return nil, err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := c.fr.WritePing(true, f.Data); err != nil {
					return nil, err
				}
				if err := c.w.Flush(); err != nil {
					return nil, err
				}
			}
		case *http2.GoAwayFrame:
			// The server finishes the streams up to LastStreamID and
			// takes no new one on this connection.
			c.broken = status.Errorf(codes.Unavailable, "connection error: the server is going away (%v)", f.ErrCode)
			if f.LastStreamID < id {
				return nil, c.broken
			}
		case *http2.RSTStreamFrame:
			if f.StreamID != id {
				continue
			}
			if f.ErrCode == http2.ErrCodeCancel && !deadline.IsZero() && !deadline.After(time.Now()) {
				// The server cancels a call past the deadline it was given
				// (grpc-timeout), which is this one's: the call timed out,
				// as grpc-go's client says too.
				return nil, status.FromContextError(context.DeadlineExceeded).Err()
			}
			return nil, resetError(f.ErrCode)
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			if len(body)+len(f.Data()) > maxReply+5 {
				return nil, status.Errorf(codes.ResourceExhausted, "unarygrpc: reply larger than %d bytes", maxReply)
			}
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return nil, status.Error(codes.Internal, "unarygrpc: the server ended the stream without a status")
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			headers = append(headers, f.Fields...)
			if !sawHeaders {
				sawHeaders = true
				if err := checkResponseHeaders(f); err != nil {
					return nil, err
				}
			}
			if f.StreamEnded() {
				return message(body, headers)
			}
		}
	}
}

// checkResponseHeaders is the first HEADERS of a reply: HTTP 200 and a
// gRPC content type, unless it is a trailers-only reply with a status.
func checkResponseHeaders(f *http2.MetaHeadersFrame) error {
	if f.PseudoValue("status") != "200" && !hasField(f.Fields, "grpc-status") {
		code, err := strconv.Atoi(f.PseudoValue("status"))
		if err != nil {
			return status.Errorf(codes.Internal, "unarygrpc: malformed HTTP status %q", f.PseudoValue("status"))
		}
		return status.Errorf(httpCode(code), "unarygrpc: unexpected HTTP status %d", code)
	}
	return nil
}

func hasField(fs []hpack.HeaderField, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

// message is the status the trailers carry, or, on OK, the one message of
// the body.
func message(body []byte, trailers []hpack.HeaderField) ([]byte, error) {
	var code, msg string
	for _, f := range trailers {
		switch f.Name {
		case "grpc-status":
			code = f.Value
		case "grpc-message":
			msg = f.Value
			if m, err := url.PathUnescape(f.Value); err == nil {
				msg = m
			}
		}
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "unarygrpc: malformed grpc-status %q", code)
	}
	if codes.Code(n) != codes.OK {
		return nil, status.Error(codes.Code(n), msg)
	}
	if len(body) < 5 || body[0] != 0 {
		return nil, status.Errorf(codes.Internal, "unarygrpc: malformed or compressed reply message (%d bytes)", len(body))
	}
	size := binary.BigEndian.Uint32(body[1:5])
	if uint64(size) != uint64(len(body)-5) {
		return nil, status.Errorf(codes.Internal, "unarygrpc: reply message of %d bytes in a body of %d", size, len(body)-5)
	}
	return body[5:], nil
}

// resetError is grpc-go's code for a stream the server reset.
func resetError(code http2.ErrCode) error {
	c := codes.Internal
	switch code {
	case http2.ErrCodeRefusedStream:
		c = codes.Unavailable
	case http2.ErrCodeCancel:
		c = codes.Canceled
	case http2.ErrCodeEnhanceYourCalm:
		c = codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		c = codes.PermissionDenied
	}
	return status.Errorf(c, "unarygrpc: stream reset by the server: %v", code)
}

// httpCode maps an HTTP status without a gRPC status as gRPC specifies.
func httpCode(code int) codes.Code {
	switch code {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// The interface the generated clients take.
var _ rpc.Invoker = (*Conn)(nil)
