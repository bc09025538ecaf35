package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// nodeAudit is the part of vpccni-audit's --json the drain specs read.
type nodeAudit struct {
	Sources []struct {
		Source, Where, Note string
		Read                bool
	}
	Findings []struct {
		Class, Addr, Object string
		Fixable             bool
	}
}

// objects lists the findings as "CLASS ADDR OBJECT", "[fix]" for those
// --fix may remove.
func (a nodeAudit) objects() []string {
	var out []string
	for _, f := range a.Findings {
		s := f.Class + " " + f.Addr + " " + f.Object
		if f.Fixable {
			s += " [fix]"
		}
		out = append(out, s)
	}
	return out
}

// auditNode runs the aws-node image's vpccni-audit as an operator's
// hostNetwork pod would: in the node's network namespace, reading the
// checkpoint aws-node writes, real containerd's sandboxes over its CRI
// socket and ipamd's introspection at its default address. It returns
// the exit code and the report.
func (n *node) auditNode(deletePolicy string) (int, nodeAudit) {
	build := "vpccni"
	if deletePolicy != "" {
		build = deletePolicy
	}
	bin := filepath.Join(binDir, "images", build, "app", "vpccni-audit")
	var stdout, stderr bytes.Buffer
	var runErr error
	Expect(n.NS.Do(func() error {
		cmd := exec.Command(bin, "--json", "--checkpoint", n.Checkpoint(), "--cri-endpoint", "unix://"+n.cri.sock)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr = cmd.Run()
		return nil
	})).To(Succeed())
	code := 0
	if ee, ok := runErr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		Expect(runErr).NotTo(HaveOccurred())
	}
	GinkgoWriter.Printf("vpccni-audit: exit %d\n%s%s", code, stdout.String(), stderr.String())
	AddReportEntry("vpccni-audit", stdout.String())
	var rep nodeAudit
	Expect(json.Unmarshal(stdout.Bytes(), &rep)).To(Succeed(), "vpccni-audit --json: %s %s", stdout.String(), stderr.String())
	for _, s := range rep.Sources {
		if s.Source == "runtime" || s.Source == "ipamd" {
			Expect(s.Read).To(BeTrue(), "vpccni-audit read no %s at %s: %s", s.Source, s.Where, s.Note)
		}
	}
	return code, rep
}

// expectAuditAgrees: the audit, from what an operator can read, finds what
// the drain's own checks found, as its classes name it: a deleted pod's
// rule left behind is LEAKED and fixable, a live pod ipamd no longer holds
// is MISSING its allocation (the runtime says it is ready); a node the
// checks find clean, the audit finds clean.
func expectAuditAgrees(code int, rep nodeAudit, drain []string, deleted, live []*sandbox) {
	var want []string
	for _, s := range deleted {
		a := s.ip.String()
		for _, f := range drain {
			switch f {
			case "rule left behind: 512 to " + s.ip.String() + "/32 lookup main (" + s.name + ", deleted)":
				want = append(want, "LEAKED "+a+" rule 512: from all to "+a+" lookup main [fix]")
			case "rule left behind: 1536 from " + s.ip.String() + "/32 lookup 2 (" + s.name + ", deleted)":
				want = append(want, "LEAKED "+a+" rule 1536: from "+a+" lookup 2 [fix]")
			}
		}
	}
	for _, s := range live {
		a := s.ip.String()
		if slices.Contains(drain, "ipamd no longer holds "+a+" ("+s.name+", live)") {
			want = append(want, "MISSING "+a+" allocation of "+a)
		}
	}
	Expect(rep.objects()).To(ConsistOf(want), "the drain's checks found %q", drain)
	if len(want) == 0 {
		Expect(code).To(Equal(0))
	} else {
		Expect(code).To(Equal(1))
	}
}
