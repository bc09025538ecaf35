package simnode

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	. "github.com/onsi/gomega"

	"github.com/vpccni/vpccni/kernel"
)

// Allocation is one entry of ipamd's /v1/allocations.
type Allocation struct {
	ContainerID string `json:"containerID"`
	Pod         string `json:"pod"`
	IP          string `json:"ip"`
	Releasing   bool   `json:"releasing"`
}

// Dialer connects to ipamd's introspection endpoint, wherever it listens.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// IntrospectDialer dials the node's introspection socket.
func (n *Node) IntrospectDialer() Dialer {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", n.IntrospectSock())
	}
}

// Introspect GETs an introspection path through dial.
func Introspect(dial Dialer, path string) []byte {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial}}
	resp, err := c.Get("http://ipamd" + path)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK), path)
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// Allocations GETs /v1/allocations through dial.
func Allocations(dial Dialer) []Allocation {
	var out []Allocation
	Expect(json.Unmarshal(Introspect(dial, "/v1/allocations"), &out)).To(Succeed())
	return out
}

// WaitReaped waits until ipamd holds nothing a DEL handed over: vpc-cni's
// DEL leaves the pod's veth pair to ipamd, which deletes it and then
// releases the address, moments after the DEL returned (a few tens of
// milliseconds each). A spec's checks of the node after a DEL wait for it
// first, so that they see what the DEL and ipamd together leave.
func WaitReaped(dial Dialer) {
	Eventually(func() []string {
		var left []string
		for _, a := range Allocations(dial) {
			if a.Releasing {
				left = append(left, a.IP+" of "+a.Pod+" ("+a.ContainerID+")")
			}
		}
		return left
	}, 10*time.Second, 10*time.Millisecond).Should(BeEmpty(), "handed-over veths ipamd has not deleted")
}

// RulesFor lists the host's rules whose selector is exactly the address.
func RulesFor(host kernel.API, a netip.Addr) []kernel.Rule {
	rules, err := host.RuleList(kernel.FamilyAll)
	Expect(err).NotTo(HaveOccurred())
	var out []kernel.Rule
	for _, r := range rules {
		for _, sel := range []*net.IPNet{r.Src, r.Dst} {
			if sel != nil && sel.IP.Equal(net.IP(a.AsSlice())) {
				out = append(out, r)
			}
		}
	}
	return out
}

// RoutesFor lists the host's routes in table (kernel.TableUnspec: any) to
// exactly the address.
func RoutesFor(host kernel.API, a netip.Addr, table int) []kernel.Route {
	routes, err := host.RouteList(kernel.FamilyAll, table)
	Expect(err).NotTo(HaveOccurred())
	var out []kernel.Route
	for _, r := range routes {
		if r.Dst != nil && r.Dst.IP.Equal(net.IP(a.AsSlice())) {
			if ones, bits := r.Dst.Mask.Size(); ones == bits {
				out = append(out, r)
			}
		}
	}
	return out
}
