package memory

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// metadata reads a key the way cloud's provider does.
func metadata(t *testing.T, c *Cloud, path string) (string, error) {
	t.Helper()
	out, err := c.GetMetadata(context.Background(), &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(out.Content)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), nil
}

func is404(err error) bool {
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && status.HTTPStatusCode() == http.StatusNotFound
}

func TestIMDSAnswers(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Trunk: true})
	inst := mustInstance(t, c)
	m1 := "network/interfaces/macs/02:00:00:00:01:01/"
	for path, want := range map[string]string{
		"instance-id":                 "i-" + hexID("m5.large"),
		"/instance-type":              "m5.large",
		"mac":                         "02:00:00:00:00:01",
		"local-ipv4":                  "10.0.1.10",
		"placement/region":            "us-west-2",
		"network/interfaces/macs/":    "02:00:00:00:00:01/\n02:00:00:00:01:01/\n02:00:00:00:02:01/",
		m1 + "device-number":          "1",
		m1 + "interface-id":           inst.ENIs[1].ID,
		m1 + "subnet-id":              inst.ENIs[1].SubnetID,
		m1 + "subnet-ipv4-cidr-block": "10.0.2.0/24",
		m1 + "local-ipv4s":            "10.0.2.10\n10.0.2.11\n10.0.2.12\n10.0.2.13\n10.0.2.14\n10.0.2.15\n10.0.2.16\n10.0.2.17\n10.0.2.18\n10.0.2.19",
		m1 + "security-group-ids":     inst.SecurityGroups[0],
		m1 + "vpc-ipv4-cidr-blocks":   "10.0.0.0/16",
		m1:                            "device-number\ninterface-id\nlocal-ipv4s\nmac\nsecurity-group-ids\nsubnet-id\nsubnet-ipv4-cidr-block\nvpc-id\nvpc-ipv4-cidr-block\nvpc-ipv4-cidr-blocks",
		"network/interfaces/macs/02:00:00:00:00:01/ipv6-prefix": "2600:1f14:a:1::/80",
	} {
		got, err := metadata(t, c, path)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, path := range []string{
		m1 + "ipv4-prefix", // no prefixes: the key is absent
		m1 + "ipv6-prefix",
		"network/interfaces/macs/02:00:00:00:07:01/device-number", // not attached
		m1 + "banana",
		"banana",
	} {
		if _, err := metadata(t, c, path); !is404(err) {
			t.Errorf("%s: %v, want a 404", path, err)
		}
	}
	r, err := c.GetRegion(context.Background(), &imds.GetRegionInput{})
	if err != nil || r.Region != "us-west-2" {
		t.Errorf("region %+v %v", r, err)
	}
	if r, _ := mustCloud(t, "m5.large", Options{Region: "eu-west-3"}).GetRegion(context.Background(), nil); r.Region != "eu-west-3" {
		t.Errorf("Options.Region ignored: %s", r.Region)
	}
}

// TestIMDSFollowsState: IMDS answers from the same state EC2 changes.
func TestIMDSFollowsState(t *testing.T) {
	c := mustCloud(t, "m5.large", Options{Bare: true})
	p := c.Provider()
	eni, err := p.AllocENI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	key := "network/interfaces/macs/" + eni.MAC + "/"
	if _, err := p.AssignIPv4Prefixes(context.Background(), eni.ID, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := metadata(t, c, key+"ipv4-prefix"); err != nil || got != "10.0.1.16/28" {
		t.Errorf("ipv4-prefix = %q, %v", got, err)
	}
	if got, _ := metadata(t, c, "network/interfaces/macs/"); got != "02:00:00:00:00:01/\n"+eni.MAC+"/" {
		t.Errorf("macs = %q", got)
	}
	if err := p.FreeENI(context.Background(), eni.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := metadata(t, c, key+"device-number"); !is404(err) {
		t.Errorf("a freed ENI's key: %v, want a 404", err)
	}
}
