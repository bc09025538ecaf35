package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/vpccni/vpccni/cloud"
)

// fakeAWS stands in for IMDS and the EC2 query endpoint on one loopback
// server, recording what the clients sent.
type fakeAWS struct {
	region   string
	metadata map[string]string // path under /latest/meta-data/ → body; absent is 404
	ec2      map[string]string // Action → XML body (status 200), or "<Response>…" for an error (status 503)

	mu        sync.Mutex
	docReads  int
	actions   []string
	authz     []string
	tokenless int // metadata requests without the IMDSv2 token
}

func (f *fakeAWS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
		fmt.Fprint(w, "token-1")
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/latest/"):
		if r.Header.Get("X-Aws-Ec2-Metadata-Token") != "token-1" {
			f.tokenless++
		}
		if r.URL.Path == "/latest/dynamic/instance-identity/document" {
			f.docReads++
			json.NewEncoder(w).Encode(map[string]string{"region": f.region, "instanceId": "i-0123"})
			return
		}
		body, ok := f.metadata[strings.TrimPrefix(r.URL.Path, "/latest/meta-data/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, body)
	case r.Method == http.MethodPost && r.URL.Path == "/":
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action := r.PostForm.Get("Action")
		f.actions = append(f.actions, action+" "+r.PostForm.Get("InstanceType.1"))
		f.authz = append(f.authz, r.Header.Get("Authorization"))
		body, ok := f.ec2[action]
		if !ok {
			http.Error(w, "unexpected action "+action, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		if strings.HasPrefix(body, "<Response>") {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, body)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

const describeTypesXML = `<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstanceTypesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>req-1</requestId>
  <instanceTypeSet><item>
    <instanceType>m7i.large</instanceType>
    <networkInfo>
      <maximumNetworkInterfaces>3</maximumNetworkInterfaces>
      <ipv4AddressesPerInterface>10</ipv4AddressesPerInterface>
      <ipv6Supported>true</ipv6Supported>
    </networkInfo>
  </item></instanceTypeSet>
</DescribeInstanceTypesResponse>`

const throttledXML = `<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>req-2</RequestID></Response>`

// start serves f and points the SDK at it: IMDS through the environment,
// static credentials, no shared config files, one attempt per call.
func start(t *testing.T, f *fakeAWS) *httptest.Server {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":                 "AKIDTEST",
		"AWS_SECRET_ACCESS_KEY":             "secret",
		"AWS_SESSION_TOKEN":                 "",
		"AWS_REGION":                        "",
		"AWS_DEFAULT_REGION":                "",
		"AWS_PROFILE":                       "",
		"AWS_CONFIG_FILE":                   none,
		"AWS_SHARED_CREDENTIALS_FILE":       none,
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": srv.URL,
		"AWS_EC2_METADATA_DISABLED":         "",
		"AWS_MAX_ATTEMPTS":                  "1",
		"AWS_ENDPOINT_URL":                  "",
		"AWS_ENDPOINT_URL_EC2":              "",
	} {
		t.Setenv(k, v)
	}
	return srv
}

func describeM7i(t *testing.T, api cloud.EC2) *ec2.DescribeInstanceTypesOutput {
	t.Helper()
	out, err := api.DescribeInstanceTypes(context.Background(), &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m7i.large"}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRegionFromIMDS(t *testing.T) {
	f := &fakeAWS{region: "eu-west-3", ec2: map[string]string{"DescribeInstanceTypes": describeTypesXML}}
	srv := start(t, f)
	api, _, err := New(context.Background(), Options{EndpointURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	out := describeM7i(t, api)
	if len(out.InstanceTypes) != 1 || aws.ToInt32(out.InstanceTypes[0].NetworkInfo.MaximumNetworkInterfaces) != 3 ||
		aws.ToInt32(out.InstanceTypes[0].NetworkInfo.Ipv4AddressesPerInterface) != 10 {
		t.Fatalf("answer %+v", out.InstanceTypes)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.docReads != 1 || f.tokenless != 0 {
		t.Errorf("identity document read %d times, %d reads without token; want 1 and 0", f.docReads, f.tokenless)
	}
	if !reflect.DeepEqual(f.actions, []string{"DescribeInstanceTypes m7i.large"}) {
		t.Errorf("EC2 got %v", f.actions)
	}
	if a := f.authz[0]; !strings.Contains(a, "Credential=AKIDTEST/") || !strings.Contains(a, "/eu-west-3/ec2/aws4_request") {
		t.Errorf("request not signed for eu-west-3 with the static key: %q", a)
	}
}

func TestRegionFromOptions(t *testing.T) {
	f := &fakeAWS{region: "eu-west-3", ec2: map[string]string{"DescribeInstanceTypes": describeTypesXML}}
	srv := start(t, f)
	api, _, err := New(context.Background(), Options{Region: "ap-south-1", EndpointURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	describeM7i(t, api)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.docReads != 0 {
		t.Errorf("IMDS asked for the region %d times although Options gave one", f.docReads)
	}
	if !strings.Contains(f.authz[0], "/ap-south-1/ec2/aws4_request") {
		t.Errorf("request not signed for ap-south-1: %q", f.authz[0])
	}
}

func TestNoIMDSNoRegion(t *testing.T) {
	f := &fakeAWS{}
	srv := start(t, f)
	srv.Close() // IMDS unreachable
	// The IMDS client retries with back-off; the deadline keeps the test
	// short, and New must still name what it was doing.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := New(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "region") {
		t.Fatalf("err %v, want one about the region", err)
	}
}

// TestErrorClassificationOnSDKErrors: an EC2 error as the SDK parses it
// off the wire is classified like the memory cloud's.
func TestErrorClassificationOnSDKErrors(t *testing.T) {
	f := &fakeAWS{ec2: map[string]string{"DescribeInstanceTypes": throttledXML}}
	srv := start(t, f)
	api, _, err := New(context.Background(), Options{Region: "us-east-1", EndpointURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.DescribeInstanceTypes(context.Background(), &ec2.DescribeInstanceTypesInput{})
	if !cloud.IsThrottled(err) || cloud.IsSubnetFull(err) || cloud.ErrorCode(err) != "RequestLimitExceeded" {
		t.Fatalf("err %v: code %q, not classified as throttled", err, cloud.ErrorCode(err))
	}
}

// TestProviderOnRealClients runs cloud.NewProvider's Instance on the real
// clients: IMDS's 404 for ipv4-prefix means no prefixes, a type missing
// from the table is asked from EC2, and EC2 marks the trunk.
func TestProviderOnRealClients(t *testing.T) {
	const mac = "02:00:00:00:00:01"
	key := func(k string) string { return "network/interfaces/macs/" + mac + "/" + k }
	f := &fakeAWS{
		region: "eu-west-3",
		metadata: map[string]string{
			"instance-id": "i-0123", "instance-type": "m7i.large", "mac": mac,
			"network/interfaces/macs/": mac + "/",
			key("device-number"):       "0", key("interface-id"): "eni-0aaa", key("subnet-id"): "subnet-0bbb",
			key("subnet-ipv4-cidr-block"): "10.0.1.0/24", key("local-ipv4s"): "10.0.1.10\n10.0.1.11",
			key("security-group-ids"): "sg-0ccc",
		},
		ec2: map[string]string{
			"DescribeInstanceTypes": describeTypesXML,
			"DescribeNetworkInterfaces": `<DescribeNetworkInterfacesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>req-3</requestId>
  <networkInterfaceSet><item>
    <networkInterfaceId>eni-0aaa</networkInterfaceId>
    <interfaceType>interface</interfaceType>
    <privateIpAddressesSet>
      <item><privateIpAddress>10.0.1.10</privateIpAddress><primary>true</primary></item>
      <item><privateIpAddress>10.0.1.11</privateIpAddress><primary>false</primary></item>
      <item><privateIpAddress>10.0.1.12</privateIpAddress><primary>false</primary></item>
    </privateIpAddressesSet>
  </item></networkInterfaceSet>
</DescribeNetworkInterfacesResponse>`,
		},
	}
	srv := start(t, f)
	api, md, err := New(context.Background(), Options{EndpointURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := cloud.NewProvider(api, md, cloud.ProviderOptions{}).Instance(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := cloud.Instance{
		ID: "i-0123", Type: "m7i.large", Limits: cloud.Limits{ENIs: 3, IPv4PerENI: 10, IPv6: true},
		SubnetID: "subnet-0bbb", SecurityGroups: []string{"sg-0ccc"},
		ENIs: []cloud.ENI{{
			ID: "eni-0aaa", MAC: mac, PrimaryIP: netip.MustParseAddr("10.0.1.10"), SubnetID: "subnet-0bbb",
			Subnet: netip.MustParsePrefix("10.0.1.0/24"), Gateway: netip.MustParseAddr("10.0.1.1"),
			// EC2 already has .12, IMDS not yet: EC2 wins.
			IPv4: []netip.Addr{netip.MustParseAddr("10.0.1.11"), netip.MustParseAddr("10.0.1.12")},
		}},
	}
	if !reflect.DeepEqual(inst, want) {
		t.Fatalf("instance\n got %+v\nwant %+v", inst, want)
	}
}

func TestMain(m *testing.M) {
	// The SDK must never reach a real endpoint from this test binary.
	os.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1")
	os.Exit(m.Run())
}
