package main

import (
	"bytes"
	"flag"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// envFake makes this test binary a stand-in ipamd: "serve" answers
// SERVING until SIGTERM, "unhealthy" answers NOT_SERVING, "crash" exits
// 3 at once. With envExitWhen set, it exits envExitCode once that file
// exists.
const (
	envFake     = "VPCCNI_NODE_FAKE_IPAMD"
	envExitWhen = "VPCCNI_NODE_FAKE_EXIT_WHEN"
	envExitCode = "VPCCNI_NODE_FAKE_EXIT_CODE"
	// envArgsFile: the fake writes its --iptables there.
	envArgsFile = "VPCCNI_NODE_FAKE_ARGS_FILE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envFake); mode != "" {
		os.Exit(fakeIpamd(mode))
	}
	os.Exit(m.Run())
}

func fakeIpamd(mode string) int {
	// Dies with the run that started it, even when run failed to pass a
	// signal on (a mutant of its forwarding): no fake outlives its test.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return 6
	}
	fs := flag.NewFlagSet("ipamd", flag.ContinueOnError)
	sock := fs.String("socket", "", "")
	fs.Bool("fake-flag", false, "")
	ipt := fs.String("iptables", "", "")
	if err := fs.Parse(os.Args[1:]); err != nil || *sock == "" {
		return 2
	}
	if p := os.Getenv(envArgsFile); p != "" {
		if err := os.WriteFile(p, []byte(*ipt), 0o600); err != nil {
			return 5
		}
	}
	if mode == "crash" {
		return 3
	}
	l, err := net.Listen("unix", *sock)
	if err != nil {
		return 4
	}
	srv := grpc.NewServer()
	h := health.NewServer()
	if mode == "unhealthy" {
		h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(l)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case <-term:
			srv.Stop()
			return 0
		case <-tick.C:
			if p := os.Getenv(envExitWhen); p != "" {
				if _, err := os.Stat(p); err == nil {
					code, _ := strconv.Atoi(os.Getenv(envExitCode))
					return code
				}
			}
		}
	}
}

// nodeDirs is a node's CNI directories and an image's.
type nodeDirs struct{ image, bin, conf, sock string }

func dirs(t *testing.T) nodeDirs {
	t.Helper()
	d := nodeDirs{image: t.TempDir(), bin: t.TempDir(), conf: t.TempDir(), sock: filepath.Join(t.TempDir(), "ipamd.sock")}
	if err := os.WriteFile(filepath.Join(d.image, "vpc-cni"), []byte("plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d nodeDirs) getenv(extra ...string) func(string) string {
	m := map[string]string{"HOST_CNI_BIN_PATH": d.bin, "HOST_CNI_CONFDIR_PATH": d.conf}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return func(k string) string { return m[k] }
}

func (d nodeDirs) args(extra ...string) []string {
	return append([]string{"run", "--cni-dir", d.image, "--ipamd", os.Args[0], "--socket", d.sock, "--health-interval", "20ms",
		"--iptables-mode", "path"}, extra...)
}

func (d nodeDirs) conflist() string { return filepath.Join(d.conf, "10-aws.conflist") }

// TestRunWritesTheConflistOnceHealthy: vpc-cni installed, ipamd started
// with its socket and the arguments after --, the conflist written once
// ipamd is SERVING (with the env's MTU and the socket), and run's status
// is ipamd's.
func TestRunWritesTheConflistOnceHealthy(t *testing.T) {
	d := dirs(t)
	t.Setenv(envFake, "serve")
	t.Setenv(envExitWhen, d.conflist())
	t.Setenv(envExitCode, "7")
	var out, errb bytes.Buffer
	code := run(d.args("--", "--fake-flag"), &out, &errb, d.getenv("POD_MTU", "1500"))
	if code != 7 {
		t.Fatalf("exit %d, want ipamd's 7\n%s", code, errb.String())
	}
	b, err := os.ReadFile(d.conflist())
	if err != nil || !strings.Contains(string(b), `"mtu": "1500"`) || !strings.Contains(string(b), `"ipamdAddress": "unix://`+d.sock) {
		t.Fatalf("conflist %s (%v)", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.bin, "vpc-cni")); string(b) != "plugin" {
		t.Errorf("vpc-cni not installed: %q", b)
	}
	for _, w := range []string{"vpc-cni installed", "ipamd is healthy", "conflist written", "ipamd exited"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, errb.String())
		}
	}
}

// TestRunPassesSIGTERMOn: the container's SIGTERM reaches ipamd, which
// stops; run exits 0 with it.
func TestRunPassesSIGTERMOn(t *testing.T) {
	d := dirs(t)
	t.Setenv(envFake, "serve")
	done := make(chan int)
	var errb bytes.Buffer
	go func() { done <- run(d.args(), &bytes.Buffer{}, &errb, d.getenv()) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(d.conflist()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no conflist")
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(errb.String(), "passing the signal on") {
			t.Fatalf("exit %d\n%s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not end within 10 s of SIGTERM\n%s", errb.String())
	}
}

// TestRunWithoutAHealthyIpamd: ipamd exiting before it answers, or never
// answering SERVING, writes no conflist: the runtime keeps the node's
// pods off vpc-cni rather than failing every ADD.
func TestRunWithoutAHealthyIpamd(t *testing.T) {
	t.Run("crash", func(t *testing.T) {
		d := dirs(t)
		t.Setenv(envFake, "crash")
		var errb bytes.Buffer
		if code := run(d.args(), &bytes.Buffer{}, &errb, d.getenv()); code != 3 || !strings.Contains(errb.String(), "exited before it was healthy") {
			t.Fatalf("exit %d, want ipamd's 3\n%s", code, errb.String())
		}
		if _, err := os.Stat(d.conflist()); !os.IsNotExist(err) {
			t.Error("a conflist was written")
		}
	})
	t.Run("not serving", func(t *testing.T) {
		d := dirs(t)
		t.Setenv(envFake, "unhealthy")
		// Were a conflist written anyway, the fake exits at once (9),
		// so the spec fails on the status, not on a hang.
		t.Setenv(envExitWhen, d.conflist())
		t.Setenv(envExitCode, "9")
		var errb bytes.Buffer
		if code := run(d.args("--healthy-timeout", "300ms"), &bytes.Buffer{}, &errb, d.getenv()); code != 1 || !strings.Contains(errb.String(), "not healthy") {
			t.Fatalf("exit %d, want 1\n%s", code, errb.String())
		}
		if _, err := os.Stat(d.conflist()); !os.IsNotExist(err) {
			t.Error("a conflist was written")
		}
	})
}

// TestRunRefusesBadInput: a refused setting stops run before it installs
// or starts anything, naming each variable; a wrong command line is 2.
func TestRunRefusesBadInput(t *testing.T) {
	d := dirs(t)
	t.Setenv(envFake, "crash") // were ipamd started, the status would be 3
	var errb bytes.Buffer
	code := run(d.args(), &bytes.Buffer{}, &errb, d.getenv("POD_MTU", "100", "AWS_VPC_K8S_CNI_VETHPREFIX", "eth"))
	if code != 1 || !strings.Contains(errb.String(), `POD_MTU="100"`) || !strings.Contains(errb.String(), `AWS_VPC_K8S_CNI_VETHPREFIX="eth"`) {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if entries, _ := os.ReadDir(d.bin); len(entries) != 0 {
		t.Errorf("installed %v", entries)
	}
	for _, args := range [][]string{d.args("--", "--socket", "/x"), d.args("--", "-socket=/x"), d.args("stray"), {"run", "--nope"}, {"nope"},
		d.args("--", "--iptables=/usr/sbin/iptables"), d.args("--iptables-mode", "fast")} {
		errb.Reset()
		if code := run(args, &bytes.Buffer{}, &errb, d.getenv()); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}

// TestHelp: --help explains each command and exits 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"init", "--help"}} {
		var out bytes.Buffer
		if code := run(args, &out, &bytes.Buffer{}, os.Getenv); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%v: exit %d\n%s", args, code, out.String())
		}
	}
}

// TestRunPassesTheIptablesMode: a forced mode gives ipamd that mode's
// command, path gives none.
func TestRunPassesTheIptablesMode(t *testing.T) {
	for _, mode := range []string{"legacy", "nft", "path"} {
		want := ""
		if mode != "path" {
			cmd, err := exec.LookPath("iptables-" + mode)
			if err != nil {
				t.Fatalf("iptables-%s: %v (make tools installs iptables)", mode, err)
			}
			want = cmd
		}
		d := dirs(t)
		argsFile := filepath.Join(t.TempDir(), "args")
		t.Setenv(envFake, "serve")
		t.Setenv(envExitWhen, d.conflist())
		t.Setenv(envExitCode, "0")
		t.Setenv(envArgsFile, argsFile)
		var errb bytes.Buffer
		if code := run(d.args("--iptables-mode", mode), &bytes.Buffer{}, &errb, d.getenv()); code != 0 {
			t.Fatalf("%s: exit %d\n%s", mode, code, errb.String())
		}
		if b, err := os.ReadFile(argsFile); err != nil || string(b) != want {
			t.Errorf("--iptables-mode %s: ipamd got --iptables %q (%v), want %q", mode, b, err, want)
		}
	}
}
