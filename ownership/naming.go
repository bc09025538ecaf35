// Package naming derives the names vpccni gives to a pod's kernel objects.
//
// The names are the reference's, so that a node can move between the
// reference plugin and vpccni in either direction: the host veth is
// <prefix><first 11 hex digits of sha1("<namespace>.<name>")>, the virtual
// "dummy" interface of the CNI result uses the same suffix, and ipamd
// recognises a checkpointed pod by that suffix on any host link.
package ownership

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"github.com/vpccni/vpccni/kernel"
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

// IsHostVeth reports whether name is a pod's host veth for one of the
// prefixes: the prefix followed by exactly SuffixLen lowercase hex digits
// (the pod's name hash). Empty prefixes are ignored.
func IsHostVeth(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if p == "" || !strings.HasPrefix(name, p) {
			continue
		}
		if rest := name[len(p):]; len(rest) == SuffixLen && isLowerHex(rest) {
			return true
		}
	}
	return false
}

// IsBranchHostVeth reports whether name is the host veth of a branch-ENI
// pod in strict mode: "vlan" followed by exactly 11 lowercase hex digits.
func IsBranchHostVeth(name string) bool { return IsHostVeth(name, []string{StrictVethPrefix}) }

func isLowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// vlanLinkPrefix is how the branch path names a VLAN link on the trunk.
const vlanLinkPrefix = "vlan.eth."

// VlanLink is the name of a branch ENI's VLAN link: vlan.eth.<id>.
func VlanLink(id int) string { return vlanLinkPrefix + strconv.Itoa(id) }

// VlanLinkID returns the VLAN id of a branch ENI's VLAN link name
// (vlan.eth.<id>, id 1–4094 in decimal without leading zeros).
func VlanLinkID(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, vlanLinkPrefix)
	if !ok || digits == "" || digits[0] == '0' || len(digits) > 4 {
		return 0, false
	}
	id, err := strconv.Atoi(digits)
	if err != nil || id < 1 || id > 4094 || strconv.Itoa(id) != digits {
		return 0, false
	}
	return id, true
}

// SandboxVeth is the ifindex, in the node namespace, of the host veth that
// is the peer of the sandbox's container interface: the proof that a host
// veth is that sandbox's (a pod recreated with the same name has a host
// veth of the same name, and only the peer tells them apart). It is 0 when
// the interface is gone or is not a veth.
func SandboxVeth(pod kernel.API, containerIf string) (int, error) {
	l, err := pod.LinkByName(containerIf)
	if kernel.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if l.Kind != kernel.KindVeth {
		return 0, nil
	}
	return l.ParentIndex, nil
}
