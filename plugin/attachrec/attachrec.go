// Package attachrec is the node-local record of each attachment vpc-cni
// set up: written by ADD once the pod's network is built and before the
// result is printed, read by DEL as a source of what to tear down, and
// removed by the DEL (or GC) that tears the attachment down.
//
// It exists because every other source can be missing when a DEL comes:
// containerd's second DEL has no prevResult, a pod namespace may already
// be gone, and ipamd forgets a sandbox when it loses its checkpoint and
// keeps no record of a branch ENI's pod at all. The record depends on
// none of them.
//
// A record is a claim like any other source: DEL still lets the node
// decide what is a pod's (docs/architecture.md#ownership). The files are
// kept as internal/recorddir keeps records, like the release queue's (one
// file per attachment, written whole, 0600 in a 0700 directory, read
// strictly), but not synced (see Store.dir), and values no ADD writes are refused.
package attachrec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vpccni/vpccni/internal/recorddir"
	"github.com/vpccni/vpccni/ownership"
)

// Version is the record format's tag.
const Version = "vpccni-attachment/1"

// Subdir is the directory of the records under the netconf's stateDir.
const Subdir = "attachments"

// maxRecordBytes bounds one file; a bigger one is not a record ADD wrote.
const maxRecordBytes = 16 << 10

// maxIPs is the most addresses one attachment has (an IPv4 and an IPv6,
// with room to spare).
const maxIPs = 8

// maxLinkName is Linux's IFNAMSIZ less the NUL.
const maxLinkName = 15

// ErrNotFound is Load of an attachment that has no record.
var ErrNotFound = errors.New("no record of the attachment")

// IP is one of the attachment's addresses and the table its rules use.
type IP struct {
	Addr  netip.Addr `json:"addr"`
	Table int        `json:"table"`
}

// Record is what ADD built for one attachment.
type Record struct {
	Version      string `json:"version"`
	NetworkName  string `json:"networkName"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	PodNamespace string `json:"podNamespace"`
	PodName      string `json:"podName"`
	Netns        string `json:"netns,omitempty"`
	HostVeth     string `json:"hostVeth"`
	// HostVethIndex is the host veth's ifindex when ADD built it: a DEL
	// whose pod namespace is gone offers it to ipamd as the sandbox's
	// proof of its veth (release-by-owner).
	HostVethIndex int  `json:"hostVethIndex,omitempty"`
	IPs           []IP `json:"ips"`
	// Device is the ENI's device number (-1 for a branch ENI's pod).
	Device int  `json:"device"`
	VlanID int  `json:"vlanID,omitempty"`
	Strict bool `json:"strict,omitempty"`
}

// Validate refuses what no ADD writes: a record that fails it is not
// trusted for anything.
func (r Record) Validate() error {
	switch {
	case r.Version != Version:
		return fmt.Errorf("version %q, want %q", r.Version, Version)
	case r.NetworkName == "" || r.ContainerID == "" || r.IfName == "":
		return errors.New("networkName, containerID and ifName are required")
	case r.PodNamespace == "" || r.PodName == "":
		return errors.New("podNamespace and podName are required")
	case r.HostVeth == "" || len(r.HostVeth) > maxLinkName || len(r.IfName) > maxLinkName:
		return fmt.Errorf("link names %q and %q are not 1 to %d bytes", r.HostVeth, r.IfName, maxLinkName)
	case r.HostVethIndex < 0:
		return fmt.Errorf("hostVethIndex %d is negative", r.HostVethIndex)
	case r.Netns != "" && (!filepath.IsAbs(r.Netns) || filepath.Clean(r.Netns) != r.Netns):
		return fmt.Errorf("netns %q is not a clean absolute path", r.Netns)
	case len(r.IPs) == 0 || len(r.IPs) > maxIPs:
		return fmt.Errorf("%d addresses, want 1 to %d", len(r.IPs), maxIPs)
	case r.VlanID != 0 && !ownership.ValidVlan(r.VlanID):
		return fmt.Errorf("VLAN %d is not 1 to 4094 with a pod table", r.VlanID)
	case r.VlanID == 0 && r.Strict:
		return errors.New("strict without a VLAN")
	case r.VlanID != 0 && r.Device != -1, r.VlanID == 0 && r.Device < 0:
		return fmt.Errorf("device %d with VLAN %d", r.Device, r.VlanID)
	}
	for _, ip := range r.IPs {
		switch {
		case !ownership.ValidPodAddr(ip.Addr) || ip.Addr.Zone() != "":
			return fmt.Errorf("address %q cannot be a pod's", ip.Addr)
		case !ownership.IsPodTable(ip.Table):
			return fmt.Errorf("table %d of %s is not a pod table", ip.Table, ip.Addr)
		case r.VlanID != 0 && ip.Table != ownership.VlanTable(r.VlanID):
			return fmt.Errorf("table %d of %s is not VLAN %d's", ip.Table, ip.Addr, r.VlanID)
		}
	}
	return nil
}

// Name is the file name of an attachment's record: a retried ADD replaces
// its own record, and the names say nothing an operator needs a shell to
// quote.
func Name(networkName, containerID, ifName string) string {
	h := sha256.Sum256([]byte(networkName + "\x00" + containerID + "\x00" + ifName))
	return hex.EncodeToString(h[:16]) + ".json"
}

// Name is r's file name.
func (r Record) Name() string { return Name(r.NetworkName, r.ContainerID, r.IfName) }

// DirFor is the records' directory under a netconf's stateDir.
func DirFor(stateDir string) string { return filepath.Join(stateDir, Subdir) }

// Store is a records directory.
type Store struct {
	Dir string
}

// BadRecordError is a file of the store that is not a valid record.
type BadRecordError struct {
	Path string
	Err  error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("attachment record %s is not valid: %v", e.Path, e.Err)
}
func (e *BadRecordError) Unwrap() error { return e.Err }

// A record is not synced (a millisecond of every ADD on a disk): a
// written record is in the page cache, where every later DEL reads it
// whatever becomes of the ADD that wrote it, and only a crash of the
// machine loses it. After that reboot no pod namespace, veth, route or
// rule of the node is left and ipamd's checkpoint (under /var/run) is
// gone too, so a DEL has nothing a record could name; libcni's own result
// cache is not synced either.
func (s Store) dir() recorddir.Dir { return recorddir.Dir{Path: s.Dir, MaxBytes: maxRecordBytes} }

// Write stores r whole, replacing the attachment's earlier record.
func (s Store) Write(r Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("attachment record: %w", err)
	}
	if err := s.dir().Write(r.Name(), r); err != nil {
		return fmt.Errorf("attachment records: %w", err)
	}
	return nil
}

// Load reads the attachment's record: ErrNotFound when there is none, a
// *BadRecordError when the file is there but is not a valid record of
// that attachment (another attachment's record under its name counts).
func (s Store) Load(networkName, containerID, ifName string) (Record, error) {
	name := Name(networkName, containerID, ifName)
	r, err := s.read(name)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, ErrNotFound
	}
	if err == nil && (r.NetworkName != networkName || r.ContainerID != containerID || r.IfName != ifName) {
		err = fmt.Errorf("it is the record of %s/%s/%s", r.NetworkName, r.ContainerID, r.IfName)
	}
	if err != nil {
		return Record{}, &BadRecordError{Path: filepath.Join(s.Dir, name), Err: err}
	}
	return r, nil
}

// Remove deletes the attachment's record, if there is one.
func (s Store) Remove(networkName, containerID, ifName string) error {
	if err := s.dir().Remove(Name(networkName, containerID, ifName)); err != nil {
		return fmt.Errorf("attachment records: %w", err)
	}
	return nil
}

// SetAside renames a bad record (name as Load or List found it) so that
// it is never read again and stays for an operator.
func (s Store) SetAside(name string) error {
	if err := s.dir().SetAside(name); err != nil {
		return fmt.Errorf("attachment records: %w", err)
	}
	return nil
}

// Entry is one record file as List read it.
type Entry struct {
	Name   string
	Record Record
}

// List reads every record, in name order (GC). A file that is not a valid
// record is returned as a *BadRecordError among errs and the rest are
// still read; a missing directory holds no records.
func (s Store) List() (entries []Entry, errs []error) {
	names, err := s.dir().Names()
	if err != nil {
		return nil, []error{fmt.Errorf("attachment records: %w", err)}
	}
	for _, n := range names {
		r, err := s.read(n)
		if err == nil && r.Name() != n {
			err = fmt.Errorf("its attachment's record is named %s", r.Name())
		}
		if err != nil {
			errs = append(errs, &BadRecordError{Path: filepath.Join(s.Dir, n), Err: err})
			continue
		}
		entries = append(entries, Entry{Name: n, Record: r})
	}
	return entries, errs
}

func (s Store) read(name string) (Record, error) {
	var r Record
	if err := s.dir().Read(name, &r); err != nil {
		return r, err
	}
	return r, r.Validate()
}
