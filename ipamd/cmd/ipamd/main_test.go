package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestUsage(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb, nil); code != 0 {
			t.Fatalf("%s: exit %d", arg, code)
		}
		for _, want := range []string{"--socket PATH", "/var/run/aws-node/ipamd.sock", "--cloud memory", "--instance-type",
			"m5.large", "c5.18xlarge", "--log-level", "--log-format", "--reject-version-mismatch", "--version",
			"--enable-pod-eni", "ENABLE_POD_ENI=true", "--pod-eni-source kubernetes|static", "--kubeconfig PATH",
			"--pod-eni-file PATH", "vpc.amazonaws.com/pod-eni", `"vlanID": 7`, "--checkpoint PATH", "AWS_VPC_K8S_CNI_BACKING_STORE",
			"/var/run/aws-node/ipam.json", "--recover-from-kernel", "VPCCNI_RECOVER_FROM_KERNEL", "IP_COOLDOWN_PERIOD", "--reconcile=false",
			"127.0.0.1:61679", ":61678", "WARM_ENI_TARGET", "WARM_IP_TARGET", "MINIMUM_IP_TARGET", "WARM_PREFIX_TARGET",
			"ENABLE_PREFIX_DELEGATION", "MAX_ENI", "--memory-start full|fresh", "--cloud memory|aws", "DISABLE_INTROSPECTION"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: help lacks %q", arg, want)
			}
		}
	}
}

// isolated adds to args what keeps a test's ipamd off the machine's
// defaults: its own checkpoint, and HTTP on ephemeral loopback ports.
func isolated(t *testing.T, args ...string) []string {
	return append(args, "--checkpoint", filepath.Join(t.TempDir(), "ipam.json"),
		"--introspection-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0")
}

// stopped is a stop already signalled, for runs that must end in a usage
// error: should the flags be wrongly accepted (a mutant), the daemon
// serves and stops at once (exit 0) rather than hanging the test.
func stopped() <-chan os.Signal {
	stop := make(chan os.Signal, 1)
	stop <- syscall.SIGTERM
	return stop
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--cloud", "gcp"}, {"--cloud", "aws", "--instance-type", "m5.large"}, {"--instance-type", "x1.banana"}, {"--log-level", "loud"},
		{"--log-format", "xml"}, {"--nope"}, {"extra"}, {"--memory-start", "warm"}, {"--veth-prefix", "toolong"},
		{"--warm-ip-target", "-1"}, {"--reconcile-interval", "soon"},
	} {
		var out, errb bytes.Buffer
		code := run(isolated(t, append(args, "--socket", filepath.Join(t.TempDir(), "s"))...), &out, &errb, stopped())
		if code != 2 || !strings.HasPrefix(errb.String(), "ipamd: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	run([]string{"--cloud", "gcp"}, &bytes.Buffer{}, &errb, stopped())
	if !strings.Contains(errb.String(), `"memory" or "aws"`) {
		t.Errorf("--cloud error does not name the supported value: %q", errb.String())
	}
}

// TestServeUntilSignal runs the daemon in-process: it serves, logs one
// startup line, and on SIGTERM stops, removes its socket and returns 0.
func TestServeUntilSignal(t *testing.T) {
	dir, err := os.MkdirTemp("", "ipamd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "run", "ipamd.sock")
	stop := make(chan os.Signal, 1)
	var errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(isolated(t, "--socket", sock, "--instance-type", "t3.medium", "--log-format", "json"), &bytes.Buffer{}, &errb, stop)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after stop: %v", err)
	}
	logs := errb.String()
	if n := strings.Count(logs, `"msg":"ipamd serving"`); n != 1 || !strings.Contains(logs, `"pool":15`) || !strings.Contains(logs, sock) {
		t.Fatalf("startup line: %s", logs)
	}
}

// TestEnvironment: the reference's variables are read, and a malformed
// one is a usage error naming it.
func TestEnvironment(t *testing.T) {
	for name, value := range map[string]string{"WARM_IP_TARGET": "many", "IP_COOLDOWN_PERIOD": "30s",
		"ENABLE_PREFIX_DELEGATION": "yes", "MAX_ENI": "-"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			var errb bytes.Buffer
			if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &bytes.Buffer{}, &errb, stopped()); code != exitUsage ||
				!strings.Contains(errb.String(), name) {
				t.Fatalf("%s=%s: exit %d, %q", name, value, code, errb.String())
			}
		})
	}
	env := map[string]string{"WARM_IP_TARGET": "4", "MINIMUM_IP_TARGET": "7", "IP_COOLDOWN_PERIOD": "45",
		"AWS_VPC_K8S_CNI_BACKING_STORE": "/x/ipam.json", "DISABLE_METRICS": "true"}
	f, err := parseFlags([]string{"--minimum-ip-target", "9"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if f.targets.WarmIP != 4 || f.targets.MinimumIP != 9 || f.cooldown != 45*time.Second || f.checkpoint != "/x/ipam.json" || !f.noMetrics {
		t.Fatalf("flags %+v", f)
	}
}

// TestMemoryCloudLeavesThisNamespaceAlone: outside a named network
// namespace (here: the test's, maybe the machine's own) ipamd --cloud
// memory serves but makes no stand-in link, route or rule.
func TestMemoryCloudLeavesThisNamespaceAlone(t *testing.T) {
	if _, ok := namedNamespace(); ok {
		t.Skip("the test runs inside a named namespace")
	}
	dir, err := os.MkdirTemp("", "ipamd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "ipamd.sock")
	stop := make(chan os.Signal, 1)
	var errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(isolated(t, "--socket", sock, "--log-format", "json"), &bytes.Buffer{}, &errb, stop)
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil || time.Now().After(deadline) {
			break
		}
	}
	stop <- syscall.SIGTERM
	<-done
	if !strings.Contains(errb.String(), "not touching the kernel") || strings.Contains(errb.String(), "stand-in link") {
		t.Fatalf("logs: %s", errb.String())
	}
}

// TestEnvironmentReported: at start, a reference setting ipamd does not
// support and an unknown look-alike are logged once each, with the
// reference's identity variables; a malformed switch is a usage error
// naming it, and ENABLE_IPv4 must disagree with ENABLE_IPv6.
func TestEnvironmentReported(t *testing.T) {
	t.Setenv("ENABLE_MULTI_NIC", "True")
	t.Setenv("AWS_VPC_K8S_CNI_BOGUS", "1")
	t.Setenv("MY_NODE_NAME", "ip-10-0-0-1")
	var errb bytes.Buffer
	if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s"), "--log-format", "json"), &bytes.Buffer{}, &errb, stopped()); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	logs := errb.String()
	for _, want := range []string{`"variable":"ENABLE_MULTI_NIC"`, `"variable":"AWS_VPC_K8S_CNI_BOGUS"`, `"MY_NODE_NAME":"ip-10-0-0-1"`} {
		if strings.Count(logs, want) != 1 {
			t.Errorf("%s logged %d times: %s", want, strings.Count(logs, want), logs)
		}
	}
	for _, c := range []struct{ env, value, want string }{
		{"DISABLE_METRICS", "yes", `DISABLE_METRICS="yes"`},
		{"ENABLE_IPv4", "false", "exactly one of ENABLE_IPv4 and ENABLE_IPv6"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			var errb bytes.Buffer
			if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &bytes.Buffer{}, &errb, stopped()); code != exitUsage || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("%s=%s: exit %d, %q", c.env, c.value, code, errb.String())
			}
		})
	}
	// "1" is true, as for the reference: IPv6 with ENABLE_IPv4=0 is fine
	// as far as the flags go.
	t.Setenv("ENABLE_IPv6", "1")
	t.Setenv("ENABLE_IPv4", "0")
	f, err := parseFlags(nil, os.Getenv)
	if err != nil || !f.ipv6 {
		t.Fatalf("ENABLE_IPv6=1 ENABLE_IPv4=0: %+v, %v", f, err)
	}
}

// TestDisableProvisioning: DISABLE_NETWORK_RESOURCE_PROVISIONING (any
// ParseBool spelling) leaves the pool as attached: no warm pool.
func TestDisableProvisioning(t *testing.T) {
	for value, warm := range map[string]bool{"1": false, "false": true} {
		t.Run(value, func(t *testing.T) {
			t.Setenv("DISABLE_NETWORK_RESOURCE_PROVISIONING", value)
			var errb bytes.Buffer
			if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &bytes.Buffer{}, &errb, stopped()); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if want := fmt.Sprintf("warmPool=%v", warm); !strings.Contains(errb.String(), want) {
				t.Fatalf("want %s: %s", want, errb.String())
			}
		})
	}
}

// TestENITagsFromEnvironment: ADDITIONAL_ENI_TAGS and CLUSTER_NAME become
// the tags of the ENIs ipamd creates; a malformed document is a usage
// error naming the variable.
func TestENITagsFromEnvironment(t *testing.T) {
	t.Setenv("ADDITIONAL_ENI_TAGS", `{"team":"net"}`)
	t.Setenv("CLUSTER_NAME", "prod")
	f, err := parseFlags(nil, os.Getenv)
	if err != nil || f.eniTags["team"] != "net" || f.eniTags["cluster.k8s.amazonaws.com/name"] != "prod" || len(f.eniTags) != 2 {
		t.Fatalf("%v, %v", f.eniTags, err)
	}
	t.Setenv("ADDITIONAL_ENI_TAGS", `{"team":`)
	var errb bytes.Buffer
	if code := run(isolated(t, "--socket", filepath.Join(t.TempDir(), "s")), &bytes.Buffer{}, &errb, stopped()); code != exitUsage || !strings.Contains(errb.String(), "ADDITIONAL_ENI_TAGS") {
		t.Fatalf("exit %d, %q", code, errb.String())
	}
}
