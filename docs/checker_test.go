package docs

// The checker: pure functions over an fs.FS rooted at the repository, so
// the tests can feed them the real tree or a deliberately broken one.

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Anchors returns the anchors GitHub gives the headings of a Markdown
// file: the heading's text as rendered (inline code and link markup
// dropped), lower-cased, every character that is not a letter, a digit,
// a space, a hyphen or an underscore removed, spaces turned into hyphens;
// a repeated anchor gets -1, -2, … Headings inside fenced code blocks do
// not count.
func Anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(md) {
		m := atxHeading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	inlineLink   = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	codeSpan     = regexp.MustCompile("`+[^`]*`+")
	emphasisMark = regexp.MustCompile(`(\*+|\b_+|_+\b)`)
)

// Slug is GitHub's anchor for a heading's text.
func Slug(heading string) string {
	text := inlineLink.ReplaceAllString(heading, "$1")
	text = strings.ReplaceAll(text, "`", "")
	text = emphasisMark.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// line is one line of a Markdown file with its number.
type line struct {
	n    int
	text string
}

// fence is a fenced code block: its info string and its lines.
type fence struct {
	info  string
	lines []line
}

var fenceOpen = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")

// split separates a Markdown file into the lines outside fenced code
// blocks and the fenced blocks themselves.
func split(md []byte) (prose []line, fences []fence) {
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var cur *fence
	marker := ""
	for n := 1; sc.Scan(); n++ {
		t := sc.Text()
		if cur != nil {
			if strings.HasPrefix(strings.TrimSpace(t), marker) && strings.Trim(strings.TrimSpace(t), marker[:1]) == "" {
				fences = append(fences, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, line{n, t})
			continue
		}
		if m := fenceOpen.FindStringSubmatch(t); m != nil {
			cur, marker = &fence{info: m[2]}, m[1]
			continue
		}
		prose = append(prose, line{n, t})
	}
	if cur != nil {
		fences = append(fences, *cur)
	}
	return prose, fences
}

func proseLines(md []byte) []line { p, _ := split(md); return p }

// CheckLinks reports every relative link of the Markdown file name (a
// slash path in fsys) that does not resolve: a missing file or
// directory, a link out of the repository, or an #anchor that is no
// heading of the Markdown file it points at. Links with a scheme
// (https:, mailto:) are not followed.
func CheckLinks(fsys fs.FS, name string) []string {
	md, err := fs.ReadFile(fsys, name)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	var probs []string
	for _, l := range proseLines(md) {
		text := codeSpan.ReplaceAllString(l.text, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			target := m[2]
			if target == "" || hasScheme(target) {
				continue
			}
			if p := resolveLink(fsys, name, md, target); p != "" {
				probs = append(probs, fmt.Sprintf("%s:%d: link %q: %s", name, l.n, target, p))
			}
		}
	}
	return probs
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func hasScheme(target string) bool { return scheme.MatchString(target) }

// resolveLink says what is wrong with a link target of file name ("" if
// nothing): its path is relative to the file's directory.
func resolveLink(fsys fs.FS, name string, md []byte, target string) string {
	file, anchor, _ := strings.Cut(target, "#")
	if strings.HasPrefix(file, "/") {
		return "an absolute path: links must be relative to the file"
	}
	dest := name
	if file != "" {
		dest = path.Join(path.Dir(name), file)
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "points outside the repository"
		}
		if _, err := fs.Stat(fsys, dest); err != nil {
			return fmt.Sprintf("%s does not exist", dest)
		}
	}
	if anchor == "" {
		return ""
	}
	return checkAnchor(fsys, dest, anchor, md, name)
}

// checkAnchor says what is wrong with #anchor in Markdown file dest.
// (self and selfName let a file's own anchors be checked without
// reading it again.)
func checkAnchor(fsys fs.FS, dest, anchor string, self []byte, selfName string) string {
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Sprintf("#%s: %s is not a Markdown file", anchor, dest)
	}
	md := self
	if dest != selfName {
		var err error
		if md, err = fs.ReadFile(fsys, dest); err != nil {
			return fmt.Sprintf("%s: %v", dest, err)
		}
	}
	if !Anchors(md)[anchor] {
		return fmt.Sprintf("no heading of %s has the anchor #%s (it has: %s)", dest, anchor, strings.Join(sortedKeys(Anchors(md)), ", "))
	}
	return ""
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// citation finds a docs/ path (with its anchor, if any) in source text.
// It must not follow a path or word character, so URLs such as
// example.org/docs/x and import paths are left alone.
var citation = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(docs/[A-Za-z0-9_-][A-Za-z0-9_./-]*)(#[A-Za-z0-9_-]+)?`)

// citingFile says which files CheckCitations reads.
func citingFile(name string) bool {
	base := path.Base(name)
	switch path.Ext(base) {
	case ".go", ".yaml", ".yml", ".sh":
		return true
	}
	return base == "Makefile"
}

// CheckCitations reports every docs/ path cited in a Go, YAML or shell
// file or the Makefile under fsys that does not exist, and every cited
// #anchor that is no heading of the cited file. Paths are from the
// repository's root. .git, bin and hidden directories are skipped.
// (Markdown files are CheckLinks's.)
func CheckCitations(fsys fs.FS) []string {
	var probs []string
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name != "." && (strings.HasPrefix(d.Name(), ".") || name == "bin") {
				return fs.SkipDir
			}
			return nil
		}
		if !citingFile(name) {
			return nil
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		for i, l := range strings.Split(string(b), "\n") {
			for _, m := range citation.FindAllStringSubmatch(l, -1) {
				file := strings.TrimRight(m[1], ".")
				if _, err := fs.Stat(fsys, file); err != nil {
					probs = append(probs, fmt.Sprintf("%s:%d: cites %s, which does not exist", name, i+1, file))
					continue
				}
				if m[2] != "" {
					if p := checkAnchor(fsys, file, m[2][1:], nil, ""); p != "" {
						probs = append(probs, fmt.Sprintf("%s:%d: cites %s%s: %s", name, i+1, file, m[2], p))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		probs = append(probs, err.Error())
	}
	return probs
}

// MakeTargets parses the explicit targets of a Makefile: names before a
// ":" (not ":=" or "::=") at the start of a line, .PHONY and other
// special targets left out.
func MakeTargets(makefile []byte) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(string(makefile), "\n") {
		m := makeRule.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") {
				out[t] = true
			}
		}
	}
	return out
}

var makeRule = regexp.MustCompile(`^([A-Za-z0-9_.%-]+(?:[ \t]+[A-Za-z0-9_.%-]+)*)[ \t]*:(?:[^=]|$)`)

// Commands are what CheckCommands needs to know about the repository's
// commands.
type Commands struct {
	// MakeTargets are the Makefile's targets.
	MakeTargets map[string]bool
	// ReplaySubcommand says whether the replay command accepts sub.
	ReplaySubcommand func(sub string) bool
}

// replayCmd is how a README names the harness's command.
const replayCmd = "./scenarios/cmd/replay"

// CheckCommands reports every command of the Markdown file name's fenced
// sh blocks (and of its inline code spans that start with "make ",
// "replay " or "go run ") that does not resolve: a make target the
// Makefile lacks, a replay subcommand the command does not have, a go
// package directory or a file argument (a relative path, or a glob) that
// matches nothing in fsys.
func CheckCommands(fsys fs.FS, name string, cmds Commands) []string {
	md, err := fs.ReadFile(fsys, name)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	prose, fences := split(md)
	var probs []string
	check := func(n int, cmd string) {
		for _, p := range checkCommand(fsys, cmd, cmds) {
			probs = append(probs, fmt.Sprintf("%s:%d: %q: %s", name, n, cmd, p))
		}
	}
	for _, f := range fences {
		switch f.info {
		case "sh", "bash", "shell", "console":
		default:
			continue
		}
		for _, c := range shellCommands(f.lines) {
			check(c.n, c.text)
		}
	}
	for _, l := range prose {
		for _, span := range codeSpan.FindAllString(l.text, -1) {
			s := strings.Trim(span, "`")
			if strings.HasPrefix(s, "make ") || strings.HasPrefix(s, "replay ") || strings.HasPrefix(s, "go run ") {
				check(l.n, s)
			}
		}
	}
	return probs
}

// shellCommands joins continued lines, drops comments and splits the
// result on ;, &&, || and | into simple commands.
func shellCommands(lines []line) []line {
	var out []line
	var cur strings.Builder
	start := 0
	for _, l := range lines {
		t := l.text
		if cur.Len() == 0 {
			start = l.n
		}
		if i := commentStart(t); i >= 0 {
			t = t[:i]
		}
		t = strings.TrimRight(t, " \t")
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		if strings.HasSuffix(t, "|") {
			cur.WriteString(t + " ")
			continue
		}
		cur.WriteString(t)
		for _, c := range shellSep.Split(cur.String(), -1) {
			if c = strings.Join(strings.Fields(c), " "); c != "" {
				out = append(out, line{start, c})
			}
		}
		cur.Reset()
	}
	return out
}

// shellSep separates simple commands: &&, ||, ;, | and a background &
// (not the & of a redirection such as 2>&1).
var shellSep = regexp.MustCompile(`\s*(?:&&|\|\||;|\|)\s*|\s+&(?:\s+|$)`)

// commentStart is where a shell comment starts in t (-1 for none): a #
// at the start or after a blank, outside quotes.
func commentStart(t string) int {
	var quote rune
	for i, r := range t {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || t[i-1] == ' ' || t[i-1] == '\t'):
			return i
		}
	}
	return -1
}

// checkCommand checks one simple command.
func checkCommand(fsys fs.FS, cmd string, cmds Commands) []string {
	args := strings.Fields(cmd)
	// Leading VAR=value assignments and env.
	for len(args) > 0 && (strings.Contains(args[0], "=") || args[0] == "env" || args[0] == "sudo") {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil
	}
	var probs []string
	switch {
	case args[0] == "make":
		for _, a := range args[1:] {
			if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
				continue
			}
			if !cmds.MakeTargets[a] {
				probs = append(probs, fmt.Sprintf("make has no target %q", a))
			}
		}
		return probs
	case args[0] == "go" && len(args) > 2 && args[1] == "run" && path.Clean(args[2]) == path.Clean(replayCmd):
		args = append([]string{"replay"}, args[3:]...)
	case args[0] == "go" && len(args) > 1 && (args[1] == "run" || args[1] == "test" || args[1] == "build" || args[1] == "vet"):
		for _, a := range args[2:] {
			if strings.HasPrefix(a, "./") {
				if _, err := fs.Stat(fsys, path.Clean(strings.TrimSuffix(a, "..."))); err != nil {
					probs = append(probs, fmt.Sprintf("no package directory %s", a))
				}
			}
		}
		return probs
	}
	if args[0] != "replay" {
		return nil
	}
	if len(args) < 2 {
		return nil // the command named, not run: "replay is go run ./scenarios/cmd/replay"
	}
	sub := args[1]
	if sub != "--help" && sub != "-h" && !cmds.ReplaySubcommand(sub) {
		probs = append(probs, fmt.Sprintf("replay has no subcommand %q", sub))
	}
	for _, a := range args[2:] {
		if p := checkFileArg(fsys, a); p != "" {
			probs = append(probs, p)
		}
	}
	return probs
}

// checkFileArg checks an argument that names files of the repository: a
// relative path with a slash, or a glob. Anything else (flags, values,
// absolute node paths, $VARS) is not checked.
func checkFileArg(fsys fs.FS, a string) string {
	if strings.HasPrefix(a, "-") || strings.HasPrefix(a, "/") || strings.ContainsAny(a, "$=…<>") {
		return ""
	}
	if !strings.Contains(a, "/") && !strings.ContainsAny(a, "*?[") {
		return ""
	}
	p := path.Clean(a)
	if strings.ContainsAny(p, "*?[") {
		m, err := fs.Glob(fsys, p)
		if err != nil {
			return fmt.Sprintf("bad glob %s: %v", a, err)
		}
		if len(m) == 0 {
			return fmt.Sprintf("%s matches no file", a)
		}
		return ""
	}
	if _, err := fs.Stat(fsys, p); err != nil {
		return fmt.Sprintf("%s does not exist", a)
	}
	return ""
}
