package integration

// The snippets of the documentation page, pasted into
// snippets_page_test.go and snippets_page_consume_test.go, are checked
// against the page itself, so that a change of the page fails here until
// it is pasted again. The page lives beside the repository
// (shared/spec/pop-and-consume.md), not in it.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// specFence matches a fenced Go block of the page, as docs_test.go's
// goFence does the README's.
var specFence = regexp.MustCompile("(?s)```go\n(.*?)```")

// specPageName is where the page lives, beside the repository.
var specPageName = filepath.Join("shared", "spec", "pop-and-consume.md")

// specPage reads the page: the file QUEEN_SPEC_PAGE names, or else
// shared/spec/pop-and-consume.md in the working directory or one of its
// parents. It skips the test when there is none (a clean clone, as in CI,
// has no shared/ beside it).
func specPage(t *testing.T) (string, []byte) {
	t.Helper()
	if p := os.Getenv("QUEEN_SPEC_PAGE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("QUEEN_SPEC_PAGE: %v", err)
		}
		return p, b
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, specPageName)
		b, err := os.ReadFile(p)
		switch {
		case err == nil:
			return p, b
		case !errors.Is(err, fs.ErrNotExist):
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("the documentation page %s is not beside this checkout (a clean clone has none), so the pasted snippets "+
				"cannot be checked against it here; set QUEEN_SPEC_PAGE to the page's path to check them", specPageName)
		}
		dir = parent
	}
}

// spaced is s with every run of white space made one space.
func spaced(s string) string { return strings.Join(strings.Fields(s), " ") }

// Every Go snippet of the page is in snippets_page_test.go or
// snippets_page_consume_test.go as the page has it, white space aside
// (comments included).
func TestPageSnippetsArePastedUnchanged(t *testing.T) {
	page, md := specPage(t)
	var pasted strings.Builder
	for _, name := range []string{"snippets_page_test.go", "snippets_page_consume_test.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pasted.Write(b)
		pasted.WriteByte('\n')
	}
	copies := spaced(pasted.String())
	blocks := specFence.FindAllSubmatch(md, -1)
	if len(blocks) == 0 {
		t.Fatalf("%s: no Go block found; the reader is broken", page)
	}
	for _, m := range blocks {
		if !strings.Contains(copies, spaced(string(m[1]))) {
			t.Errorf("%s: this snippet is not pasted as it is into snippets_page_test.go or snippets_page_consume_test.go "+
				"(paste it again, and check what the tests that run it assert):\n%s", page, m[1])
		}
	}
}
