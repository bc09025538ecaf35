package introspect

import (
	"context"
	"testing"
	"time"
)

type emptySource struct{}

func (emptySource) ENIs() any                   { return nil }
func (emptySource) Allocations() any            { return nil }
func (emptySource) Pool() any                   { return nil }
func (emptySource) Settings() map[string]string { return nil }

// The limits are not observable from outside without waiting them out, so
// this checks the server's configuration directly.
func TestServerLimits(t *testing.T) {
	s, err := Serve(context.Background(), Config{Address: "127.0.0.1:0", Source: emptySource{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	for name, got := range map[string]time.Duration{
		"ReadTimeout":       s.http.ReadTimeout,
		"WriteTimeout":      s.http.WriteTimeout,
		"ReadHeaderTimeout": s.http.ReadHeaderTimeout,
	} {
		if got != 5*time.Second {
			t.Errorf("%s = %v, want the reference's 5s", name, got)
		}
	}
	if n := s.http.MaxHeaderBytes; n <= 0 || n > 64<<10 {
		t.Errorf("MaxHeaderBytes = %d, want a small positive limit", n)
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1":        true,
		"127.255.0.9":      true,
		"::1":              true,
		"::ffff:127.0.0.1": true,
		"localhost":        true,
		"LOCALHOST":        true,
		"":                 false,
		"0.0.0.0":          false,
		"::":               false,
		"10.1.2.3":         false,
		"128.0.0.1":        false,
		"localhost.evil":   false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
