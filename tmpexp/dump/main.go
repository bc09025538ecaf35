package main

import (
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/vpccni/vpccni/internal/testns"
)

func main() {
	node, _ := testns.New("mv-node")
	defer node.Close()
	var del, mv []time.Duration
	for i := 0; i < 15; i++ {
		pod, _ := testns.New("mv-pod")
		nsh, _ := netns.GetFromPath(node.Path())
		ph, _ := netns.GetFromPath(pod.Path())
		h, _ := netlink.NewHandleAt(nsh)
		la := netlink.NewLinkAttrs()
		la.Name = "hv1"
		v := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ph))}
		if err := h.LinkAdd(v); err != nil { panic(err) }
		l, _ := h.LinkByName("hv1")
		h.LinkSetUp(l)
		t := time.Now()
		if i%2 == 0 {
			if err := h.LinkDel(l); err != nil { panic(err) }
			del = append(del, time.Since(t))
		} else {
			if err := h.LinkSetNsFd(l, int(ph)); err != nil { panic(err) }
			mv = append(mv, time.Since(t))
		}
		h.Close(); nsh.Close(); ph.Close(); pod.Close()
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("del", del)
	fmt.Println("move", mv)
}
