package podeni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Annotation is one element of the vpc.amazonaws.com/pod-eni annotation,
// a JSON array the VPC resource controller writes; the static source's
// file uses the same object. The JSON names are the wire format's.
type Annotation struct {
	ENIID    string `json:"eniId"`
	MAC      string `json:"ifAddress"`
	IPv4     string `json:"privateIp"`
	IPv6     string `json:"ipv6Addr"`
	VlanID   int    `json:"vlanID"`
	SubnetV4 string `json:"subnetCidr"`
	SubnetV6 string `json:"subnetV6Cidr"`
}

// ParseAnnotation reads the annotation's value and returns its first
// element, the one the reference uses (a pod has one branch ENI).
func ParseAnnotation(value string) (*BranchENI, error) {
	var list []Annotation
	if err := json.Unmarshal([]byte(value), &list); err != nil {
		return nil, fmt.Errorf("annotation %s does not parse as a JSON array of branch ENIs: %w", AnnotationKey, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("annotation %s is an empty array", AnnotationKey)
	}
	b, err := list[0].BranchENI()
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationKey, err)
	}
	return b, nil
}

// BranchENI parses and validates a. Empty address and subnet fields stay
// zero; a present one that does not parse is an error.
func (a Annotation) BranchENI() (*BranchENI, error) {
	b := BranchENI{ENIID: a.ENIID, VlanID: a.VlanID}
	if a.MAC == "" {
		return nil, errors.New("no ifAddress (MAC)")
	}
	mac, err := net.ParseMAC(a.MAC)
	if err != nil {
		return nil, fmt.Errorf("ifAddress %q: %w", a.MAC, err)
	}
	b.MAC = mac
	if b.IPv4, err = parseAddr("privateIp", a.IPv4); err != nil {
		return nil, err
	}
	if b.IPv6, err = parseAddr("ipv6Addr", a.IPv6); err != nil {
		return nil, err
	}
	if b.SubnetV4, err = parsePrefix("subnetCidr", a.SubnetV4); err != nil {
		return nil, err
	}
	if b.SubnetV6, err = parsePrefix("subnetV6Cidr", a.SubnetV6); err != nil {
		return nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

func parseAddr(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q: %w", field, s, err)
	}
	return ip, nil
}

// parsePrefix keeps the subnet's base only: the gateway is derived from it.
func parsePrefix(field, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s %q: %w", field, s, err)
	}
	return p.Masked(), nil
}
