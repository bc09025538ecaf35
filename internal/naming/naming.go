// Package naming derives the names vpccni gives to a pod's kernel objects.
//
// The names are the reference's, so that a node can move between the
// reference plugin and vpccni in either direction: the host veth is
// <prefix><first 11 hex digits of sha1("<namespace>.<name>")>, the virtual
// "dummy" interface of the CNI result uses the same suffix, and ipamd
// recognises a checkpointed pod by that suffix on any host link.
package naming

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// SuffixLen is the number of hex digits of the pod hash in a name.
const SuffixLen = 11

// MaxPrefixLen keeps prefix+suffix within IFNAMSIZ-1 (15 bytes).
const MaxPrefixLen = 4

// DefaultVethPrefix is the reference's default host veth prefix.
const DefaultVethPrefix = "eni"

// StrictVethPrefix is the host veth prefix of branch-ENI pods in strict mode.
const StrictVethPrefix = "vlan"

// DummyPrefix names the virtual interface that carries teardown state in
// the CNI result. It is never created in a kernel.
const DummyPrefix = "dummy"

// PodSuffix is the 11-hex-digit hash that identifies a pod in link names.
// index > 0 names the pod's extra interfaces (multi-NIC), as the reference
// does: "<name>.<index>".
func PodSuffix(namespace, name string, index int) string {
	if index > 0 {
		name = name + "." + strconv.Itoa(index)
	}
	sum := sha1.Sum([]byte(namespace + "." + name))
	return hex.EncodeToString(sum[:])[:SuffixLen]
}

// HostVeth is the host-side veth name of a pod.
func HostVeth(prefix, namespace, name string) string {
	return prefix + PodSuffix(namespace, name, 0)
}

// Dummy is the name of the pod's virtual state-carrying interface.
func Dummy(namespace, name string) string {
	return DummyPrefix + PodSuffix(namespace, name, 0)
}

// ValidatePrefix rejects a veth prefix that would overflow IFNAMSIZ or that
// holds characters Linux does not accept in an interface name.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("vethPrefix is empty")
	}
	if len(prefix) > MaxPrefixLen {
		return fmt.Errorf("vethPrefix %q is longer than %d characters", prefix, MaxPrefixLen)
	}
	if strings.ContainsAny(prefix, "/ :\t\n\x00") || prefix == "." || prefix == ".." {
		return fmt.Errorf("vethPrefix %q holds a character not allowed in an interface name", prefix)
	}
	return nil
}

// HasPodSuffix reports whether a link name ends with the pod's hash, i.e.
// whether it is one of this pod's names whatever the prefix.
func HasPodSuffix(linkName, namespace, name string) bool {
	return strings.HasSuffix(linkName, PodSuffix(namespace, name, 0))
}
