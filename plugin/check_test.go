package plugin

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestCheck(t *testing.T) {
	conf := netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})
	r := newRig(t)
	r.expectHandles(true)
	r.drv.EXPECT().Check(r.host, r.pod, prevPod).Return(nil)
	if err := r.p.Check(cmdArgs(conf)); err != nil {
		t.Fatal(err)
	}
	r = newRig(t)
	r.expectHandles(true)
	r.drv.EXPECT().Check(r.host, r.pod, prevPod).Return(errors.New("rule 512 to 10.0.2.11/32 lookup main is missing"))
	wantCode(t, r.p.Check(cmdArgs(conf)), ErrCheckFailed)
	r = newRig(t)
	r.expectHandles(false)
	wantCode(t, r.p.Check(cmdArgs(conf)), types.ErrInvalidNetNS)
	wantCode(t, newRig(t).p.Check(cmdArgs(netconf(t, nil))), types.ErrInvalidNetworkConfig)
	wantCode(t, newRig(t).p.Check(cmdArgs(netconf(t, map[string]any{"prevResult": refPrevResult(testHostVeth, "255", "0", "1")}))), types.ErrInvalidNetworkConfig)
}
