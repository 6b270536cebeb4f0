package queen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seen is one request as the fake broker received it.
type seen struct {
	Method   string
	Path     string // escaped, as sent
	RawQuery string
	Query    url.Values
	Header   http.Header
	Body     []byte
}

// answer is what the fake broker sends back.
type answer struct {
	status int
	body   string
	header map[string]string
}

// recorder is an httptest broker that records every request and answers
// from a script: answers[i] for the i-th request, the last one repeated.
type recorder struct {
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []seen
	answers []answer
	// lookups are the consumer-group lookups a pop makes before a group's
	// first pop (subscription.go), answered 404 and kept out of reqs.
	lookups []seen
	// lookup, when set, answers the lookups instead of a 404.
	lookup *answer
	// healths counts the GET /health a client makes to learn the broker's
	// generation (subscription.go), answered by health (a 2.x broker's
	// report when nil) and kept out of reqs.
	healths int
	health  *answer
}

// health015 is the /health answer of a 0.15.1 broker (no engine).
var health015 = answer{status: http.StatusOK, body: `{"status":"healthy","database":"connected","server":"C++ Queen Server (libqueen)","version":"1.0.0"}`}

// newRecorder starts a recording broker answering with the given script
// (204 with no body when empty) and a client pointed at it. Both are
// closed when the test ends.
func newRecorder(t *testing.T, answers ...answer) (*recorder, *Client) {
	t.Helper()
	return newRecorderOpts(t, nil, answers...)
}

func newRecorderOpts(t *testing.T, opts []Option, answers ...answer) (*recorder, *Client) {
	t.Helper()
	r := &recorder{answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	// Fast retries keep tests quick; one attempt unless a test asks for more.
	base := []Option{WithRetryPolicy(RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})}
	c, err := New(r.srv.URL, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return r, c
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	if req.Method == http.MethodGet && req.URL.Path == "/health" {
		r.healths++
		a := answer{status: http.StatusOK, body: `{"status":"healthy","engine":"raft","version":"2.0.1"}`}
		if r.health != nil {
			a = *r.health
		}
		r.mu.Unlock()
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
		return
	}
	if req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path, "/api/v1/consumer-groups/") {
		r.lookups = append(r.lookups, seen{Method: req.Method, Path: req.URL.EscapedPath()})
		a := answer{status: http.StatusNotFound, body: `{"error":"Consumer group not found"}`}
		if r.lookup != nil {
			a = *r.lookup
		}
		r.mu.Unlock()
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
		return
	}
	n := len(r.reqs)
	r.reqs = append(r.reqs, seen{
		Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery,
		Query: req.URL.Query(), Header: req.Header.Clone(), Body: body,
	})
	a := answer{status: http.StatusNoContent}
	if len(r.answers) > 0 {
		a = r.answers[min(n, len(r.answers)-1)]
	}
	r.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	if a.body != "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// hits is the number of requests received.
func (r *recorder) hits() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// all returns a copy of the requests received.
func (r *recorder) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

// only returns the one request received, failing the test otherwise.
func (r *recorder) only(t *testing.T) seen {
	t.Helper()
	reqs := r.all()
	require.Len(t, reqs, 1, "requests received")
	return reqs[0]
}

// golden reads a file of testdata/.
func golden(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// ok200 answers 200 with a golden file.
func ok200(t testing.TB, name string) answer {
	return answer{status: http.StatusOK, body: golden(t, name)}
}

// The response decoders face whatever a broker, a proxy or a broken
// network hands them: they may fail, never panic. Run one with, e.g.,
//
//	go test -run '^$' -fuzz FuzzDecodePop .
//
// A plain `go test` runs the seed corpus (every golden body) only.

// addGoldenSeeds adds every testdata file whose name starts with one of
// the prefixes, plus a few hostile bodies.
func addGoldenSeeds(f *testing.F, add func(body []byte), prefixes ...string) {
	f.Helper()
	for _, dir := range []string{"broker-0.15.1", "broker-2.x"} {
		entries, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			for _, p := range prefixes {
				if strings.HasPrefix(e.Name(), p) {
					b, err := os.ReadFile(filepath.Join("testdata", dir, e.Name()))
					if err != nil {
						f.Fatal(err)
					}
					add(b)
				}
			}
		}
	}
	for _, s := range []string{"", "null", "[]", "{}", "[null]", `[{}]`, `{"messages":null}`, `{"messages":[null]}`,
		`{"messages":[{"data":}]}`, `{"success":false,"error":"lease_held"}`, `[{"index":-1}]`, `[{"index":99}]`,
		`{"error":null}`, `"text"`, `42`, "\x00\xff", `[{"status":"queued"},{"status":"queued"}]`} {
		add([]byte(s))
	}
}
