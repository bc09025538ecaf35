package checkpoint

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const referenceFile = "testdata/reference-v1.json"

// referenceContent is what testdata/reference-v1.json holds: an IPv4 pod
// with full metadata, an IPv6 pod without interfacesCount, and an IPv4
// allocation with empty metadata (which the reference writes as {}).
var referenceContent = File{
	Version: Version,
	Allocations: []Allocation{
		{
			NetworkName:         "aws-cni",
			ContainerID:         "5f3a9c2e1b7d4a608e2f9c1d3b5a7e9f0c2d4b6a8e0f1a3c5b7d9e1f3a5c7b9d",
			IfName:              "eth0",
			IPv4:                "10.0.1.15",
			AllocationTimestamp: 1719912345123456789,
			Metadata:            Metadata{K8SPodNamespace: "default", K8SPodName: "nginx-7c5ddbdf54-2xkqz", InterfacesCount: 1},
		},
		{
			NetworkName:         "aws-cni",
			ContainerID:         "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
			IfName:              "eth0",
			IPv6:                "2600:1f14:abc:de00:8b1f::3",
			AllocationTimestamp: 1719912399000000001,
			Metadata:            Metadata{K8SPodNamespace: "kube-system", K8SPodName: "coredns-5d78c9869d-7xq2p"},
		},
		{
			NetworkName:         "aws-cni",
			ContainerID:         "0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d",
			IfName:              "eth0",
			IPv4:                "10.0.1.16",
			AllocationTimestamp: 1719912400500000000,
		},
	},
}

// writeTestFile writes data to a fresh file and returns its path.
func writeTestFile(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ipam.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadReferenceFile(t *testing.T) {
	got, err := Read(referenceFile)
	if err != nil {
		t.Fatalf("Read(%s): %v", referenceFile, err)
	}
	if !reflect.DeepEqual(*got, referenceContent) {
		t.Fatalf("Read(%s) =\n%+v\nwant\n%+v", referenceFile, *got, referenceContent)
	}
	wantAddrs := []netip.Addr{
		netip.MustParseAddr("10.0.1.15"),
		netip.MustParseAddr("2600:1f14:abc:de00:8b1f::3"),
		netip.MustParseAddr("10.0.1.16"),
	}
	for i, a := range got.Allocations {
		ip, err := a.Addr()
		if err != nil || ip != wantAddrs[i] {
			t.Errorf("allocations[%d].Addr() = %v, %v; want %v", i, ip, err, wantAddrs[i])
		}
	}
	if want := time.Date(2024, 7, 2, 9, 25, 45, 123456789, time.UTC); !got.Allocations[0].Time().Equal(want) {
		t.Errorf("allocations[0].Time() = %v, want %v", got.Allocations[0].Time(), want)
	}
}

// What we write must be what the reference writes, byte for byte, so the
// reference's ipamd (and anything diffing the file) sees no change.
func TestWriteFileReproducesReferenceBytes(t *testing.T) {
	want, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ipam.json")
	if err := WriteFile(path, referenceContent); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("WriteFile wrote\n%s\nwant (testdata)\n%s", got, want)
	}
}

func TestReadMissingFileIsErrNotExist(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{
		filepath.Join(dir, "ipam.json"),
		filepath.Join(dir, "aws-node", "ipam.json"), // /var/run cleared by a reboot
	} {
		f, err := Read(path)
		if f != nil || !errors.Is(err, ErrNotExist) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Read(%s) = %v, %v; want nil and ErrNotExist wrapping fs.ErrNotExist", path, f, err)
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) {
			t.Errorf("Read(%s) error %v also matches ErrCorrupt or ErrVersion", path, err)
		}
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Errorf("Read(%s) error %q does not name the file", path, err)
		}
	}
}

func TestReadUnreadableIsNeitherMissingNorCorrupt(t *testing.T) {
	dir := t.TempDir() // a directory where the file should be
	_, err := Read(dir)
	if err == nil || errors.Is(err, ErrNotExist) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) {
		t.Fatalf("Read(directory) = %v; want a plain I/O error", err)
	}
}

// alloc is a valid allocation line in the reference's shape with one field
// replaced by the caller.
func alloc(fields string) string {
	return `{"networkName":"aws-cni","containerID":"c1","ifName":"eth0",` + fields + `,"allocationTimestamp":1,"metadata":{}}`
}

func file(allocs ...string) string {
	return `{"version":"vpc-cni-ipam/1","allocations":[` + strings.Join(allocs, ",") + `]}`
}

func TestReadCorrupt(t *testing.T) {
	reference, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	truncated := string(reference[:len(reference)/2])
	typeErr := `{"version":"vpc-cni-ipam/1","allocations":[{"networkName":"aws-cni","containerID":"c1","ifName":"eth0","ipv4":"10.0.0.1","allocationTimestamp":"soon"}]}`

	tests := []struct {
		name       string
		data       string
		wantOffset int64
		wantReason string
	}{
		{"empty file", "", 0, "empty file"},
		{"truncated mid-write", truncated, int64(len(truncated)), "truncated: unexpected end of JSON input"},
		{"whitespace only", "\n", 1, "truncated: unexpected end of JSON input"},
		{"not JSON", "hello", 1, "invalid character 'h'"},
		{"trailing garbage", file() + "x", int64(len(file()) + 1), "invalid character 'x' after top-level value"},
		{"wrong field type", typeErr, int64(strings.Index(typeErr, `"soon"`) + len(`"soon"`)),
			`allocations.allocationTimestamp: JSON string where int64 was expected`},
		{"top level is an array", `[]`, 1, "top level: JSON array where checkpoint.File was expected"},
		{"allocations is an object", `{"version":"vpc-cni-ipam/1","allocations":{}}`, 43, "allocations: JSON object where []checkpoint.Allocation was expected"},
		{"top level null", `null`, -1, "no version field"},
		{"no version", `{"allocations":[]}`, -1, "no version field"},
		{"empty networkName", file(`{"networkName":"","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1"}`), -1, "allocations[0]: networkName is empty"},
		{"empty containerID", file(`{"networkName":"n","containerID":"","ifName":"eth0","ipv4":"10.0.0.1"}`), -1, "allocations[0]: containerID is empty"},
		{"empty ifName", file(`{"networkName":"n","containerID":"c","ifName":"","ipv4":"10.0.0.1"}`), -1, "allocations[0]: ifName is empty"},
		{"no address", file(alloc(`"metadata":{}`)), -1, "allocations[0]: neither ipv4 nor ipv6 is set"},
		{"both addresses", file(alloc(`"ipv4":"10.0.0.1","ipv6":"2600::1"`)), -1, `allocations[0]: both ipv4 "10.0.0.1" and ipv6 "2600::1" are set`},
		{"unparsable ipv4", file(alloc(`"ipv4":"10.0.0.300"`)), -1, `allocations[0]: ipv4 "10.0.0.300": `},
		{"ipv6 in ipv4", file(alloc(`"ipv4":"2600::1"`)), -1, `allocations[0]: ipv4 "2600::1" is not an IPv4 address`},
		{"ipv4 in ipv6", file(alloc(`"ipv6":"10.0.0.1"`)), -1, `allocations[0]: ipv6 "10.0.0.1" is not an IPv6 address`},
		{"ipv4-mapped ipv6", file(alloc(`"ipv6":"::ffff:10.0.0.1"`)), -1, `allocations[0]: ipv6 "::ffff:10.0.0.1" is an IPv4-mapped IPv6 address`},
		{"zone", file(alloc(`"ipv6":"fe80::1%eth0"`)), -1, `allocations[0]: ipv6 "fe80::1%eth0" has a zone`},
		{"negative interfacesCount", file(`{"networkName":"n","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1","metadata":{"interfacesCount":-1}}`), -1,
			"allocations[0]: metadata.interfacesCount is negative (-1)"},
		{"duplicate key", file(
			`{"networkName":"n","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1"}`,
			`{"networkName":"n","containerID":"d","ifName":"eth0","ipv4":"10.0.0.2"}`,
			`{"networkName":"n","containerID":"c","ifName":"eth0","ipv4":"10.0.0.3"}`), -1,
			`allocations[2]: key (networkName "n", containerID "c", ifName "eth0") is also allocations[0]'s`},
		{"duplicate address in another spelling", file(
			`{"networkName":"n","containerID":"c","ifName":"eth0","ipv6":"2600:1f14::1"}`,
			`{"networkName":"n","containerID":"d","ifName":"eth0","ipv6":"2600:1f14:0:0::1"}`), -1,
			`allocations[1]: address 2600:1f14::1 is also allocations[0]'s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTestFile(t, tt.data)
			f, err := Read(path)
			if f != nil {
				t.Errorf("Read returned a file: %+v", *f)
			}
			var corrupt *CorruptError
			if !errors.As(err, &corrupt) {
				t.Fatalf("Read error = %v (%T), want *CorruptError", err, err)
			}
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) || errors.Is(err, ErrNotExist) {
				t.Errorf("errors.Is: ErrCorrupt %v, ErrVersion %v, ErrNotExist %v; want only ErrCorrupt",
					errors.Is(err, ErrCorrupt), errors.Is(err, ErrVersion), errors.Is(err, ErrNotExist))
			}
			if corrupt.Path != path {
				t.Errorf("Path = %q, want %q", corrupt.Path, path)
			}
			if corrupt.Offset != tt.wantOffset {
				t.Errorf("Offset = %d, want %d (reason %q)", corrupt.Offset, tt.wantOffset, corrupt.Reason)
			}
			if !strings.Contains(corrupt.Reason, tt.wantReason) {
				t.Errorf("Reason = %q, want it to contain %q", corrupt.Reason, tt.wantReason)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("message %q does not name the file", err)
			}
		})
	}
}

func TestCorruptErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		err  *CorruptError
		want string
	}{
		{&CorruptError{Path: "/x", Offset: 17, Reason: "invalid character 'h'"}, "checkpoint /x: corrupt at byte 17: invalid character 'h'"},
		{&CorruptError{Path: "/x", Offset: -1, Reason: "allocations[2]: ifName is empty"}, "checkpoint /x: corrupt: allocations[2]: ifName is empty"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestReadOtherVersion(t *testing.T) {
	path := writeTestFile(t, `{"version":"vpc-cni-ipam/2","allocations":[{"something":"new"}]}`)
	f, err := Read(path)
	var versionErr *VersionError
	if f != nil || !errors.As(err, &versionErr) {
		t.Fatalf("Read = %v, %v (%T); want *VersionError", f, err, err)
	}
	if versionErr.Found != "vpc-cni-ipam/2" || versionErr.Path != path {
		t.Errorf("VersionError = %+v", *versionErr)
	}
	if want := `checkpoint ` + path + `: version "vpc-cni-ipam/2" is not vpc-cni-ipam/1`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
		t.Errorf("errors.Is: ErrVersion %v, ErrCorrupt %v; want only ErrVersion", errors.Is(err, ErrVersion), errors.Is(err, ErrCorrupt))
	}
}

// A newer writer of the same version may add fields; dropping the whole
// checkpoint over them would lose every pod's address.
func TestReadIgnoresUnknownFields(t *testing.T) {
	path := writeTestFile(t, `{"version":"vpc-cni-ipam/1","writer":"future","allocations":[`+
		`{"networkName":"aws-cni","containerID":"c1","ifName":"eth0","ipv4":"10.0.0.1","allocationTimestamp":5,`+
		`"deviceNumber":2,"metadata":{"k8sPodNamespace":"ns","k8sPodName":"p","interfacesCount":2,"labels":{"a":"b"}}},`+
		`{"networkName":"aws-cni","containerID":"c2","ifName":"eth0","ipv4":"10.0.0.2"}]}`)
	f, err := Read(path)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := []Allocation{
		{NetworkName: "aws-cni", ContainerID: "c1", IfName: "eth0", IPv4: "10.0.0.1", AllocationTimestamp: 5,
			Metadata: Metadata{K8SPodNamespace: "ns", K8SPodName: "p", InterfacesCount: 2}},
		{NetworkName: "aws-cni", ContainerID: "c2", IfName: "eth0", IPv4: "10.0.0.2"}, // no metadata key at all
	}
	if !reflect.DeepEqual(f.Allocations, want) {
		t.Fatalf("Allocations = %+v, want %+v", f.Allocations, want)
	}
}

func TestReadNoAllocations(t *testing.T) {
	for _, data := range []string{
		`{"version":"vpc-cni-ipam/1","allocations":[]}`,
		`{"version":"vpc-cni-ipam/1","allocations":null}`,
		`{"version":"vpc-cni-ipam/1"}`,
	} {
		f, err := Read(writeTestFile(t, data))
		if err != nil || len(f.Allocations) != 0 || f.Version != Version {
			t.Errorf("Read(%s) = %+v, %v; want an empty checkpoint", data, f, err)
		}
	}
}

func TestAllocationAddr(t *testing.T) {
	for _, tt := range []struct {
		a       Allocation
		want    string // "" when an error is expected
		wantErr string
	}{
		{Allocation{IPv4: "10.0.1.15"}, "10.0.1.15", ""},
		{Allocation{IPv6: "2600:1f14::3"}, "2600:1f14::3", ""},
		{Allocation{}, "", "neither ipv4 nor ipv6 is set"},
		{Allocation{IPv4: "10.0.0.1", IPv6: "::2"}, "", "both"},
		{Allocation{IPv4: "010.0.0.1"}, "", `ipv4 "010.0.0.1": `},
		{Allocation{IPv4: "::ffff:10.0.0.1"}, "", "IPv4-mapped"},
		{Allocation{IPv6: "2600::1%eth0"}, "", "has a zone"},
	} {
		ip, err := tt.a.Addr()
		switch {
		case tt.wantErr == "" && (err != nil || ip.String() != tt.want):
			t.Errorf("%+v.Addr() = %v, %v; want %s", tt.a, ip, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.Addr() = %v, %v; want error containing %q", tt.a, ip, err, tt.wantErr)
		}
	}
}

func TestAllocationTime(t *testing.T) {
	want := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	a := Allocation{AllocationTimestamp: want.UnixNano()}
	if !a.Time().Equal(want) {
		t.Fatalf("Time() = %v, want %v", a.Time(), want)
	}
}

func TestPathFromEnv(t *testing.T) {
	t.Setenv(EnvPath, "")
	if got := PathFromEnv(); got != DefaultPath {
		t.Errorf("unset: PathFromEnv() = %q, want %q", got, DefaultPath)
	}
	t.Setenv(EnvPath, "/tmp/state/ipam.json")
	if got := PathFromEnv(); got != "/tmp/state/ipam.json" {
		t.Errorf("set: PathFromEnv() = %q, want the variable's value", got)
	}
}

// TestReadUnvalidated: a file Read refuses for what its allocations say
// (an address given twice) is loaded as written; a file that is not a
// checkpoint of this version is refused exactly as Read refuses it.
func TestReadUnvalidated(t *testing.T) {
	double := file(
		`{"networkName":"n","containerID":"c","ifName":"eth0","ipv4":"10.0.0.1"}`,
		`{"networkName":"n","containerID":"d","ifName":"eth0","ipv4":"10.0.0.1"}`)
	f, err := ReadUnvalidated(writeTestFile(t, double))
	if err != nil {
		t.Fatalf("address given twice: %v", err)
	}
	if len(f.Allocations) != 2 || f.Allocations[0].ContainerID != "c" || f.Allocations[1].ContainerID != "d" {
		t.Fatalf("allocations = %+v, want both as written", f.Allocations)
	}
	if _, err := Read(writeTestFile(t, double)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read of the same file = %v, want ErrCorrupt", err)
	}

	for name, data := range map[string]string{
		"truncated":     file()[:10],
		"no version":    `{"allocations":[]}`,
		"other version": `{"version":"vpc-cni-ipam/9","allocations":[]}`,
	} {
		path := writeTestFile(t, data)
		_, want := Read(path)
		got, err := ReadUnvalidated(path)
		if got != nil || err == nil || err.Error() != want.Error() {
			t.Errorf("%s: ReadUnvalidated = %v, %v; want Read's error %v", name, got, err, want)
		}
	}
	if _, err := ReadUnvalidated(filepath.Join(t.TempDir(), "none")); !errors.Is(err, ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}
