// Package introspect serves ipamd's state as JSON over HTTP for operators
// and debugging tools: the ENIs and their addresses, the allocations, the
// warm pool and the settings in effect.
//
// The server listens on loopback only (DefaultAddress, as the reference)
// or on a Unix socket: the data names every pod's address, and the API has
// no authentication. A routable address must be allowed explicitly.
package introspect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultAddress is where introspection listens unless configured
// otherwise (the reference's address and port).
const DefaultAddress = "127.0.0.1:61679"

// Server limits. The read and write timeouts are the reference's; the
// header limits bound what a client can make the server hold, since every
// request here is a bare GET.
const (
	readTimeout       = 5 * time.Second
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 5 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 8 << 10

	// shutdownGrace is how long in-flight requests get when the context
	// passed to Serve ends.
	shutdownGrace = 5 * time.Second
)

// Source provides the data served. Each method is called once per request
// from the request's goroutine, so implementations must be safe for
// concurrent use, and return values that encoding/json can encode and that
// the caller no longer mutates (a copy or a snapshot).
type Source interface {
	// ENIs returns the ENIs with their addresses (assigned, cooling,
	// free).
	ENIs() any
	// Allocations returns the allocations (key, pod, IP, device, route
	// table, since).
	Allocations() any
	// Pool returns the warm-pool targets and address counts.
	Pool() any
	// Settings returns the environment settings in effect.
	Settings() map[string]string
}

// Config configures Serve.
type Config struct {
	// Address is host:port or unix:<path> (INTROSPECTION_BIND_ADDRESS);
	// empty means DefaultAddress. Port 0 picks a free port (see
	// Server.Addr).
	Address string
	// AllowNonLoopback permits a TCP host that is not loopback, which
	// makes the node's pod addresses readable from other hosts.
	AllowNonLoopback bool
	// Source provides the data; required.
	Source Source
	// Log receives server errors; nil discards them.
	Log *slog.Logger
}

// Server is a running introspection server.
type Server struct {
	http   *http.Server
	addr   string
	log    *slog.Logger
	served chan struct{} // closed when http.Server.Serve has returned

	shutdownOnce sync.Once
	shutdownErr  error
}

// Serve binds cfg.Address and serves on it in the background until ctx
// ends or Shutdown is called. Binding errors, a refused address included,
// are returned here rather than from the background goroutine, so a
// misconfiguration fails ipamd's start-up visibly.
func Serve(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Source == nil {
		return nil, errors.New("introspection: nil Source")
	}
	logger := cfg.Log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	address := cfg.Address
	if address == "" {
		address = DefaultAddress
	}
	l, err := listen(address, cfg.AllowNonLoopback)
	if err != nil {
		return nil, err
	}
	s := &Server{
		http: &http.Server{
			Handler:           newHandler(cfg.Source, logger),
			ReadTimeout:       readTimeout,
			ReadHeaderTimeout: readHeaderTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			// net/http reports accept errors and handler panics here; send
			// them where ipamd's logs go.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		addr:   boundAddress(l),
		log:    logger,
		served: make(chan struct{}),
	}
	go s.serve(l)
	go func() {
		select {
		case <-ctx.Done():
			shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := s.Shutdown(shutdownCtx); err != nil {
				logger.Warn("introspection shutdown", "error", err)
			}
		case <-s.served:
		}
	}()
	logger.Info("introspection listening", "address", s.addr)
	return s, nil
}

func (s *Server) serve(l net.Listener) {
	defer close(s.served)
	if err := s.http.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("introspection stopped serving", "error", err)
	}
}

// boundAddress is the listener's address in the form Config.Address
// takes: host:port with the actual port, or unix:<path>.
func boundAddress(l net.Listener) string {
	if a, ok := l.Addr().(*net.UnixAddr); ok {
		return unixPrefix + a.Name
	}
	return l.Addr().String()
}

// Addr returns the address the server listens on: host:port with the
// port actually bound (useful with port 0), or unix:<path>.
func (s *Server) Addr() string { return s.addr }

// Shutdown stops accepting connections, waits for in-flight requests until
// ctx ends, and returns once the server has stopped. A Unix socket file is
// removed. Later calls return the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		err := s.http.Shutdown(ctx)
		if err != nil {
			// In-flight requests outlived ctx: cut them off so that the
			// server is stopped when Shutdown returns.
			s.http.Close()
		}
		<-s.served
		if err != nil {
			s.shutdownErr = fmt.Errorf("introspection shutdown: %w", err)
		}
	})
	return s.shutdownErr
}
