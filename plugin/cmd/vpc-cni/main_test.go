package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCommandLine: --help and --version answer on stdout and exit 0; no
// argument goes on to CNI; anything else is an error on stderr, exit 2,
// instead of the CNI banner and success.
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args         []string
		code         int
		done         bool
		stdout, errs string
	}{
		{nil, exitOK, false, "", ""},
		{[]string{"--help"}, exitOK, true, "Network configuration fields:", ""},
		{[]string{"-h"}, exitOK, true, "pluginLogLevel", ""},
		{[]string{"--help"}, exitOK, true, `resultFormat        how the ADD result carries what DEL needs:
                      "reference" (default)`, ""},
		{[]string{"--version"}, exitOK, true, "vpc-cni " + buildVersion + "\n", ""},
		{[]string{"--bogus"}, exitUsage, true, "", `unknown flag "--bogus"`},
		{[]string{"-v"}, exitUsage, true, "", `unknown flag "-v"`},
		{[]string{"ADD"}, exitUsage, true, "", `unknown argument "ADD"`},
		{[]string{"--help", "--bogus"}, exitOK, true, "Network configuration fields:", ""},
	} {
		var out, errb bytes.Buffer
		code, done := commandLine(c.args, &out, &errb)
		if code != c.code || done != c.done || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.errs) ||
			(c.stdout == "") != (out.Len() == 0) || (c.errs == "") != (errb.Len() == 0) {
			t.Errorf("%q: exit %d done %v\nstdout %q\nstderr %q", c.args, code, done, out.String(), errb.String())
		}
	}
}
