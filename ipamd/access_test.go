package ipamd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc/rpcgrpc"
)

// envSocketClient, when set, makes TestNonRootCannotCallAddNetwork act as
// the unprivileged client instead of the test: the test runs this binary
// again as nobody with it set to the socket's path.
const envSocketClient = "VPCCNI_TEST_SOCKET_CLIENT"

// resultPrefix marks the client's one line of output among the test
// framework's.
const resultPrefix = "SOCKET-CLIENT-RESULT "

// nobody is the unprivileged identity the client runs as.
const nobody = 65534

// socketClientResult is what the unprivileged client saw.
type socketClientResult struct {
	UID, GID   int
	Groups     []int
	DialErr    string // connect(2) on the socket; "" if it connected
	DialEACCES bool
	AddCode    string // gRPC status code of AddNetwork
	AddErr     string
	AddSuccess bool
}

// actAsSocketClient connects to ipamd's socket and calls AddNetwork,
// and prints what happened.
func actAsSocketClient(sock string) {
	res := socketClientResult{UID: os.Getuid(), GID: os.Getgid()}
	res.Groups, _ = os.Getgroups()
	if c, err := net.Dial("unix", sock); err != nil {
		res.DialErr, res.DialEACCES = err.Error(), errors.Is(err, syscall.EACCES)
	} else {
		c.Close()
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := rpcgrpc.NewCNIBackendClient(conn).AddNetwork(ctx, addReq("nobody"))
		cancel()
		conn.Close()
		res.AddCode, res.AddSuccess = status.Code(err).String(), r.GetSuccess()
		if err != nil {
			res.AddErr = err.Error()
		}
	} else {
		res.AddErr = err.Error()
	}
	b, _ := json.Marshal(res)
	os.Stdout.Write(append([]byte(resultPrefix), append(b, '\n')...))
}

// TestNonRootCannotCallAddNetwork checks least privilege on ipamd's
// socket: it is 0660 root:root, and a process running as nobody
// (uid/gid 65534, no supplementary groups) can neither connect(2) to it
// (EACCES) nor call AddNetwork through gRPC (Unavailable, permission
// denied), and no address is assigned. As a control, the same client
// succeeds once the socket is made 0666, so it is the socket's mode that
// kept it out (not the directory, the helper's exec or anything else).
// The client is this test binary, copied where nobody can run it and
// executed with syscall.Credential. Root only: a non-root run is a
// failure, not a skip that would let the check go unseen.
func TestNonRootCannotCallAddNetwork(t *testing.T) {
	if sock := os.Getenv(envSocketClient); sock != "" {
		actAsSocketClient(sock)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to run a client as another user: run it as root (make test)")
	}
	sock := sockPath(t)
	d := start(t, sock, Config{})
	// sockPath's temp directory is 0700; open it up so that only the
	// socket's own mode stands between nobody and ipamd.
	if err := os.Chmod(filepath.Dir(filepath.Dir(sock)), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("socket mode %v owner %d:%d, want 0660 root:root", fi.Mode(), st.Uid, st.Gid)
	}
	bin := copyTestBinary(t)

	res := runAsNobody(t, bin, sock)
	if res.UID != nobody || res.GID != nobody || len(res.Groups) > 1 || (len(res.Groups) == 1 && res.Groups[0] != nobody) {
		t.Fatalf("client ran as uid %d gid %d groups %v, want nobody with no other group", res.UID, res.GID, res.Groups)
	}
	t.Logf("as nobody (uid %d gid %d groups %v) on a 0660 root:root socket: connect %q; AddNetwork %s %q",
		res.UID, res.GID, res.Groups, res.DialErr, res.AddCode, res.AddErr)
	if !res.DialEACCES {
		t.Errorf("connect as nobody: %q, want EACCES", res.DialErr)
	}
	if res.AddSuccess || res.AddCode != "Unavailable" || !strings.Contains(res.AddErr, "permission denied") {
		t.Errorf("AddNetwork as nobody: success=%v code %s %q, want Unavailable: permission denied", res.AddSuccess, res.AddCode, res.AddErr)
	}
	if n := len(d.Allocations()); n != 0 {
		t.Fatalf("%d addresses assigned after nobody's AddNetwork", n)
	}

	// Control: the same client, the socket opened to everyone.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	res = runAsNobody(t, bin, sock)
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	t.Logf("control, socket 0666: connect %q; AddNetwork success=%v", res.DialErr, res.AddSuccess)
	if res.DialErr != "" || !res.AddSuccess {
		t.Fatalf("control (socket 0666): connect %q, AddNetwork success=%v %q; the client could not have succeeded anyway",
			res.DialErr, res.AddSuccess, res.AddErr)
	}
	if n := len(d.Allocations()); n != 1 {
		t.Fatalf("control: %d addresses assigned, want 1", n)
	}
}

// copyTestBinary copies this test binary where nobody can execute it (the
// go build directory is root's, 0700).
func copyTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "vpccni-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "ipamd.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runAsNobody runs the client as uid/gid 65534 with no supplementary
// groups (an empty Credential.Groups clears them) and returns its result.
func runAsNobody(t *testing.T, bin, sock string) socketClientResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestNonRootCannotCallAddNetwork$", "-test.count=1")
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = []string{envSocketClient + "=" + sock, "PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as nobody: %v\nstdout: %s\nstderr: %s", err, out, stderr.Bytes())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), resultPrefix); ok {
			var res socketClientResult
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				t.Fatalf("client result %q: %v", line, err)
			}
			return res
		}
	}
	t.Fatalf("client printed no result:\n%s\nstderr: %s", out, stderr.Bytes())
	return socketClientResult{}
}
