package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// A fleet allocates fast and keeps little: most of what it allocates is
// garbage within one CNI call, and at Go's default target collecting took
// a third of a 100-node hour's CPU, at GOGC=400 still a third of a
// 1,000-node hour's (its live heap is ten times larger, and so is every
// mark). So, unless GOGC or GOMEMLIMIT is set, replay fleet lets the heap
// grow to fleetGOGC percent above what is live, bounded by a soft memory
// limit of half the memory the machine has available: a small fleet
// collects at its proportional target, a large one only near the limit.
const fleetGOGC = 1600

// maxFleetLimit caps the limit on a machine with much memory free.
const maxFleetLimit = 16 << 30

// setFleetGC applies the fleet's collector settings and says what they are.
func setFleetGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	avail, ok := memAvailable()
	if !ok {
		debug.SetGCPercent(400) // no limit to lean on: a modest target
		return
	}
	debug.SetGCPercent(fleetGOGC)
	debug.SetMemoryLimit(min(avail/2, maxFleetLimit))
}

// gcSetting is the collector's target and limit now, for the run's line.
func gcSetting() string {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	s := fmt.Sprintf("GOGC %d", p)
	if p < 0 {
		s = "GOGC off"
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		s += fmt.Sprintf(", memory limit %.1f GiB", float64(l)/(1<<30))
	}
	return s
}

// memAvailable is the kernel's estimate of the memory available to new
// work (MemAvailable in /proc/meminfo), in bytes.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemAvailable:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10, err == nil && kb > 0
		}
	}
	return 0, false
}
