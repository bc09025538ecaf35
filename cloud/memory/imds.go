package memory

import (
	"context"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// macKeys are the keys IMDS has under network/interfaces/macs/<mac>/.
// ipv4-prefix and ipv6-prefix exist only while the ENI has prefixes.
var macKeys = []string{
	"device-number", "interface-id", "ipv4-prefix", "ipv6-prefix", "local-ipv4s", "mac",
	"security-group-ids", "subnet-id", "subnet-ipv4-cidr-block", "vpc-id", "vpc-ipv4-cidr-block",
	"vpc-ipv4-cidr-blocks",
}

// GetMetadata answers an instance metadata key from the model's state, as
// IMDS does: lists one item per line, a directory listing with a "/" after
// each subdirectory, 404 for a key that does not exist.
func (c *Cloud) GetMetadata(ctx context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := strings.TrimPrefix(in.Path, "/")
	c.vpc.mu.Lock()
	terminated := c.terminated
	lines, ok := c.metadata(path)
	c.vpc.mu.Unlock()
	if terminated {
		return nil, imdsUnreachable(c.instanceID, path)
	}
	if !ok {
		return nil, metadataNotFound(path)
	}
	return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(strings.Join(lines, "\n")))}, nil
}

// metadata returns the lines of one key, from this instance's ENIs only.
// The caller holds c.vpc.mu.
func (c *Cloud) metadata(path string) ([]string, bool) {
	switch path {
	case "instance-id":
		return []string{c.instanceID}, true
	case "instance-type":
		return []string{c.typ}, true
	case "mac", "local-ipv4":
		e := c.deviceENI(0)
		if e == nil { // only once terminated
			return nil, false
		}
		if path == "mac" {
			return []string{e.mac}, true
		}
		return []string{e.primary.String()}, true
	case "placement/region":
		return []string{c.opt.Region}, true
	case "placement/availability-zone":
		return []string{c.opt.Region + "a"}, true
	case "network/interfaces/macs", "network/interfaces/macs/":
		var macs []string
		for _, e := range c.attached {
			macs = append(macs, e.mac+"/")
		}
		slices.Sort(macs)
		return macs, true
	}
	rest, ok := strings.CutPrefix(path, "network/interfaces/macs/")
	if !ok {
		return nil, false
	}
	mac, key, _ := strings.Cut(rest, "/")
	var e *eni
	for _, o := range c.attached {
		if o.mac == mac {
			e = o
		}
	}
	if e == nil {
		return nil, false
	}
	if key == "" {
		var keys []string
		for _, k := range macKeys {
			if l, ok := c.eniMetadata(e, k); ok && len(l) > 0 {
				keys = append(keys, k)
			}
		}
		return keys, true
	}
	return c.eniMetadata(e, key)
}

// eniMetadata returns one key of an attached ENI. The caller holds
// c.vpc.mu.
func (c *Cloud) eniMetadata(e *eni, key string) ([]string, bool) {
	s := c.vpc.subnets[e.subnetID]
	switch key {
	case "device-number":
		return []string{strconv.Itoa(e.att.device)}, true
	case "interface-id":
		return []string{e.id}, true
	case "mac":
		return []string{e.mac}, true
	case "local-ipv4s":
		l := []string{e.primary.String()}
		for _, a := range e.secondary {
			l = append(l, a.String())
		}
		return l, true
	case "subnet-id":
		return []string{e.subnetID}, true
	case "subnet-ipv4-cidr-block":
		return []string{s.cidr.String()}, true
	case "security-group-ids":
		return slices.Clone(e.groups), true
	case "vpc-id":
		return []string{c.vpc.id}, true
	case "vpc-ipv4-cidr-block":
		return []string{c.vpc.cidrs[0].String()}, true
	case "vpc-ipv4-cidr-blocks":
		l := make([]string, len(c.vpc.cidrs))
		for i, b := range c.vpc.cidrs {
			l[i] = b.String()
		}
		return l, true
	case "ipv4-prefix":
		return prefixLines(e.prefixes)
	case "ipv6-prefix":
		return prefixLines(e.v6prefixes)
	}
	return nil, false
}

// prefixLines is a prefix list key, absent when empty.
func prefixLines(ps []netip.Prefix) ([]string, bool) {
	if len(ps) == 0 {
		return nil, false
	}
	l := make([]string, len(ps))
	for i, p := range ps {
		l[i] = p.String()
	}
	return l, true
}

// deviceENI returns the ENI attached at a device number, nil if none.
// The caller holds c.vpc.mu.
func (c *Cloud) deviceENI(device int) *eni {
	for _, e := range c.attached {
		if e.att.device == device {
			return e
		}
	}
	return nil
}

// GetRegion is the region the instance runs in (Options.Region).
func (c *Cloud) GetRegion(ctx context.Context, _ *imds.GetRegionInput, _ ...func(*imds.Options)) (*imds.GetRegionOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.vpc.mu.Lock()
	terminated := c.terminated
	c.vpc.mu.Unlock()
	if terminated {
		return nil, imdsUnreachable(c.instanceID, "placement/region")
	}
	return &imds.GetRegionOutput{Region: c.opt.Region}, nil
}
