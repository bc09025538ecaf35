package plugin

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang/mock/gomock"

	"github.com/vpccni/vpccni/plugin/driver"
)

// fileState is what a test compares to show a file was not touched.
type fileState struct {
	content string
	mode    os.FileMode
	mtime   time.Time
	nlink   uint64
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{content: string(b), mode: fi.Mode(), mtime: fi.ModTime(), nlink: uint64(fi.Sys().(*syscall.Stat_t).Nlink)}
}

// fakeSystemFile is a stand-in for a file an attacker would aim the log
// at (/etc/shadow, say): it lives in the test's own temp dir, never in
// /etc.
func fakeSystemFile(t *testing.T) string {
	t.Helper()
	etc := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(etc, "shadow-tmp")
	if err := os.WriteFile(p, []byte("root:*:19000:0:99999:7:::\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	// An old mtime, so a write (which would set it to now) shows.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLogFileCreated0600 checks that a new pluginLogFile is created with
// mode 0600 and receives the JSON records.
func TestLogFileCreated0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plugin.log")
	log, c, err := openLog(path, "debug")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "k", "v")
	c.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("log file: %v, mode %v, want a regular file 0600", err, fi.Mode())
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte(`"msg":"hello"`)) {
		t.Fatalf("log content %q", b)
	}
	// Appending to the file it made before works too.
	log, c, err = openLog(path, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("again")
	c.Close()
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 2 {
		t.Fatalf("log content after a second open %q", b)
	}
}

// TestLogFileSymlinkNotFollowed checks that a symlink planted at the
// pluginLogFile path is refused with an error that says so, and that the
// file it points at (a fake /etc file in a temp dir) is unchanged: same
// content, mode, mtime. A dangling symlink does not get its target
// created.
func TestLogFileSymlinkNotFollowed(t *testing.T) {
	target := fakeSystemFile(t)
	before := stateOf(t, target)
	logDir := t.TempDir()
	link := filepath.Join(logDir, "plugin.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, _, err := openLog(link, "info")
	if !errors.Is(err, errLogSymlink) || !strings.Contains(err.Error(), link) {
		t.Fatalf("openLog through a symlink: %v, want an error naming %s as a symbolic link", err, link)
	}
	if after := stateOf(t, target); !equalState(before, after) {
		t.Fatalf("symlink target changed: %+v -> %+v", before, after)
	}

	newTarget := filepath.Join(filepath.Dir(target), "created-by-plugin")
	dangling := filepath.Join(logDir, "dangling.log")
	if err := os.Symlink(newTarget, dangling); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openLog(dangling, "info"); !errors.Is(err, errLogSymlink) {
		t.Fatalf("openLog through a dangling symlink: %v", err)
	}
	if _, err := os.Lstat(newTarget); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dangling symlink's target was created: %v", err)
	}
}

func equalState(a, b fileState) bool {
	return a.content == b.content && a.mode == b.mode && a.mtime.Equal(b.mtime) && a.nlink == b.nlink
}

// TestLogFileOtherPlantsRefused checks the other things that can be put at
// the path: a hard link to another file (target unchanged), a FIFO (the
// open fails at once rather than blocking the plugin), a directory, a file
// owned by another user (root only), and a relative path.
func TestLogFileOtherPlantsRefused(t *testing.T) {
	dir := t.TempDir()

	target := fakeSystemFile(t)
	hard := filepath.Join(dir, "hard.log")
	if err := os.Link(target, hard); err != nil {
		t.Skipf("no hard link across temp dirs here: %v", err)
	}
	before := stateOf(t, target)
	if _, _, err := openLog(hard, "info"); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("hard link: %v", err)
	}
	if after := stateOf(t, target); !equalState(before, after) {
		t.Errorf("hard link target changed: %+v -> %+v", before, after)
	}

	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := openLog(fifo, "info"); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("FIFO accepted as the log file")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("openLog blocked on a FIFO")
	}

	if _, _, err := openLog(dir, "info"); err == nil {
		t.Error("a directory accepted as the log file")
	}

	if _, _, err := openLog("plugin.log", "info"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative path: %v", err)
	}

	if os.Geteuid() == 0 {
		foreign := filepath.Join(dir, "foreign.log")
		if err := os.WriteFile(foreign, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, _, err := openLog(foreign, "info"); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("file of another user: %v", err)
		}
		if b, _ := os.ReadFile(foreign); len(b) != 0 {
			t.Errorf("file of another user written: %q", b)
		}
	}
}

// TestLogFileProblemDoesNotFailDEL checks the decision that a log file
// that cannot be opened safely does not fail the verb: a DEL whose
// pluginLogFile is a symlink to a fake /etc file tears the pod down,
// tells ipamd and succeeds; the warning (naming the file and the reason)
// goes to the plugin's fallback log (stderr in the binary); the symlink's
// target is untouched.
func TestLogFileProblemDoesNotFailDEL(t *testing.T) {
	target := fakeSystemFile(t)
	before := stateOf(t, target)
	link := filepath.Join(t.TempDir(), "plugin.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	r := newRig(t)
	r.p.env.Log = slog.New(slog.NewTextHandler(&stderr, nil))
	r.expectHandles(true)
	gomock.InOrder(
		r.drv.EXPECT().Teardown(r.host, r.pod, leftVeth(prevPod)).Return(driver.Report{}, nil),
		r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).DoAndReturn(ipamdOK),
		r.drv.EXPECT().Teardown(r.host, r.pod, prevPod).Return(driver.Report{}, nil),
	)
	err := r.p.Del(cmdArgs(netconf(t, map[string]any{"pluginLogFile": link, "pluginLogLevel": "debug",
		"prevResult": refPrevResult(testHostVeth, "2", "0", "1")})))
	if err != nil {
		t.Fatalf("DEL with an unusable pluginLogFile = %v, want success", err)
	}
	if s := stderr.String(); !strings.Contains(s, "pluginLogFile not used") || !strings.Contains(s, "symbolic link") || !strings.Contains(s, link) {
		t.Errorf("fallback log does not explain: %s", s)
	}
	if after := stateOf(t, target); !equalState(before, after) {
		t.Fatalf("symlink target changed: %+v -> %+v", before, after)
	}
}
