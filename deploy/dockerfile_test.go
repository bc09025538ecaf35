package deploy

// A reader of deploy/Dockerfile, enough to tell where a file of a target
// image comes from (the build context, or a build stage's go build or go
// install) and what the image runs (its ENTRYPOINT).

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
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
	// entrypoint is the exec-form ENTRYPOINT, the last one; shellEntry
	// is set when the last one is in shell form (it needs /bin/sh).
	entrypoint []string
	shellEntry bool
}

// label names a stage in messages.
func (s *stage) label(d *dockerfile) string {
	if s == d.last() {
		return "the default target (last stage)"
	}
	return "target " + s.name
}

// copyInstr is one COPY (or ADD): from is the --from stage, "" for the
// build context.
type copyInstr struct {
	from string
	srcs []string
	dest string
}

// parseDockerfile reads the instructions; it knows what the checks need
// (FROM, COPY/ADD with flags, ENTRYPOINT) and keeps the rest as text.
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
		op := strings.ToUpper(f[0])
		switch op {
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
		switch op {
		case "COPY", "ADD":
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
		case "ENTRYPOINT":
			rest := strings.TrimSpace(ins[len(f[0]):])
			s.entrypoint, s.shellEntry = nil, false
			if err := json.Unmarshal([]byte(rest), &s.entrypoint); err != nil {
				s.shellEntry = true
			}
		}
	}
	if len(d.stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return d, nil
}

// last is the default target.
func (d *dockerfile) last() *stage { return d.stages[len(d.stages)-1] }

// named is the stage of that name.
func (d *dockerfile) named(name string) (*stage, error) {
	for _, s := range d.stages {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s has no stage named %s", dockerfilePath, name)
}

// source says where file p of stage st comes from: the stage it is
// copied from ("" for the build context) and its path there. The last
// COPY that writes p wins. A source ending in / is a directory whose
// contents are copied under dest.
func (d *dockerfile) source(st *stage, p string) (from, src string, err error) {
	for i := len(st.copies) - 1; i >= 0; i-- {
		cp := st.copies[i]
		for _, s := range cp.srcs {
			dir := strings.HasSuffix(cp.dest, "/")
			switch {
			case cp.dest == p && len(cp.srcs) == 1 && !strings.HasSuffix(s, "/"):
				return cp.from, s, nil
			case dir && strings.HasSuffix(s, "/") && strings.HasPrefix(p, cp.dest):
				return cp.from, s + strings.TrimPrefix(p, cp.dest), nil
			case dir && !strings.HasSuffix(s, "/") && cp.dest+path.Base(s) == p:
				return cp.from, s, nil
			}
		}
	}
	return "", "", fmt.Errorf("%q is not in the image: no COPY of %s's %s puts it there", p, dockerfilePath, st.label(d))
}

// contextFileAt is the build-context file stage st has at p.
func (b *bundle) contextFileAt(st *stage, p string) (string, error) {
	from, src, err := b.dockerfile.source(st, p)
	if err != nil {
		return "", err
	}
	if from != "" {
		return "", fmt.Errorf("the image's %s comes from stage %s, not from the repository", p, from)
	}
	return path.Clean(src), nil
}

// argValue is the default of ARG name in stage s ("" if none).
func (s *stage) argValue(name string) string {
	for _, ins := range s.instructions {
		f := strings.Fields(ins)
		if len(f) == 2 && strings.EqualFold(f[0], "ARG") {
			if k, v, ok := strings.Cut(f[1], "="); ok && k == name {
				return v
			}
		}
	}
	return ""
}

// argRef is a ${NAME} or $NAME reference.
var argRef = regexp.MustCompile(`^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$`)

// build is how a file of a build stage is made: go build -o FILE PKG, or
// GOBIN=DIR go install PKG@VERSION (VERSION resolved from the stage's ARG).
type build struct {
	pkg, version string
}

// builtBy finds how the file src of stage from is made.
func (d *dockerfile) builtBy(from, src string) (build, error) {
	if from == "" {
		return build{}, fmt.Errorf("%s comes from the build context, not from a build stage", src)
	}
	st, err := d.named(from)
	if err != nil {
		return build{}, err
	}
	built := regexp.MustCompile(`-o\s+` + regexp.QuoteMeta(src) + `\s+(\S+)`)
	for _, ins := range st.instructions {
		if m := built.FindStringSubmatch(ins); m != nil {
			return build{pkg: m[1]}, nil
		}
		f := strings.Fields(ins)
		if !strings.Contains(ins, "go install") || !slices.Contains(f, "GOBIN="+path.Dir(src)) {
			continue
		}
		for _, a := range f {
			pkg, ver, ok := strings.Cut(a, "@")
			if !ok || path.Base(pkg) != path.Base(src) {
				continue
			}
			if m := argRef.FindStringSubmatch(ver); m != nil {
				ver = st.argValue(m[1])
			}
			return build{pkg: pkg, version: ver}, nil
		}
	}
	return build{}, fmt.Errorf("stage %s never builds %s (go build -o %s PKG, or GOBIN=%s go install PKG@VERSION)", from, src, src, path.Dir(src))
}

// builtAt checks that file p of stage st is the binary of Go package pkg,
// and returns how it is built.
func (b *bundle) builtAt(st *stage, p, pkg string) (build, error) {
	from, src, err := b.dockerfile.source(st, p)
	if err != nil {
		return build{}, err
	}
	bu, err := b.dockerfile.builtBy(from, src)
	if err != nil {
		return build{}, fmt.Errorf("the image's %s: %w", p, err)
	}
	if bu.pkg != pkg {
		return bu, fmt.Errorf("the image's %s is built from %s, not %s", p, bu.pkg, pkg)
	}
	return bu, nil
}

func TestParseDockerfile(t *testing.T) {
	d, err := parseDockerfile(`ARG V=1
# comment
FROM golang:${V} AS build
ARG TOOL_VERSION=v9
RUN go build -o /out/a ./cmd/a && \
    go build -o /out/d/b ./cmd/b
RUN GOBIN=/out/d go install example.com/x/tool@${TOOL_VERSION}
FROM scratch AS small
COPY --from=build /out/a /a
ENTRYPOINT /a run
FROM scratch
COPY --from=build /out/a /bin/
COPY --from=build /out/d/ /opt/
COPY --chmod=0755 x.sh /x.sh
COPY --from=build /out/a /sbin/a
ENTRYPOINT ["/bin/a", "run"]
`)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{dockerfile: d}
	last := d.last()
	for _, c := range []struct{ path, from, src string }{
		{"/bin/a", "build", "/out/a"}, {"/opt/b", "build", "/out/d/b"}, {"/x.sh", "", "x.sh"}, {"/sbin/a", "build", "/out/a"},
	} {
		from, src, err := d.source(last, c.path)
		if err != nil || from != c.from || src != c.src {
			t.Errorf("source(%s) = %q, %q, %v; want %q, %q", c.path, from, src, err, c.from, c.src)
		}
	}
	if _, _, err := d.source(last, "/bin/c"); err == nil {
		t.Error("source(/bin/c): want an error")
	}
	if _, err := b.builtAt(last, "/opt/b", "./cmd/b"); err != nil {
		t.Error(err)
	}
	if _, err := b.builtAt(last, "/opt/b", "./cmd/a"); err == nil {
		t.Error("builtAt(/opt/b, ./cmd/a): want an error")
	}
	if bu, err := b.builtAt(last, "/opt/tool", "example.com/x/tool"); err != nil || bu.version != "v9" {
		t.Errorf("builtAt(/opt/tool) = %+v, %v; want version v9", bu, err)
	}
	if _, err := b.builtAt(last, "/x.sh", "./cmd/a"); err == nil {
		t.Error("builtAt(/x.sh): want an error (it comes from the context)")
	}
	if got := strings.Join(last.entrypoint, " "); got != "/bin/a run" || last.shellEntry {
		t.Errorf("entrypoint %q (shell form %v)", got, last.shellEntry)
	}
	if small, err := d.named("small"); err != nil || !small.shellEntry {
		t.Errorf("stage small: %v; want its shell-form ENTRYPOINT noticed", err)
	}
	for _, bad := range []string{"RUN x\n", "FROM a\nCOPY x\n", "FROM a\nRUN x \\\n"} {
		if _, err := parseDockerfile(bad); err == nil {
			t.Errorf("parseDockerfile(%q): want an error", bad)
		}
	}
}
