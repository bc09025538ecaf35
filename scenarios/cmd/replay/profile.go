package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
)

// startProfiles starts a CPU profile to cpu and arranges a heap profile to
// heap (either may be empty); the function it returns stops and writes
// them. The files are created first, so a bad path fails before any run.
func startProfiles(cpu, heap string) (func() error, error) {
	var cpuFile, heapFile *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		cpuFile = f
	}
	if heap != "" {
		f, err := os.Create(heap)
		if err != nil {
			if cpuFile != nil {
				pprof.StopCPUProfile()
				cpuFile.Close()
			}
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
		heapFile = f
	}
	return func() error {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
		}
		if heapFile != nil {
			runtime.GC() // the heap profile shows what is live at the end
			err := pprof.WriteHeapProfile(heapFile)
			if cerr := heapFile.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("--memprofile: %w", err)
			}
		}
		return nil
	}, nil
}

// peakRSS is the process's peak resident memory in bytes (0 where the
// system does not say).
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10 // kilobytes on Linux
}
