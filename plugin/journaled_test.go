package plugin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vpccni/vpccni/ipamd/rpc"
	"github.com/vpccni/vpccni/plugin/driver"
	"github.com/vpccni/vpccni/plugin/journal"
)

func readJournal(t *testing.T, path string) []journal.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := journal.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestJournalRecordsAddAndDel: one line per invocation with the CNI
// environment, stdin, the ipamd calls with their answers, the result or
// the error, and what the plugin found at CNI_NETNS.
func TestJournalRecordsAddAndDel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	r := newRig(t)
	conf := netconf(t, map[string]any{"journalFile": path})

	r.expectHandles(true)
	r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(addReplyDev1, nil)
	r.drv.EXPECT().Setup(r.host, r.pod, wantPod(2)).Return(nil)
	res, err := r.p.Add(cmdArgs(conf))
	if err != nil {
		t.Fatal(err)
	}

	// DEL with the pod's namespace gone and ipamd unreachable: torn down
	// from prevResult, success.
	var prev bytes.Buffer
	if err := res.PrintTo(&prev); err != nil {
		t.Fatal(err)
	}
	delConf := netconf(t, map[string]any{"journalFile": path, "prevResult": json.RawMessage(prev.Bytes())})
	r.expectHandles(false)
	r.drv.EXPECT().Teardown(r.host, nil, gomock.Any()).Return(driver.Report{}, nil)
	r.client.EXPECT().DelNetwork(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.Unavailable, "connection refused"))
	if err := r.p.Del(cmdArgs(delConf)); err != nil {
		t.Fatal(err)
	}

	es := readJournal(t, path)
	if len(es) != 2 {
		t.Fatalf("%d entries, want 2", len(es))
	}
	add, del := es[0], es[1]
	// Durations in milliseconds: a model call takes well under a second.
	for _, d := range []float64{add.DurationMs, del.DurationMs, add.Ipamd[0].DurationMs, del.Ipamd[0].DurationMs} {
		if d < 0 || d > 1000 {
			t.Errorf("duration %v ms", d)
		}
	}
	if add.Env.Command != "ADD" || add.Env.ContainerID != "c1" || add.Env.Netns != testNetns || add.Env.IfName != "eth0" || add.Env.Args != testArgs {
		t.Errorf("ADD env %+v", add.Env)
	}
	if add.Plugin != "test" || add.Format != journal.Format || add.Time.IsZero() {
		t.Errorf("ADD header %q %q %v", add.Plugin, add.Format, add.Time)
	}
	var stdin map[string]any
	if err := json.Unmarshal(add.Stdin, &stdin); err != nil || stdin["journalFile"] != path || stdin["name"] != "aws-cni" {
		t.Errorf("ADD stdin %s (%v)", add.Stdin, err)
	}
	if add.Netns == nil || !add.Netns.Exists || add.Netns.Path != testNetns {
		t.Errorf("ADD netns %+v", add.Netns)
	}
	if len(add.Ipamd) != 1 || add.Ipamd[0].Method != "AddNetwork" || add.Ipamd[0].Outcome != "ok" ||
		!strings.Contains(string(add.Ipamd[0].Reply), `"IPv4Addr":"10.0.2.11"`) || !strings.Contains(string(add.Ipamd[0].Request), `"ContainerID":"c1"`) {
		t.Errorf("ADD ipamd calls %+v", add.Ipamd)
	}
	if add.Error != nil || !strings.Contains(string(add.Result), `"10.0.2.11/32"`) || !strings.Contains(string(add.Result), "dummy0761ccbeace") {
		t.Errorf("ADD result %s error %v", add.Result, add.Error)
	}

	if del.Env.Command != "DEL" || del.Netns == nil || del.Netns.Exists {
		t.Errorf("DEL env %+v netns %+v", del.Env, del.Netns)
	}
	// First what the sandbox holds (nothing, in this ipamd's answer),
	// then the release.
	if len(del.Ipamd) != 2 || del.Ipamd[0].Method != "ListAllocations" || del.Ipamd[0].Outcome != "ok" ||
		del.Ipamd[1].Method != "DelNetwork" || del.Ipamd[1].Outcome != "unreachable" ||
		del.Ipamd[1].Code != "Unavailable" || del.Ipamd[1].Error != "connection refused" || del.Ipamd[1].Reply != nil {
		t.Errorf("DEL ipamd calls %+v", del.Ipamd)
	}
	if del.Error != nil || del.Result != nil {
		t.Errorf("DEL outcome %s %v", del.Result, del.Error)
	}
	if !strings.Contains(string(del.Stdin), `"prevResult"`) {
		t.Errorf("DEL stdin lacks the prevResult: %s", del.Stdin)
	}
}

// TestJournalRecordsErrors: a failed verb's CNI error, code and message.
func TestJournalRecordsErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	r := newRig(t)
	r.expectHandles(true)
	r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(&rpc.AddNetworkReply{Success: false}, nil)
	_, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"journalFile": path})))
	if err == nil {
		t.Fatal("ADD succeeded with Success=false")
	}
	// A netconf the plugin rejects is journaled too: it is an invocation.
	if err := r.p.Del(cmdArgs([]byte(`{"cniVersion":"1.0.0","name":"aws-cni","type":"vpc-cni","mtu":"1","journalFile":"` + path + `"}`))); err == nil {
		t.Fatal("DEL accepted mtu 1")
	}
	es := readJournal(t, path)
	if len(es) != 2 {
		t.Fatalf("%d entries", len(es))
	}
	if es[0].Error == nil || es[0].Error.Code != ErrNoAddress || es[0].Result != nil || es[0].Ipamd[0].Outcome != "refused" {
		t.Errorf("refused ADD: %+v %+v", es[0].Error, es[0].Ipamd)
	}
	if es[1].Error == nil || es[1].Error.Code != 7 || !strings.Contains(es[1].Error.Details, "mtu") || len(es[1].Ipamd) != 0 {
		t.Errorf("rejected DEL: %+v", es[1].Error)
	}
}

// TestJournalNeverChangesTheOutcome: a journal that cannot be written (a
// directory at its path, a symlink, one at its size limit) leaves the
// verb's outcome as it is.
func TestJournalNeverChangesTheOutcome(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.jsonl")
	if err := os.WriteFile(full, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(full, JournalMaxBytes); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, link, full, "relative.jsonl"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			r := newRig(t)
			var fallback bytes.Buffer
			r.p.env.Log = slog.New(slog.NewTextHandler(&fallback, nil))
			r.expectHandles(true)
			r.client.EXPECT().AddNetwork(gomock.Any(), gomock.Any()).Return(addReplyDev1, nil)
			r.drv.EXPECT().Setup(r.host, r.pod, wantPod(2)).Return(nil)
			if _, err := r.p.Add(cmdArgs(netconf(t, map[string]any{"journalFile": path}))); err != nil {
				t.Fatalf("ADD failed because of its journal: %v", err)
			}
			if !strings.Contains(fallback.String(), "journalFile not written") {
				t.Errorf("no warning on the fallback log: %q", fallback.String())
			}
		})
	}
	if fi, _ := os.Stat(full); fi.Size() != JournalMaxBytes {
		t.Errorf("the full journal grew to %d bytes", fi.Size())
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
		t.Error("the journal was written through a symlink")
	}
}
