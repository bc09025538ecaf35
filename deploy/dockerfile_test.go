package deploy

// A reader of deploy/Dockerfile, enough to tell where a file of the final
// image comes from: the build context, or the output of a build stage.

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"
)

// dockerfile is a Dockerfile's stages.
type dockerfile struct {
	stages []*stage
}

type stage struct {
	name         string   // the AS name, if any
	instructions []string // every instruction, continuation lines joined
	copies       []copyInstr
}

// copyInstr is one COPY (or ADD): from is the --from stage, "" for the
// build context.
type copyInstr struct {
	from string
	srcs []string
	dest string
}

// parseDockerfile reads the instructions; it knows what the checks need
// (FROM, COPY/ADD with flags) and keeps the rest as text.
func parseDockerfile(text string) (*dockerfile, error) {
	d := &dockerfile{}
	var logical []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") || t == "" { // Docker skips both, even within an instruction
			continue
		}
		if rest, ok := strings.CutSuffix(t, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(t)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, errors.New("the last instruction ends with a line continuation")
	}
	for _, ins := range logical {
		f := strings.Fields(ins)
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if len(d.stages) == 0 {
				continue // an ARG before the first FROM
			}
		case "FROM":
			s := &stage{}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				s.name = f[3]
			} else if len(f) != 2 {
				return nil, fmt.Errorf("FROM: want FROM image [AS name]: %q", ins)
			}
			d.stages = append(d.stages, s)
			continue
		}
		if len(d.stages) == 0 {
			return nil, fmt.Errorf("%q before the first FROM", ins)
		}
		s := d.stages[len(d.stages)-1]
		s.instructions = append(s.instructions, ins)
		if op := strings.ToUpper(f[0]); op == "COPY" || op == "ADD" {
			cp := copyInstr{}
			var args []string
			for _, a := range f[1:] {
				if v, ok := strings.CutPrefix(a, "--from="); ok {
					cp.from = v
				} else if !strings.HasPrefix(a, "--") {
					args = append(args, a)
				}
			}
			if len(args) < 2 || strings.HasPrefix(args[0], "[") {
				return nil, fmt.Errorf("%s: want %s [--flags] src... dest: %q", op, op, ins)
			}
			cp.srcs, cp.dest = args[:len(args)-1], args[len(args)-1]
			s.copies = append(s.copies, cp)
		}
	}
	if len(d.stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return d, nil
}

// source says where file p of the final image comes from: the stage it is
// copied from ("" for the build context) and its path there. The last
// COPY that writes p wins.
func (d *dockerfile) source(p string) (from, src string, err error) {
	final := d.stages[len(d.stages)-1]
	for i := len(final.copies) - 1; i >= 0; i-- {
		cp := final.copies[i]
		for _, s := range cp.srcs {
			if cp.dest == p && len(cp.srcs) == 1 || strings.HasSuffix(cp.dest, "/") && cp.dest+path.Base(s) == p {
				return cp.from, s, nil
			}
		}
	}
	return "", "", fmt.Errorf("%q is not in the image: no COPY in %s's last stage puts it there", p, dockerfilePath)
}

// contextFileAt is the build-context file the image has at p.
func (b *bundle) contextFileAt(p string) (string, error) {
	from, src, err := b.dockerfile.source(p)
	if err != nil {
		return "", err
	}
	if from != "" {
		return "", fmt.Errorf("the image's %s comes from stage %s, not from the repository", p, from)
	}
	return path.Clean(src), nil
}

// builtAt checks that the image's file p is a binary the build stage
// compiled from the Go package pkg (go build -o <file> <pkg>).
func (b *bundle) builtAt(p, pkg string) error {
	from, src, err := b.dockerfile.source(p)
	if err != nil {
		return err
	}
	for _, s := range b.dockerfile.stages {
		if s.name != from || from == "" {
			continue
		}
		built := regexp.MustCompile(`-o\s+` + regexp.QuoteMeta(src) + `\s+(\S+)`)
		for _, ins := range s.instructions {
			for _, m := range built.FindAllStringSubmatch(ins, -1) {
				if m[1] == pkg {
					return nil
				}
				return fmt.Errorf("the image's %s is built from %s, not %s", p, m[1], pkg)
			}
		}
		return fmt.Errorf("the image's %s: stage %s never builds %s (go build -o %s %s)", p, from, src, src, pkg)
	}
	return fmt.Errorf("the image's %s should be built from %s, but it comes from %q, which is no build stage", p, pkg, from)
}

func TestParseDockerfile(t *testing.T) {
	d, err := parseDockerfile(`ARG V=1
# comment
FROM golang:${V} AS build
RUN go build -o /out/a ./cmd/a && \
    go build -o /out/b ./cmd/b
FROM scratch
COPY --from=build /out/a /out/b /bin/
COPY --chmod=0755 x.sh /x.sh
COPY --from=build /out/a /sbin/a
`)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{dockerfile: d}
	for _, c := range []struct{ path, from, src string }{
		{"/bin/a", "build", "/out/a"}, {"/bin/b", "build", "/out/b"}, {"/x.sh", "", "x.sh"}, {"/sbin/a", "build", "/out/a"},
	} {
		from, src, err := d.source(c.path)
		if err != nil || from != c.from || src != c.src {
			t.Errorf("source(%s) = %q, %q, %v; want %q, %q", c.path, from, src, err, c.from, c.src)
		}
	}
	if _, _, err := d.source("/bin/c"); err == nil {
		t.Error("source(/bin/c): want an error")
	}
	if err := b.builtAt("/bin/b", "./cmd/b"); err != nil {
		t.Error(err)
	}
	if err := b.builtAt("/bin/b", "./cmd/a"); err == nil {
		t.Error("builtAt(/bin/b, ./cmd/a): want an error")
	}
	if err := b.builtAt("/x.sh", "./cmd/a"); err == nil {
		t.Error("builtAt(/x.sh): want an error (it comes from the context)")
	}
	for _, bad := range []string{"RUN x\n", "FROM a\nCOPY x\n", "FROM a\nRUN x \\\n"} {
		if _, err := parseDockerfile(bad); err == nil {
			t.Errorf("parseDockerfile(%q): want an error", bad)
		}
	}
}
