package introspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpccni/vpccni/ipamd/introspect"
)

// Shapes like the ones the daemon serves; the package only needs them to
// be JSON-encodable.
type fakeENI struct {
	ID       string   `json:"id"`
	Device   int      `json:"device"`
	Assigned []string `json:"assigned"`
	Cooling  []string `json:"cooling"`
	Free     []string `json:"free"`
}

type fakeAllocation struct {
	Key    string    `json:"key"`
	Pod    string    `json:"pod"`
	IP     string    `json:"ip"`
	Device int       `json:"device"`
	Table  int       `json:"table"`
	Since  time.Time `json:"since"`
}

type fakePool struct {
	Total        int `json:"total"`
	Assigned     int `json:"assigned"`
	WarmIPTarget int `json:"warmIPTarget"`
}

type fakeSource struct{}

var (
	wantENIs = []fakeENI{
		{ID: "eni-0a1", Device: 0, Assigned: []string{"10.0.1.10"}, Cooling: []string{"10.0.1.11"}, Free: []string{"10.0.1.12"}},
		{ID: "eni-0b2", Device: 1, Assigned: []string{}, Cooling: []string{}, Free: []string{"10.0.2.20", "10.0.2.21"}},
	}
	wantAllocations = []fakeAllocation{{
		Key: "c0ffee/eth0", Pod: "default/web-1", IP: "10.0.1.10", Device: 0, Table: 254,
		Since: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
	}}
	wantPool     = fakePool{Total: 4, Assigned: 1, WarmIPTarget: 2}
	wantSettings = map[string]string{"WARM_ENI_TARGET": "1", "WARM_IP_TARGET": "2"}
)

func (fakeSource) ENIs() any                   { return wantENIs }
func (fakeSource) Allocations() any            { return wantAllocations }
func (fakeSource) Pool() any                   { return wantPool }
func (fakeSource) Settings() map[string]string { return wantSettings }

// unencodable serves a value encoding/json rejects.
type unencodable struct{ fakeSource }

func (unencodable) Pool() any { return map[string]any{"bad": make(chan int)} }

func serve(t *testing.T, cfg introspect.Config) *introspect.Server {
	t.Helper()
	if cfg.Source == nil {
		cfg.Source = fakeSource{}
	}
	s, err := introspect.Serve(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Serve(%q): %v", cfg.Address, err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

func do(t *testing.T, client *http.Client, method, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func indented(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestEndpointsServeSourceAsIndentedJSON(t *testing.T) {
	s := serve(t, introspect.Config{Address: "127.0.0.1:0"})
	for _, tc := range []struct {
		path string
		want any
	}{
		{"/v1/enis", wantENIs},
		{"/v1/allocations", wantAllocations},
		{"/v1/pool", wantPool},
		{"/v1/ipamd-env-settings", wantSettings},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+tc.path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if want := indented(t, tc.want); string(body) != want {
				t.Errorf("body:\n%s\nwant:\n%s", body, want)
			}
		})
	}
}

func TestIndexListsEveryEndpoint(t *testing.T) {
	s := serve(t, introspect.Config{Address: "127.0.0.1:0"})
	resp, body := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+"/")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var index introspect.Index
	if err := json.Unmarshal(body, &index); err != nil {
		t.Fatalf("index is not JSON: %v\n%s", err, body)
	}
	listed := map[string]bool{}
	for _, e := range index.Endpoints {
		if e.Description == "" {
			t.Errorf("%s has no description", e.Path)
		}
		listed[e.Path] = true
		// Everything listed must actually be served.
		if resp, _ := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+e.Path); resp.StatusCode != http.StatusOK {
			t.Errorf("listed %s answers %d", e.Path, resp.StatusCode)
		}
	}
	for _, p := range []string{"/", "/v1/enis", "/v1/allocations", "/v1/pool", "/v1/ipamd-env-settings"} {
		if !listed[p] {
			t.Errorf("index does not list %s: %s", p, body)
		}
	}
}

func TestOnlyGETIsAllowed(t *testing.T) {
	s := serve(t, introspect.Config{Address: "127.0.0.1:0"})
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead} {
		for _, path := range []string{"/", "/v1/enis", "/v1/ipamd-env-settings"} {
			resp, body := do(t, http.DefaultClient, method, "http://"+s.Addr()+path)
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: status %d, want 405", method, path, resp.StatusCode)
			}
			if allow := resp.Header.Get("Allow"); allow != http.MethodGet {
				t.Errorf("%s %s: Allow %q", method, path, allow)
			}
			if method != http.MethodHead && !json.Valid(body) {
				t.Errorf("%s %s: error body is not JSON: %s", method, path, body)
			}
		}
	}
}

func TestUnknownPathIsNotFound(t *testing.T) {
	s := serve(t, introspect.Config{Address: "127.0.0.1:0"})
	for _, path := range []string{"/v1/eni-configs", "/v1/enis/", "/v1", "/metrics", "/v1/pool/x"} {
		resp, body := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+path)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Errorf("GET %s: body %q is not a JSON error", path, body)
		}
	}
}

func TestUnencodableValueIsServerError(t *testing.T) {
	s := serve(t, introspect.Config{Address: "127.0.0.1:0", Source: unencodable{}})
	resp, body := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+"/v1/pool")
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500: %s", resp.StatusCode, body)
	}
	if !json.Valid(body) {
		t.Errorf("error body is not JSON: %s", body)
	}
}

func TestNonLoopbackAddressIsRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "10.1.2.3:61679", ":61679", "[::]:0", "example.com:61679"} {
		s, err := introspect.Serve(context.Background(), introspect.Config{Address: addr, Source: fakeSource{}})
		if err == nil {
			s.Shutdown(context.Background())
			t.Errorf("Serve(%q) succeeded", addr)
			continue
		}
		if !errors.Is(err, introspect.ErrNotLoopback) {
			t.Errorf("Serve(%q): %v, want ErrNotLoopback", addr, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "reachable from other hosts") || !strings.Contains(msg, "INTROSPECTION_BIND_ADDRESS") {
			t.Errorf("Serve(%q): unclear error %q", addr, msg)
		}
	}
}

func TestNonLoopbackAddressAllowedExplicitly(t *testing.T) {
	s := serve(t, introspect.Config{Address: "0.0.0.0:0", AllowNonLoopback: true})
	_, port, err := net.SplitHostPort(s.Addr())
	if err != nil || port == "0" {
		t.Fatalf("Addr %q: want the bound port", s.Addr())
	}
	resp, _ := do(t, http.DefaultClient, http.MethodGet, "http://127.0.0.1:"+port+"/v1/pool")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestLoopbackAddressesAreAccepted(t *testing.T) {
	addrs := []string{"127.0.0.1:0", "127.0.0.53:0", "localhost:0"}
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		l.Close()
		addrs = append(addrs, "[::1]:0")
	}
	for _, addr := range addrs {
		s := serve(t, introspect.Config{Address: addr})
		resp, _ := do(t, http.DefaultClient, http.MethodGet, "http://"+s.Addr()+"/v1/enis")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", addr, resp.StatusCode)
		}
	}
}

func TestDefaultAddress(t *testing.T) {
	if introspect.DefaultAddress != "127.0.0.1:61679" {
		t.Errorf("DefaultAddress = %q, want the reference's 127.0.0.1:61679", introspect.DefaultAddress)
	}
	s, err := introspect.Serve(context.Background(), introspect.Config{Source: fakeSource{}})
	if err != nil {
		t.Skipf("default port unavailable here: %v", err)
	}
	defer s.Shutdown(context.Background())
	if s.Addr() != introspect.DefaultAddress {
		t.Errorf("empty Address served on %s, want %s", s.Addr(), introspect.DefaultAddress)
	}
}

func TestMalformedAddressIsRejected(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "unix:", "[::1"} {
		s, err := introspect.Serve(context.Background(), introspect.Config{Address: addr, Source: fakeSource{}})
		if err == nil {
			s.Shutdown(context.Background())
			t.Errorf("Serve(%q) succeeded", addr)
		} else if errors.Is(err, introspect.ErrNotLoopback) {
			t.Errorf("Serve(%q): %v; a malformed address is not a loopback question", addr, err)
		}
	}
}

func TestNilSourceIsRejected(t *testing.T) {
	if _, err := introspect.Serve(context.Background(), introspect.Config{Address: "127.0.0.1:0"}); err == nil {
		t.Error("Serve without a Source succeeded")
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "introspect.sock")
	s, err := introspect.Serve(context.Background(), introspect.Config{Address: "unix:" + path, Source: fakeSource{}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "unix:"+path {
		t.Errorf("Addr %q, want unix:%s", s.Addr(), path)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Type() != os.ModeSocket || info.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", info.Mode())
	}
	resp, body := do(t, unixClient(path), http.MethodGet, "http://introspect/v1/ipamd-env-settings")
	if resp.StatusCode != http.StatusOK || string(body) != indented(t, wantSettings) {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left after Shutdown: %v", err)
	}
}

func TestUnixSocketReplacesStaleSocketOnly(t *testing.T) {
	dir := t.TempDir()

	// A socket left by a dead process: the file stays, nobody listens.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	serve(t, introspect.Config{Address: "unix:" + stale})

	// A socket someone still serves on is not taken over.
	live := filepath.Join(dir, "live.sock")
	serve(t, introspect.Config{Address: "unix:" + live})
	if s, err := introspect.Serve(context.Background(), introspect.Config{Address: "unix:" + live, Source: fakeSource{}}); err == nil {
		s.Shutdown(context.Background())
		t.Error("Serve took over a socket in use")
	}

	// A regular file is never deleted.
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := introspect.Serve(context.Background(), introspect.Config{Address: "unix:" + file, Source: fakeSource{}}); err == nil {
		s.Shutdown(context.Background())
		t.Error("Serve replaced a regular file")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("regular file changed: %q, %v", b, err)
	}
}

// refused reports whether nothing accepts connections at addr any more.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

func TestShutdownStopsServing(t *testing.T) {
	s, err := introspect.Serve(context.Background(), introspect.Config{Address: "127.0.0.1:0", Source: fakeSource{}})
	if err != nil {
		t.Fatal(err)
	}
	if refused(s.Addr()) {
		t.Fatal("not serving before Shutdown")
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !refused(s.Addr()) {
		t.Error("still accepting after Shutdown")
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestContextEndStopsServing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := introspect.Serve(ctx, introspect.Config{Address: "127.0.0.1:0", Source: fakeSource{}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for !refused(s.Addr()) {
		if time.Now().After(deadline) {
			t.Fatal("still accepting 5 s after the context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the context ended: %v", err)
	}
}
