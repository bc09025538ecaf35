// Package checkpoint is ipamd's on-disk state: the addresses assigned to
// pods, so that an aws-node restart does not hand a running pod's address
// to a new one. The format is the reference's "vpc-cni-ipam/1" JSON, byte
// for byte in field names and omissions, so a node can move between this
// ipamd and the reference's in either direction without losing its pods.
//
// The file lives on a hostPath (/var/run/aws-node) that survives an
// aws-node restart but is normally cleared by a reboot; a missing file
// therefore means a fresh node (ErrNotExist), which is different from a
// file that exists but cannot be trusted (ErrCorrupt) or was written by a
// newer ipamd (ErrVersion).
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"time"
)

// Version is the only format this package reads and writes.
const Version = "vpc-cni-ipam/1"

// DefaultPath is where the reference keeps the checkpoint.
const DefaultPath = "/var/run/aws-node/ipam.json"

// EnvPath names the environment variable that overrides DefaultPath.
const EnvPath = "AWS_VPC_K8S_CNI_BACKING_STORE"

// PathFromEnv returns the checkpoint path ipamd should use: EnvPath when it
// is set and non-empty, DefaultPath otherwise.
func PathFromEnv() string {
	if p := os.Getenv(EnvPath); p != "" {
		return p
	}
	return DefaultPath
}

// File is the whole checkpoint.
type File struct {
	Version     string       `json:"version"`
	Allocations []Allocation `json:"allocations"`
}

// Allocation is one assigned address. The first three fields are the CNI
// attachment key; exactly one of IPv4 and IPv6 is set.
type Allocation struct {
	NetworkName string `json:"networkName"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	IPv4        string `json:"ipv4,omitempty"`
	IPv6        string `json:"ipv6,omitempty"`
	// AllocationTimestamp is when the address was assigned, in Unix
	// nanoseconds.
	AllocationTimestamp int64    `json:"allocationTimestamp"`
	Metadata            Metadata `json:"metadata"`
	// Netns, HostVethIndex and Releasing are vpccni's only additions to
	// the format, all omitted when empty, and all skipped as unknown
	// fields by the reference's reader (a file moves between the two
	// either way; the reference keeps a releasing allocation as a live one
	// until its pod's veth is gone). Netns is the pod namespace the
	// sandbox's ADD named (GC finds the sandbox's host veth through it);
	// HostVethIndex, for an allocation recovered from the kernel, the
	// ifindex of the host veth it was recovered from (a DEL must name it
	// to release the address), and for a releasing one the host veth its
	// DEL handed to ipamd; Releasing, that the address goes back to the
	// pool once that veth is gone.
	Netns         string `json:"netns,omitempty"`
	HostVethIndex int    `json:"hostVethIndex,omitempty"`
	Releasing     bool   `json:"releasing,omitempty"`
}

// Metadata describes the pod holding an allocation. The reference keeps an
// allocation without namespace and name on restart without checking for
// the pod's veth, so empty is meaningful.
type Metadata struct {
	K8SPodNamespace string `json:"k8sPodNamespace,omitempty"`
	K8SPodName      string `json:"k8sPodName,omitempty"`
	InterfacesCount int    `json:"interfacesCount,omitempty"`
}

// Key is the attachment key of an allocation, which the CNI spec makes
// unique: (network name, container ID, interface name).
type Key struct {
	NetworkName, ContainerID, IfName string
}

// Key returns the allocation's attachment key.
func (a Allocation) Key() Key {
	return Key{NetworkName: a.NetworkName, ContainerID: a.ContainerID, IfName: a.IfName}
}

// Addr parses the allocation's address. It fails unless exactly one of IPv4
// and IPv6 is set and it is a plain address of that family (no zone, no
// IPv4-mapped IPv6 address), the same rule Read applies.
func (a Allocation) Addr() (netip.Addr, error) {
	switch {
	case a.IPv4 != "" && a.IPv6 != "":
		return netip.Addr{}, fmt.Errorf("both ipv4 %q and ipv6 %q are set", a.IPv4, a.IPv6)
	case a.IPv4 != "":
		return parseAddr("ipv4", a.IPv4)
	case a.IPv6 != "":
		return parseAddr("ipv6", a.IPv6)
	}
	return netip.Addr{}, errors.New("neither ipv4 nor ipv6 is set")
}

// parseAddr parses the text of field "ipv4" or "ipv6" and checks that it is
// of that family.
func parseAddr(field, text string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q: %w", field, text, err)
	}
	switch {
	case ip.Zone() != "":
		// A zone names one host's interface; the reference's parser
		// rejects it and no pod address has one.
		return netip.Addr{}, fmt.Errorf("%s %q has a zone", field, text)
	case ip.Is4In6():
		// Would let one IPv4 address hide twice, once per field.
		return netip.Addr{}, fmt.Errorf("%s %q is an IPv4-mapped IPv6 address", field, text)
	case field == "ipv4" && !ip.Is4():
		return netip.Addr{}, fmt.Errorf("ipv4 %q is not an IPv4 address", text)
	case field == "ipv6" && !ip.Is6():
		return netip.Addr{}, fmt.Errorf("ipv6 %q is not an IPv6 address", text)
	}
	return ip, nil
}

// Time returns AllocationTimestamp as a time.
func (a Allocation) Time() time.Time { return time.Unix(0, a.AllocationTimestamp) }

// ErrNotExist means there is no checkpoint: a fresh node, or one whose
// /var/run was cleared by a reboot. It wraps fs.ErrNotExist.
var ErrNotExist = fmt.Errorf("no checkpoint: %w", fs.ErrNotExist)

// ErrCorrupt matches (errors.Is) every *CorruptError.
var ErrCorrupt = errors.New("checkpoint is corrupt")

// ErrVersion matches (errors.Is) every *VersionError.
var ErrVersion = errors.New("checkpoint version is not supported")

// CorruptError is a checkpoint that exists but cannot be trusted: not JSON,
// truncated, a field of the wrong type, or allocations that contradict
// each other.
type CorruptError struct {
	Path string
	// Offset is the byte offset in the file where decoding failed, or -1
	// when the JSON is well formed and an allocation's content is wrong
	// (Reason then names the allocation's index and field).
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("checkpoint %s: corrupt: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("checkpoint %s: corrupt at byte %d: %s", e.Path, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// VersionError is a well-formed checkpoint of another format version,
// typically one written by a newer ipamd. The reference fails ipamd's start
// on it rather than guessing, and so should callers.
type VersionError struct {
	Path  string
	Found string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("checkpoint %s: version %q is not %s", e.Path, e.Found, Version)
}

// Is makes errors.Is(err, ErrVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// Read loads and validates the checkpoint at path. It returns an error
// matching ErrNotExist when there is no file, a *CorruptError or a
// *VersionError when the file cannot be used, and otherwise a File whose
// allocations all have a full key, one address of the family its field
// says, and no key or address twice. Unknown fields are ignored so that a
// file from a newer writer of the same version still reads.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", path, ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return decode(path, data)
}

// ReadUnvalidated loads a checkpoint of this version without Read's checks
// of its allocations, for a reader that judges them itself: the node audit
// reports an address given twice as a finding instead of refusing the
// file. ipamd's restore must use Read.
func ReadUnvalidated(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", path, ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	f, err := decode(path, data)
	var ce *CorruptError
	if errors.As(err, &ce) && ce.Offset < 0 && f == nil {
		var loose File
		if json.Unmarshal(data, &loose) == nil && loose.Version == Version {
			return &loose, nil
		}
	}
	return f, err
}

// decode is Read after the I/O; path only names the file in errors.
func decode(path string, data []byte) (*File, error) {
	if len(data) == 0 {
		// The result of a crash between create and write by a writer that
		// is not atomic; json would only say "unexpected end".
		return nil, &CorruptError{Path: path, Offset: 0, Reason: "empty file"}
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonCorruption(path, data, err)
	}
	if f.Version == "" {
		// Also the result of a top-level null, which json accepts.
		return nil, &CorruptError{Path: path, Offset: -1, Reason: "no version field"}
	}
	if f.Version != Version {
		return nil, &VersionError{Path: path, Found: f.Version}
	}
	if err := validateAllocations(f.Allocations); err != nil {
		return nil, &CorruptError{Path: path, Offset: -1, Reason: err.Error()}
	}
	return &f, nil
}

// jsonCorruption turns a json.Unmarshal error into a *CorruptError that
// says where and what.
func jsonCorruption(path string, data []byte, err error) *CorruptError {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		reason := syntaxErr.Error()
		if syntaxErr.Offset >= int64(len(data)) {
			reason = "truncated: " + reason
		}
		return &CorruptError{Path: path, Offset: syntaxErr.Offset, Reason: reason}
	case errors.As(err, &typeErr):
		where := typeErr.Field
		if where == "" {
			where = "top level"
		}
		return &CorruptError{Path: path, Offset: typeErr.Offset,
			Reason: fmt.Sprintf("%s: JSON %s where %s was expected", where, typeErr.Value, typeErr.Type)}
	}
	// Any other decoder failure still means the bytes are unusable; keep
	// its text, the position is unknown.
	return &CorruptError{Path: path, Offset: -1, Reason: err.Error()}
}

// validateAllocations checks what Read promises about allocations; the
// error names the allocation by index and the offending field.
func validateAllocations(allocs []Allocation) error {
	keys := make(map[Key]int, len(allocs))
	addrs := make(map[netip.Addr]int, len(allocs))
	for i, a := range allocs {
		switch {
		case a.NetworkName == "":
			return fmt.Errorf("allocations[%d]: networkName is empty", i)
		case a.ContainerID == "":
			return fmt.Errorf("allocations[%d]: containerID is empty", i)
		case a.IfName == "":
			return fmt.Errorf("allocations[%d]: ifName is empty", i)
		case a.Metadata.InterfacesCount < 0:
			return fmt.Errorf("allocations[%d]: metadata.interfacesCount is negative (%d)", i, a.Metadata.InterfacesCount)
		case a.HostVethIndex < 0:
			return fmt.Errorf("allocations[%d]: hostVethIndex is negative (%d)", i, a.HostVethIndex)
		case a.Releasing && a.HostVethIndex == 0:
			return fmt.Errorf("allocations[%d]: releasing names no host veth (hostVethIndex 0)", i)
		}
		ip, err := a.Addr()
		if err != nil {
			return fmt.Errorf("allocations[%d]: %w", i, err)
		}
		if first, dup := keys[a.Key()]; dup {
			return fmt.Errorf("allocations[%d]: key (networkName %q, containerID %q, ifName %q) is also allocations[%d]'s",
				i, a.NetworkName, a.ContainerID, a.IfName, first)
		}
		keys[a.Key()] = i
		if first, dup := addrs[ip]; dup {
			return fmt.Errorf("allocations[%d]: address %s is also allocations[%d]'s", i, ip, first)
		}
		addrs[ip] = i
	}
	return nil
}
