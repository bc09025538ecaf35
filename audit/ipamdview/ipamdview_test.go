package ipamdview

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// body is a /v1/enis answer of the shape ipamd serves: the primary ENI with
// two secondary addresses (one held, one cooling), a secondary ENI without
// RouteTableID (older bodies) carrying a delegated prefix with one held
// address of a container-naming key, and an IPv6 prefix.
const body = `{"0":{"TotalIPs":18,"AssignedIPs":2,"ENIs":{
 "eni-a":{"ID":"eni-a","IsPrimary":true,"DeviceNumber":0,"RouteTableID":254,"IsTrunk":false,
  "AvailableIPv4Cidrs":{
   "10.0.1.10/32":{"Cidr":{"IP":"10.0.1.10","Mask":"/////w=="},"IsPrefix":false,"IPAddresses":{
     "10.0.1.10":{"Address":"10.0.1.10","IPAMKey":{"networkName":"aws-cni","containerID":"","ifName":""},
      "IPAMMetadata":{"k8sPodNamespace":"default","k8sPodName":"web"},"AssignedTime":"2026-12-01T10:00:00Z","UnassignedTime":"0001-01-01T00:00:00Z"}}},
   "10.0.1.11/32":{"IPAddresses":{
     "10.0.1.11":{"Address":"10.0.1.11","IPAMKey":{"networkName":"","containerID":"","ifName":""},"IPAMMetadata":{},
      "AssignedTime":"0001-01-01T00:00:00Z","UnassignedTime":"2026-12-01T10:05:00Z"}}}},
  "IPv6Cidrs":{}},
 "eni-b":{"ID":"eni-b","DeviceNumber":2,"IsTrunk":true,
  "AvailableIPv4Cidrs":{"10.0.2.16/28":{"IsPrefix":true,"IPAddresses":{
     "10.0.2.17":{"IPAMKey":{"networkName":"aws-cni","containerID":"c0ffee","ifName":"eth0"},
      "IPAMMetadata":{"k8sPodNamespace":"kube-system","k8sPodName":"dns"}}}}},
  "IPv6Cidrs":{"2600:1f14::/80":{"IsPrefix":true,"IPAddresses":{}}}}}}}`

func TestParse(t *testing.T) {
	v, err := Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.ENIs) != 2 {
		t.Fatalf("ENIs = %+v", v.ENIs)
	}
	a, b := v.ENIs[0], v.ENIs[1]
	if a.ID != "eni-a" || a.Device != 0 || a.Table != 254 || !a.Primary || a.Trunk || len(a.Ranges) != 2 {
		t.Errorf("primary ENI = %+v", a)
	}
	if b.ID != "eni-b" || b.Device != 2 || b.Table != 3 || b.Primary || !b.Trunk {
		t.Errorf("secondary ENI = %+v, want table 3 (device 2 + 1) when the body has no RouteTableID", b)
	}
	want := map[string]Holder{
		"10.0.1.10": {ENI: "eni-a", Device: 0, Table: 254, PodNamespace: "default", PodName: "web"},
		"10.0.2.17": {ENI: "eni-b", Device: 2, Table: 3, ContainerID: "c0ffee", PodNamespace: "kube-system", PodName: "dns"},
	}
	if len(v.Held) != len(want) {
		t.Errorf("held = %+v, want %+v (the cooling 10.0.1.11 is not held)", v.Held, want)
	}
	for s, h := range want {
		if got := v.Held[netip.MustParseAddr(s)]; got != h {
			t.Errorf("held %s = %+v, want %+v", s, got, h)
		}
	}
	if len(v.Conflicts) != 0 {
		t.Errorf("conflicts = %v", v.Conflicts)
	}
	for s, in := range map[string]bool{"10.0.1.10": true, "10.0.1.11": true, "10.0.1.12": false, "10.0.2.31": true,
		"10.0.2.32": false, "2600:1f14::9": true, "2600:1f15::9": false} {
		if got := v.InPool(netip.MustParseAddr(s)); got != in {
			t.Errorf("InPool(%s) = %v, want %v", s, got, in)
		}
	}
}

// TestParseConflicts: an address ipamd lists on two ENIs is reported, and
// only its first listing's holder is kept.
func TestParseConflicts(t *testing.T) {
	twice := `{"0":{"ENIs":{
	 "eni-a":{"DeviceNumber":0,"AvailableIPv4Cidrs":{"10.0.1.10/32":{"IPAddresses":{"10.0.1.10":{"IPAMKey":{"networkName":"aws-cni"},"IPAMMetadata":{"k8sPodName":"one"}}}}}},
	 "eni-b":{"DeviceNumber":1,"AvailableIPv4Cidrs":{"10.0.1.0/28":{"IPAddresses":{"10.0.1.10":{"IPAMKey":{"networkName":"aws-cni"},"IPAMMetadata":{"k8sPodName":"two"}}}}}}}}}`
	v, err := Parse([]byte(twice))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Conflicts) != 1 || !strings.Contains(v.Conflicts[0], "10.0.1.10 on eni-a (10.0.1.10/32) and on eni-b (10.0.1.0/28)") {
		t.Errorf("conflicts = %q", v.Conflicts)
	}
	if h := v.Held[netip.MustParseAddr("10.0.1.10")]; h.PodName != "one" {
		t.Errorf("holder = %+v, want the first listing's", h)
	}
}

func TestParseRefusesWhatIsNotTheListing(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"not JSON":       {`<html>`, "not the ENI listing"},
		"null":           {`null`, "is null"},
		"an array":       {`[]`, "not the ENI listing"},
		"card key":       {`{"x":{"ENIs":{}}}`, `network card key "x" is not a number`},
		"ID mismatch":    {`{"0":{"ENIs":{"eni-a":{"ID":"eni-b"}}}}`, `ENI listed under "eni-a" says its ID is "eni-b"`},
		"device":         {`{"0":{"ENIs":{"eni-a":{"DeviceNumber":-1}}}}`, "device number -1"},
		"range":          {`{"0":{"ENIs":{"eni-a":{"AvailableIPv4Cidrs":{"10.0.1.300/32":{}}}}}}`, `range "10.0.1.300/32"`},
		"address":        {`{"0":{"ENIs":{"eni-a":{"AvailableIPv4Cidrs":{"10.0.1.0/28":{"IPAddresses":{"ten":{}}}}}}}}`, `address "ten"`},
		"outside range":  {`{"0":{"ENIs":{"eni-a":{"AvailableIPv4Cidrs":{"10.0.1.0/28":{"IPAddresses":{"10.0.1.99":{}}}}}}}}`, "does not contain it"},
		"wrong type":     {`{"0":{"ENIs":{"eni-a":{"DeviceNumber":"zero"}}}}`, "not the ENI listing"},
		"IPv6 wrong key": {`{"0":{"ENIs":{"eni-a":{"IPv6Cidrs":{"2600::/80":{"IPAddresses":{"2601::1":{}}}}}}}}`, "does not contain it"},
	} {
		v, err := Parse([]byte(c.body))
		if v != nil || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse = %+v, %v; want an error containing %q", name, v, err, c.want)
		}
	}
}

func TestFetchOverTCP(t *testing.T) {
	var method, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path = r.Method, r.URL.Path
		w.Write([]byte(body))
	}))
	defer srv.Close()
	v, err := Fetch(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet || path != Path || len(v.Held) != 2 {
		t.Errorf("%s %s, held %d", method, path, len(v.Held))
	}
}

func TestFetchOverUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "introspect.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	})}
	go srv.Serve(l)
	defer srv.Close()
	for _, addr := range []string{"unix:" + sock, "unix://" + sock} {
		if v, err := Fetch(context.Background(), addr); err != nil || len(v.ENIs) != 2 {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func TestFetchFailuresSayWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "ipamd is not ready\nsecond line", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer hang.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	for name, c := range map[string]struct {
		ctx        context.Context
		addr, want string
	}{
		"not ready":     {context.Background(), host(srv), "503 Service Unavailable: ipamd is not ready"},
		"hangs":         {ctx, host(hang), "context deadline exceeded"},
		"no port":       {context.Background(), "127.0.0.1", "want host:port"},
		"bad port":      {context.Background(), "127.0.0.1:http", `port "http" is not a number`},
		"relative unix": {context.Background(), "unix:run/x.sock", "needs an absolute path"},
		"no socket":     {context.Background(), "unix:" + filepath.Join(t.TempDir(), "none"), "no such file"},
	} {
		v, err := Fetch(c.ctx, c.addr)
		if v != nil || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Fetch = %+v, %v; want an error containing %q", name, v, err, c.want)
		}
	}
}
