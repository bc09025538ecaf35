// Package releasequeue is the node-local queue of addresses whose pods are
// torn down but whose release ipamd never heard: a DEL that could not
// reach ipamd (evicted, hung, restarting) appends a record, and ipamd
// drains the queue when it starts, before it serves, releasing each
// address only for the sandbox that still owns it.
//
// Without it such an address stays allocated until the reconciler judges
// the pod gone (45 s to 2 min), and "the pod is gone" is the judgement a
// same-name recreation fools. A record is evidence of one thing: this
// sandbox's DEL tore its pod down. It never frees an address another
// sandbox holds (ipamd applies the release-by-owner rule to it as to a
// DelNetwork).
//
// The queue is a directory next to ipamd's socket (DirFor), one file per
// attachment, kept as internal/recorddir keeps records (written whole,
// 0600, read strictly), so a crash leaves either the old record or the
// new one, never half of one. It is bounded (Max records): a full queue
// is an error the DEL reports, never a silent drop.
package releasequeue

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/vpccni/vpccni/internal/recorddir"
)

// Version is the record format's tag.
const Version = "vpccni-release/1"

// DefaultMax bounds the queue: more records than a node has pod addresses
// (an m5.24xlarge has 737) means something other than DELs writes there.
const DefaultMax = 1024

// maxRecordBytes bounds what one file may hold; a bigger file is not a
// record this package wrote.
const maxRecordBytes = 16 << 10

// maxIPs is the most addresses one attachment has (an IPv4 and an IPv6,
// with room to spare).
const maxIPs = 8

// ErrFull is Append on a queue that already holds Max records.
var ErrFull = errors.New("release queue is full")

// Record is one torn-down attachment whose addresses ipamd has not
// released. Its identity fields are a DelNetwork request's: ipamd releases
// with exactly what the DEL would have sent.
type Record struct {
	Version       string       `json:"version"`
	NetworkName   string       `json:"networkName"`
	ContainerID   string       `json:"containerID"`
	IfName        string       `json:"ifName"`
	PodNamespace  string       `json:"podNamespace,omitempty"`
	PodName       string       `json:"podName,omitempty"`
	HostVethIndex int          `json:"hostVethIndex,omitempty"`
	IPs           []netip.Addr `json:"ips"`
	// TornDownAt is when the DEL finished the teardown (for the logs).
	TornDownAt time.Time `json:"tornDownAt"`
}

// Validate checks what ipamd relies on.
func (r Record) Validate() error {
	switch {
	case r.Version != Version:
		return fmt.Errorf("version %q, want %q", r.Version, Version)
	case r.NetworkName == "" || r.ContainerID == "" || r.IfName == "":
		return errors.New("networkName, containerID and ifName are required")
	case len(r.IPs) == 0 || len(r.IPs) > maxIPs:
		return fmt.Errorf("%d addresses, want 1 to %d", len(r.IPs), maxIPs)
	case r.HostVethIndex < 0:
		return fmt.Errorf("hostVethIndex %d is negative", r.HostVethIndex)
	}
	for _, ip := range r.IPs {
		if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
			return fmt.Errorf("address %q is not a plain IPv4 or IPv6 address", ip)
		}
	}
	return nil
}

// Name is the record's file name: one per attachment, so a retried DEL
// replaces its own record instead of adding one.
func (r Record) Name() string {
	h := sha256.Sum256([]byte(r.NetworkName + "\x00" + r.ContainerID + "\x00" + r.IfName))
	return hex.EncodeToString(h[:16]) + ".json"
}

// DirFor is the queue directory of the ipamd serving on socketPath.
func DirFor(socketPath string) string {
	return filepath.Join(filepath.Dir(socketPath), "release-queue")
}

// Queue is a queue directory.
type Queue struct {
	Dir string
	Max int // zero: DefaultMax
}

func (q Queue) max() int {
	if q.Max > 0 {
		return q.Max
	}
	return DefaultMax
}

// The queue's records are synced: one lost would keep its address out of
// the pool for good (its pod is gone and nothing else would release it).
// On a node the queue is under /var/run, a tmpfs, where a sync costs
// nothing.
func (q Queue) dir() recorddir.Dir {
	return recorddir.Dir{Path: q.Dir, MaxBytes: maxRecordBytes, Sync: true}
}

// Append writes r durably, replacing the attachment's earlier record.
func (q Queue) Append(r Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("release record: %w", err)
	}
	name := r.Name()
	names, err := q.dir().Names()
	if err != nil {
		return fmt.Errorf("release queue: %w", err)
	}
	if len(names) >= q.max() && !slices.Contains(names, name) {
		return fmt.Errorf("%w: %d records in %s (ipamd drains it when it starts)", ErrFull, len(names), q.Dir)
	}
	if err := q.dir().Write(name, r); err != nil {
		return fmt.Errorf("release queue: %w", err)
	}
	return nil
}

// Remove deletes the record of the attachment, if there is one.
func (q Queue) Remove(networkName, containerID, ifName string) error {
	r := Record{NetworkName: networkName, ContainerID: containerID, IfName: ifName}
	return q.RemoveFile(r.Name())
}

// RemoveFile deletes one record file (a name List returned).
func (q Queue) RemoveFile(name string) error {
	if err := q.dir().Remove(name); err != nil {
		return fmt.Errorf("release queue: %w", err)
	}
	return nil
}

// Entry is one record file as List read it.
type Entry struct {
	Name   string
	Record Record
}

// BadRecordError names a file of the queue that is not a valid record.
type BadRecordError struct {
	Path string
	Err  error
}

func (e *BadRecordError) Error() string {
	return fmt.Sprintf("release queue: %s is not a valid record: %v", e.Path, e.Err)
}
func (e *BadRecordError) Unwrap() error { return e.Err }

// List reads every record, in name order. A file that is not a valid
// record is returned as a BadRecordError among errs, and the rest are
// still read. A missing directory is an empty queue.
func (q Queue) List() (entries []Entry, errs []error) {
	names, err := q.dir().Names()
	if err != nil {
		return nil, []error{fmt.Errorf("release queue: %w", err)}
	}
	for _, n := range names {
		var r Record
		err := q.dir().Read(n, &r)
		if err == nil {
			err = r.Validate()
		}
		if err == nil && r.Name() != n {
			err = fmt.Errorf("its attachment's record is named %s", r.Name())
		}
		if err != nil {
			errs = append(errs, &BadRecordError{Path: filepath.Join(q.Dir, n), Err: err})
			continue
		}
		entries = append(entries, Entry{Name: n, Record: r})
	}
	return entries, errs
}

// SetAside renames a bad record so that it is neither drained again nor
// counted, and stays for an operator to read.
func (q Queue) SetAside(name string) error {
	if err := q.dir().SetAside(name); err != nil {
		return fmt.Errorf("release queue: %w", err)
	}
	return nil
}
