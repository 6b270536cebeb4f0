package queen_test

import (
	"context"
	"go/doc/comment"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
)

// Every Go code block of the documentation runs, so that none can rot:
//
//   - a README.md block that is a whole program (package main) is built
//     and run with `go run` against queentest, its broker URL replaced;
//   - every other block, of README.md and of the doc comments of this
//     package, of queentest and of queenotel, must appear token for token
//     (comments and line breaks aside) in a _test.go file of this package
//     (or of queenotel, for the queenotel lines), where a test or an
//     Example runs it against queentest and checks what it did
//     (docs_blocks_test.go and the example files).
//
// The doc's broker URL "http://localhost:6632" matches the identifier
// brokerURL of a harness, which holds the in-memory broker's URL.

// docURL is the broker URL the documentation uses.
const docURL = `"http://localhost:6632"`

// docBlock is one Go code block of the documentation.
type docBlock struct {
	where string // file:line
	text  string
}

// goFence matches a fenced Go block of a Markdown file.
var goFence = regexp.MustCompile("(?s)```go\n(.*?)```")

// readmeBlocks returns the Go blocks of README.md.
func readmeBlocks(t *testing.T) []docBlock {
	t.Helper()
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, m := range goFence.FindAllSubmatchIndex(md, -1) {
		line := 1 + strings.Count(string(md[:m[0]]), "\n")
		out = append(out, docBlock{where: "README.md:" + strconv.Itoa(line), text: string(md[m[2]:m[3]])})
	}
	return out
}

// commentBlocks returns the code blocks of the doc comments of the non-test
// Go files of dir.
func commentBlocks(t *testing.T, dir string) []docBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []docBlock
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range f.Comments {
			var p comment.Parser
			for _, b := range p.Parse(cg.Text()).Content {
				if code, ok := b.(*comment.Code); ok {
					out = append(out, docBlock{where: fset.Position(cg.Pos()).String(), text: code.Text})
				}
			}
		}
	}
	return out
}

// tok is one Go token with its text.
type tok struct {
	t   token.Token
	lit string
}

// goTokens scans src as Go, dropping comments and the semicolons that line
// ends insert, so that only the code counts.
func goTokens(src string) []tok {
	var s scanner.Scanner
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	s.Init(file, []byte(src), nil, 0)
	var out []tok
	for {
		_, t, lit := s.Scan()
		if t == token.EOF {
			return out
		}
		if t == token.SEMICOLON && lit == "\n" {
			continue
		}
		if t == token.STRING && lit == docURL {
			t, lit = token.IDENT, "brokerURL"
		}
		if lit == "" {
			lit = t.String()
		}
		out = append(out, tok{t, lit})
	}
}

// contains reports whether seq holds sub as a contiguous run.
func contains(seq, sub []tok) bool {
	if len(sub) == 0 {
		return false
	}
outer:
	for i := 0; i+len(sub) <= len(seq); i++ {
		for j := range sub {
			if seq[i+j] != sub[j] {
				continue outer
			}
		}
		return true
	}
	return false
}

// harnesses returns the tokens of each _test.go file of this package, and
// of queenotel (a module of its own, which runs the README's queenotel
// line).
func harnesses(t *testing.T) map[string][]tok {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	otel, err := filepath.Glob(filepath.Join("queenotel", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, otel...)
	// integration runs the README's queencontainer block (it is the module
	// that has both the client and queencontainer).
	container, err := filepath.Glob(filepath.Join("integration", "readme_*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, container...)
	out := map[string][]tok{}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = goTokens(string(src))
	}
	return out
}

func TestDocCodeBlocksRun(t *testing.T) {
	blocks := readmeBlocks(t)
	if len(blocks) < 3 {
		t.Fatalf("found %d Go blocks in README.md; the reader is broken", len(blocks))
	}
	blocks = append(blocks, commentBlocks(t, ".")...)
	blocks = append(blocks, commentBlocks(t, "queentest")...)
	blocks = append(blocks, commentBlocks(t, "queenotel")...)
	tests := harnesses(t)
	var programs int
	for _, b := range blocks {
		if strings.HasPrefix(strings.TrimSpace(b.text), "package main") {
			programs++
			runProgram(t, b)
			continue
		}
		want := goTokens(b.text)
		found := false
		for _, toks := range tests {
			if contains(toks, want) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: this code block is run by no test or Example of the package (copy it, token for token, into one that runs it against queentest):\n%s",
				b.where, b.text)
		}
	}
	if programs == 0 {
		t.Error("README.md has no whole program (its quick start)")
	}
}

// The matcher itself: a changed token is a different block; comments and
// line breaks are not.
func TestDocBlockMatcher(t *testing.T) {
	harness := goTokens("func f() {\n\tx := g(1, \"a\") // c\n\ty := brokerURL\n}")
	for src, want := range map[string]bool{
		"x := g(1,\n\t\"a\")":                  true,
		"x := g(1, \"a\") /* other comment */": true,
		"y := " + docURL:                       true,
		"x := g(2, \"a\")":                     false,
		"x := g(1, \"b\")":                     false,
		"x = g(1, \"a\")":                      false,
		"{ ... }":                              false,
		"":                                     false,
	} {
		if got := contains(harness, goTokens(src)); got != want {
			t.Errorf("contains(%q) = %v, want %v", src, got, want)
		}
	}
}

// readmeOutputs is what each README program prints, keyed by its first
// distinctive line.
var readmeOutputs = map[string]string{
	"// Push: one message per argument, any JSON value.": "billed order 1\norder 2 dead-lettered: bad order\nbilled order 3\n",
}

// runProgram builds and runs a README program against queentest and
// checks what it prints.
func runProgram(t *testing.T, b docBlock) {
	t.Helper()
	var want *string
	for key, out := range readmeOutputs {
		if strings.Contains(b.text, key) {
			want = &out
		}
	}
	if want == nil {
		t.Errorf("%s: a program whose output no entry of readmeOutputs gives", b.where)
		return
	}
	srv := queentest.Start(t)
	src := strings.ReplaceAll(b.text, docURL, `"`+srv.URL+`"`)
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "run", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: go run: %v\n%s", b.where, err, out)
		return
	}
	if string(out) != *want {
		t.Errorf("%s: the program printed %q, want %q", b.where, out, *want)
	}
}

// goTool is the go command of the toolchain running the tests: go test
// puts its GOROOT/bin first in the test's PATH.
func goTool() string { return "go" }
