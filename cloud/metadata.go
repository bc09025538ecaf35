package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// macsPath lists the instance's attached ENIs, one "<mac>/" per line.
const macsPath = "network/interfaces/macs/"

// metadataReader reads instance metadata keys as text.
type metadataReader struct{ md Metadata }

// text returns one key's value with surrounding white space trimmed.
func (r metadataReader) text(ctx context.Context, path string) (string, error) {
	out, err := r.md.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("IMDS %s: %w", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	if err != nil {
		return "", fmt.Errorf("IMDS %s: reading the answer: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// lines returns a list-valued key (IMDS puts one item per line).
func (r metadataReader) lines(ctx context.Context, path string) ([]string, error) {
	s, err := r.text(ctx, path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(s), nil
}

// optionalLines is lines for a key IMDS leaves out when it has no items
// (ipv4-prefix, ipv6-prefix): absent means none.
func (r metadataReader) optionalLines(ctx context.Context, path string) ([]string, error) {
	l, err := r.lines(ctx, path)
	if isMetadataAbsent(err) {
		return nil, nil
	}
	return l, err
}

// isMetadataAbsent reports whether IMDS answered 404, its way of saying
// the key does not exist.
func isMetadataAbsent(err error) bool {
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && status.HTTPStatusCode() == http.StatusNotFound
}

// macKey is the path of one key of one ENI.
func macKey(mac, key string) string { return macsPath + mac + "/" + key }

// eniMetadata is what IMDS says about one attached ENI.
type eniMetadata struct {
	eni            ENI
	securityGroups []string
}

// readENI reads one ENI's keys. The first of local-ipv4s is the ENI's own
// (primary) address, the rest are its secondary addresses.
func (r metadataReader) readENI(ctx context.Context, mac string) (eniMetadata, error) {
	var m eniMetadata
	e := &m.eni
	e.MAC = mac
	dev, err := r.text(ctx, macKey(mac, "device-number"))
	if err != nil {
		return m, err
	}
	if e.DeviceNumber, err = strconv.Atoi(dev); err != nil || e.DeviceNumber < 0 {
		return m, fmt.Errorf("IMDS %s: device number %q is not a non-negative integer", macKey(mac, "device-number"), dev)
	}
	if e.ID, err = r.text(ctx, macKey(mac, "interface-id")); err != nil {
		return m, err
	}
	if e.SubnetID, err = r.text(ctx, macKey(mac, "subnet-id")); err != nil {
		return m, err
	}
	cidr, err := r.text(ctx, macKey(mac, "subnet-ipv4-cidr-block"))
	if err != nil {
		return m, err
	}
	if e.Subnet, e.Gateway, err = subnetAndGateway(cidr); err != nil {
		return m, fmt.Errorf("IMDS %s: %w", macKey(mac, "subnet-ipv4-cidr-block"), err)
	}
	ips, err := r.lines(ctx, macKey(mac, "local-ipv4s"))
	if err != nil {
		return m, err
	}
	if len(ips) == 0 {
		return m, fmt.Errorf("IMDS %s: empty, the ENI has no primary address", macKey(mac, "local-ipv4s"))
	}
	addrs, err := parseAddrs(ips)
	if err != nil {
		return m, fmt.Errorf("IMDS %s: %w", macKey(mac, "local-ipv4s"), err)
	}
	e.PrimaryIP, e.IPv4 = addrs[0], addrs[1:]
	if len(e.IPv4) == 0 {
		e.IPv4 = nil
	}
	for _, k := range []struct {
		key string
		dst *[]netip.Prefix
	}{{"ipv4-prefix", &e.IPv4Prefixes}, {"ipv6-prefix", &e.IPv6Prefixes}} {
		l, err := r.optionalLines(ctx, macKey(mac, k.key))
		if err != nil {
			return m, err
		}
		if *k.dst, err = parsePrefixes(l); err != nil {
			return m, fmt.Errorf("IMDS %s: %w", macKey(mac, k.key), err)
		}
	}
	if m.securityGroups, err = r.lines(ctx, macKey(mac, "security-group-ids")); err != nil {
		return m, err
	}
	return m, nil
}

// subnetAndGateway parses a subnet's CIDR; the VPC router is the address
// after the subnet's base.
func subnetAndGateway(cidr string) (netip.Prefix, netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("%q is not an IPv4 CIDR", cidr)
	}
	p = p.Masked()
	return p, p.Addr().Next(), nil
}

func parseAddrs(ss []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("address %q: %w", s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// parsePrefixes returns nil for no prefixes, so an ENI without any
// compares equal however it was read.
func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("prefix %q: %w", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// vpcCIDRs reads the VPC's IPv4 CIDR blocks as the primary ENI sees them;
// absent means none known.
func (r metadataReader) vpcCIDRs(ctx context.Context, mac string) ([]netip.Prefix, error) {
	path := macKey(mac, "vpc-ipv4-cidr-blocks")
	l, err := r.optionalLines(ctx, path)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, s := range l {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("IMDS %s: %q is not an IPv4 CIDR", path, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
