package doccheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Problem is a name in a document that names nothing.
type Problem struct {
	File string // the document, relative to the root
	Line int    // 1-based
	Text string // what is wrong
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Text) }

// Options say what to check.
type Options struct {
	// Root is the repository's root directory.
	Root string
	// Docs are the documents, relative to Root. Default: DefaultDocs.
	Docs []string
	// CLI is the root of the stated command tree; nil skips the command
	// and flag checks.
	CLI *cobra.Command
}

// DefaultDocs lists the documents of root: README.md, CONTRIBUTING.md,
// docs/*.md and clients/*/README.md, those that exist.
func DefaultDocs(root string) ([]string, error) {
	var docs []string
	for _, pat := range []string{"README.md", "CONTRIBUTING.md", "docs/*.md", "clients/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pat)))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("doccheck: no document under %s", root)
	}
	return docs, nil
}

// Check reads every document and returns the problems found, in document
// and line order. The error is for what stops the check itself (an
// unreadable document or source tree).
func Check(o Options) ([]Problem, error) {
	if o.Root == "" {
		return nil, errors.New("doccheck: no root")
	}
	docs := o.Docs
	if docs == nil {
		var err error
		if docs, err = DefaultDocs(o.Root); err != nil {
			return nil, err
		}
	}
	ix, err := buildIndex(o.Root, o.CLI)
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, d := range docs {
		data, err := os.ReadFile(filepath.Join(o.Root, filepath.FromSlash(d)))
		if err != nil {
			return nil, err
		}
		out = append(out, ix.checkDoc(d, string(data))...)
	}
	return out, nil
}

// index is what the documents are checked against.
type index struct {
	root string
	// top are the repository's top-level entries (not those .gitignore
	// names with a leading slash: build outputs and data dirs).
	top map[string]bool
	// tests maps a package directory ("." for the root, "api/client") to
	// the names of its Test, Benchmark, Fuzz and Example functions.
	tests map[string][]string
	// allTests holds every such name.
	allTests map[string]bool
	cli      *cobra.Command
	// flags are every stated command's flags and the repository scripts'.
	flags map[string]bool
}

var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

// scriptFlagRE finds the long options a script, a client or an example
// takes.
var scriptFlagRE = regexp.MustCompile(`--[a-z][a-z0-9-]*`)

func buildIndex(root string, cli *cobra.Command) (*index, error) {
	ix := &index{root: root, top: map[string]bool{}, tests: map[string][]string{}, allTests: map[string]bool{}, cli: cli, flags: map[string]bool{}}
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
				ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, ".") && !ignored[n] {
			ix.top[n] = true
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasSuffix(name, "_test.go"):
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			dir := path.Dir(rel)
			for _, m := range testFuncRE.FindAllStringSubmatch(string(b), -1) {
				ix.tests[dir] = append(ix.tests[dir], m[1])
				ix.allTests[m[1]] = true
			}
		case strings.HasPrefix(rel, "scripts/") || strings.HasPrefix(rel, "clients/") || strings.HasPrefix(rel, "examples/"):
			// What the scripts, the clients (their CLIs, their build
			// files' JVM or npm options) and the examples take.
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, f := range scriptFlagRE.FindAllString(string(b), -1) {
				ix.flags[strings.TrimPrefix(f, "--")] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cli != nil {
		cli.InitDefaultVersionFlag()
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			c.InitDefaultHelpFlag()
			add := func(f *pflag.Flag) { ix.flags[f.Name] = true }
			c.Flags().VisitAll(add)
			c.PersistentFlags().VisitAll(add)
			for _, s := range c.Commands() {
				walk(s)
			}
		}
		walk(cli)
	}
	return ix, nil
}

// plannedRE declares a path another change adds (see the package doc).
var plannedRE = regexp.MustCompile(`<!--\s*doccheck:\s*not built yet:\s*(\S+)\s*-->`)

// docState is one document being checked.
type docState struct {
	ix      *index
	file    string
	planned map[string]bool
	out     []Problem
}

func (d *docState) bad(line int, format string, args ...any) {
	d.out = append(d.out, Problem{File: d.file, Line: line, Text: fmt.Sprintf(format, args...)})
}

var fenceRE = regexp.MustCompile("^\\s{0,3}(`{3,}|~{3,})\\s*([A-Za-z0-9_+-]*)")

// shellLangs are the fenced blocks whose lines are read as commands.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "text": true}

func (ix *index) checkDoc(file, text string) []Problem {
	d := &docState{ix: ix, file: file, planned: map[string]bool{}}
	for _, m := range plannedRE.FindAllStringSubmatch(text, -1) {
		d.planned[m[1]] = true
	}
	lines := strings.Split(text, "\n")
	var para []string
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			d.prose(paraStart, strings.Join(para, "\n"))
		}
		para = nil
	}
	inFence, fence, lang := false, "", ""
	prevBlank := true
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if inFence {
			if strings.HasPrefix(strings.TrimSpace(l), fence) {
				inFence = false
				continue
			}
			if shellLangs[lang] {
				i = d.codeLine(lines, i)
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			flush()
			inFence, fence, lang = true, m[1], strings.ToLower(m[2])
			continue
		}
		blank := strings.TrimSpace(l) == ""
		if !blank && prevBlank && len(para) == 0 && (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) {
			// An indented code block: its lines until a line that is
			// neither blank nor indented.
			for ; i < len(lines); i++ {
				l := lines[i]
				if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "    ") && !strings.HasPrefix(l, "\t") {
					i--
					break
				}
				i = d.codeLine(lines, i)
			}
			prevBlank = false
			continue
		}
		if blank || strings.HasPrefix(l, "#") {
			flush()
			if !blank {
				d.prose(i+1, l)
			}
			prevBlank = blank
			continue
		}
		if len(para) == 0 {
			paraStart = i + 1
		}
		para = append(para, l)
		prevBlank = false
	}
	flush()
	return d.out
}

// codeLine checks line i of a code block, joined with the lines its
// trailing backslashes continue, and returns the last line it read.
func (d *docState) codeLine(lines []string, i int) int {
	start := i
	l := lines[i]
	for strings.HasSuffix(strings.TrimRight(l, " "), "\\") && i+1 < len(lines) {
		i++
		l = strings.TrimSuffix(strings.TrimRight(l, " "), "\\") + " " + strings.TrimSpace(lines[i])
	}
	t := strings.TrimSpace(l)
	if strings.HasPrefix(t, "#") || strings.HasPrefix(t, "//") {
		return i
	}
	if i := strings.Index(t, " #"); i >= 0 {
		t = t[:i] // a shell comment
	}
	d.commands(start+1, t, true)
	d.paths(start+1, t)
	return i
}

var (
	spanRE = regexp.MustCompile("(`+)([^`]+?)(`+)")
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// testNameRE is a span that is a Go test, benchmark or fuzz target.
	testNameRE = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*$`)
	// loneFlagRE is a span that is a flag alone, with at most a value.
	loneFlagRE = regexp.MustCompile(`^--([a-z][a-z0-9-]*)(?:[ =][^ ]*)?$`)
)

// prose checks a paragraph's code spans and relative links; start is the
// line of its first line.
func (d *docState) prose(start int, text string) {
	lineOf := func(off int) int { return start + strings.Count(text[:off], "\n") }
	for _, m := range spanRE.FindAllStringSubmatchIndex(text, -1) {
		if m[3]-m[2] != m[7]-m[6] {
			continue // unbalanced backtick runs
		}
		span := strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(text[m[4]:m[5]], "\n", " "), `\|`, "|"))
		line := lineOf(m[0])
		switch {
		case testNameRE.MatchString(span):
			if !d.ix.allTests[span] {
				d.bad(line, "`%s`: no _test.go file defines it", span)
			}
			continue
		case loneFlagRE.MatchString(span):
			name := loneFlagRE.FindStringSubmatch(span)[1]
			if d.ix.cli != nil && !d.ix.flags[name] {
				d.bad(line, "`%s`: no stated command takes --%s, nor does a file under scripts/, clients/ or examples/ name it (write the command it belongs to)", span, name)
			}
			continue
		}
		d.commands(line, span, false)
		d.paths(line, span)
	}
	// Links outside code spans.
	plain := spanRE.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, m := range linkRE.FindAllStringSubmatchIndex(plain, -1) {
		target := plain[m[2]:m[3]]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		rel := path.Clean(path.Join(path.Dir(d.file), target))
		if d.planned[rel] || d.planned[target] {
			continue
		}
		if _, err := os.Stat(filepath.Join(d.ix.root, filepath.FromSlash(rel))); err != nil {
			d.bad(lineOf(m[0]), "link (%s): %s does not exist", target, rel)
		}
	}
}

// pathRE finds path-like words; pathOK rejects the matches that are part
// of a larger word (a URL, a placeholder).
var pathRE = regexp.MustCompile(`(?:\./)?[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)+/?`)

const (
	notBefore = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:~$<>@%-"
	notAfter  = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/<>*{$@%-"
)

// paths checks the repository paths in s.
func (d *docState) paths(line int, s string) {
	for _, m := range pathRE.FindAllStringIndex(s, -1) {
		if m[0] > 0 && strings.ContainsRune(notBefore, rune(s[m[0]-1])) {
			continue
		}
		if m[1] < len(s) && strings.ContainsRune(notAfter, rune(s[m[1]])) {
			continue
		}
		p := strings.TrimPrefix(s[m[0]:m[1]], "./")
		p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
		p = strings.TrimRight(p, ".")
		first, _, _ := strings.Cut(p, "/")
		if !d.ix.top[first] || d.planned[p] {
			continue
		}
		if !d.exists(p) {
			d.bad(line, "%s: no such file or directory in the repository", p)
		}
	}
}

// goIdentRE is a Go package path followed by one of its identifiers
// (`cluster/raftlog.Store`, `tiered/localfs.Store.Prepare`).
var goIdentRE = regexp.MustCompile(`^(.*/[a-z0-9_]+)\.[A-Z][A-Za-z0-9_.]*$`)

// exists says whether p names a file or directory of the repository, or
// an identifier of a package directory.
func (d *docState) exists(p string) bool {
	if _, err := os.Stat(filepath.Join(d.ix.root, filepath.FromSlash(p))); err == nil {
		return true
	}
	if m := goIdentRE.FindStringSubmatch(p); m != nil {
		fi, err := os.Stat(filepath.Join(d.ix.root, filepath.FromSlash(m[1])))
		return err == nil && fi.IsDir()
	}
	return false
}

var (
	envAssignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)
	// statedWordRE is a word that runs stated: stated, bin/stated,
	// ./cmd/stated (after "go run"), $tmp/stated.
	statedWordRE = regexp.MustCompile(`^(?:\S*/)?stated$`)
	// placeholderRE is a word standing for something the reader fills in.
	placeholderRE = regexp.MustCompile(`[<>\[\]{}…]|\.\.\.|^[A-Z][A-Z0-9_]*$`)
)

// commands checks the stated and go test command lines in s: each
// segment between ;, &&, ||, | and & whose first word (after environment
// assignments and a few shell keywords) runs one. A line of a code block is
// a command (block true); an inline span may be prose ("the node logs
// `stated serving`"), so there an unknown command is reported only when
// flags follow it.
func (d *docState) commands(line int, s string, block bool) {
	for _, seg := range shellSegments(s) {
		words := strings.Fields(seg)
		for len(words) > 0 && (envAssignRE.MatchString(words[0]) || slices.Contains([]string{"$", "do", "then", "else", "time", "sudo", "eval", "(", "exec"}, words[0])) {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch {
		case statedWordRE.MatchString(words[0]):
			d.stated(line, words[1:], block)
		case len(words) > 2 && words[0] == "go" && words[1] == "run" && statedWordRE.MatchString(words[2]):
			d.stated(line, words[3:], block)
		case len(words) > 1 && words[0] == "go" && words[1] == "test":
			d.goTest(line, words[2:])
		}
	}
}

// stated checks a stated command line's subcommands and flags.
func (d *docState) stated(line int, words []string, block bool) {
	cur := d.ix.cli
	if cur == nil {
		return
	}
	name := func() string { return cur.CommandPath() }
	i := 0
	for ; i < len(words); i++ {
		w := unquote(words[i])
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "#") {
			break
		}
		if sub := findSub(cur, w); sub != nil {
			cur = sub
			continue
		}
		if w == "help" || w == "completion" || placeholderRE.MatchString(w) {
			return
		}
		if i == 0 && (w == "" || w[0] < 'a' || w[0] > 'z') {
			// "stated 0.85x", "stated  3015 ...": a table row of a
			// benchmark's output names the backend, not a command.
			return
		}
		if cur.HasSubCommands() && !cur.Runnable() {
			if !block && !slices.ContainsFunc(words[i+1:], func(w string) bool { return strings.HasPrefix(w, "--") }) {
				return
			}
			d.bad(line, "`%s %s`: %s has no command %q", name(), w, name(), w)
			return
		}
		break // an argument of a runnable command
	}
	for ; i < len(words); i++ {
		w := unquote(words[i])
		if strings.HasPrefix(w, "#") || w == ">" || strings.HasPrefix(w, "2>") {
			return
		}
		if !strings.HasPrefix(w, "--") || len(w) == 2 {
			continue
		}
		fl, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if placeholderRE.MatchString(fl) || fl == "" {
			continue
		}
		if cur.Flags().Lookup(fl) == nil && cur.InheritedFlags().Lookup(fl) == nil && cur.PersistentFlags().Lookup(fl) == nil {
			d.bad(line, "`%s --%s`: %s has no flag --%s", name(), fl, name(), fl)
		}
	}
}

func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || slices.Contains(s.Aliases, name) {
			return s
		}
	}
	return nil
}

func unquote(w string) string { return strings.Trim(w, `"'`) }

// matchNothing are -run patterns written to run no test (so that only
// benchmarks run).
var matchNothing = map[string]bool{"^$": true, "XXX": true, "xxx": true, "NONE": true, "none": true}

// goTest checks a go test line: its packages exist, and its -run, -bench
// and -fuzz patterns match a function of them.
func (d *docState) goTest(line int, words []string) {
	var pkgs []string
	type pattern struct{ flag, re string }
	var pats []pattern
	for i := 0; i < len(words); i++ {
		w := unquote(words[i])
		if strings.HasPrefix(w, "#") || w == ">" || strings.HasPrefix(w, "2>") {
			break
		}
		flag, val, hasVal := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if strings.HasPrefix(w, "-") && (flag == "run" || flag == "bench" || flag == "fuzz") {
			if !hasVal {
				if i+1 >= len(words) {
					break
				}
				i++
				val = unquote(words[i])
			}
			pats = append(pats, pattern{flag, val})
			continue
		}
		if strings.HasPrefix(w, "./") || w == "." {
			pkgs = append(pkgs, w)
		} else if rest, ok := strings.CutPrefix(w, "github.com/statedhq/stated"); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			pkgs = append(pkgs, "."+rest)
		}
	}
	if len(pkgs) == 0 {
		return // the current directory: unknown here
	}
	var names []string
	for _, p := range pkgs {
		p = strings.TrimPrefix(strings.TrimPrefix(p, "./"), ".")
		p = strings.Trim(p, "/")
		if p == "..." || strings.HasSuffix(p, "/...") {
			prefix := strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
			found := false
			for dir, ns := range d.ix.tests {
				if prefix == "" || dir == prefix || strings.HasPrefix(dir, prefix+"/") {
					names = append(names, ns...)
					found = true
				}
			}
			if fi, err := os.Stat(filepath.Join(d.ix.root, filepath.FromSlash(prefix))); !found && (err != nil || !fi.IsDir()) {
				d.bad(line, "go test ./%s: no such package directory", p)
			}
			continue
		}
		if p == "" {
			p = "."
		}
		if fi, err := os.Stat(filepath.Join(d.ix.root, filepath.FromSlash(p))); err != nil || !fi.IsDir() {
			d.bad(line, "go test ./%s: no such package directory", p)
			continue
		}
		names = append(names, d.ix.tests[p]...)
	}
	sort.Strings(names)
	for _, pt := range pats {
		if pt.flag == "run" && matchNothing[pt.re] {
			continue
		}
		// go test splits a pattern into its top-level alternatives, and
		// each at its slashes; the first level names a top-level function.
		for _, alt := range splitTop(pt.re, '|') {
			first := splitTop(alt, '/')[0]
			re, err := regexp.Compile(first)
			if err != nil {
				d.bad(line, "go test -%s %q: %v", pt.flag, pt.re, err)
				continue
			}
			matched := false
			for _, n := range names {
				kind := strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Example") || strings.HasPrefix(n, "Fuzz")
				switch pt.flag {
				case "bench":
					kind = strings.HasPrefix(n, "Benchmark")
				case "fuzz":
					kind = strings.HasPrefix(n, "Fuzz")
				}
				if kind && re.MatchString(n) {
					matched = true
					break
				}
			}
			if !matched {
				what := pt.re
				if alt != pt.re {
					what = fmt.Sprintf("%s (its part %s)", pt.re, alt)
				}
				d.bad(line, "go test -%s %s %s: matches no %s function of those packages", pt.flag, what, strings.Join(pkgs, " "), map[string]string{"run": "Test", "bench": "Benchmark", "fuzz": "Fuzz"}[pt.flag])
			}
		}
	}
}

// splitTop splits pattern at sep where sep is outside parentheses and
// brackets, as go test splits -run and -bench patterns.
func splitTop(pattern string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\':
			i++
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			if depth > 0 {
				depth--
			}
		case c == sep && depth == 0:
			out = append(out, pattern[start:i])
			start = i + 1
		}
	}
	return append(out, pattern[start:])
}

// shellSegments splits a command line at ;, |, &, $( and backticks outside
// quotes (so that a quoted -bench 'A|B' stays one word).
func shellSegments(s string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';' || c == '|' || c == '&' || c == '`' || (c == '$' && i+1 < len(s) && s[i+1] == '('):
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
