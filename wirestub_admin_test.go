package queen_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sync"
	"testing"

	"github.com/queen-go/queen"
)

// stubReq is one request a wireStub received.
type stubReq struct {
	Method string
	Path   string // escaped path
	Query  url.Values
	Body   []byte
	Header http.Header
}

// wireStub is an httptest broker that records every request and answers
// with a function of it.
type wireStub struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []stubReq
	answer func(stubReq) (int, string)
	// rawHealth passes GET /health to answer; by default the stub answers
	// it as a 2.x broker and does not record it (a timestamp seek asks the
	// broker's generation first).
	rawHealth bool
}

// passHealth makes GET /health go to the stub's answer function.
func (s *wireStub) passHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rawHealth = true
}

// newWireStub starts a stub answering every request with status and body.
func newWireStub(t *testing.T, status int, body string) (*wireStub, *queen.Client) {
	return newWireStubFunc(t, func(stubReq) (int, string) { return status, body })
}

// newWireStubFunc starts a stub answering with fn, and a client for it that
// makes a single attempt per call.
func newWireStubFunc(t *testing.T, fn func(stubReq) (int, string)) (*wireStub, *queen.Client) {
	t.Helper()
	s := &wireStub{t: t, answer: fn}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := stubReq{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Body: b, Header: r.Header.Clone()}
		s.mu.Lock()
		if r.URL.Path == "/health" && !s.rawHealth {
			s.mu.Unlock()
			_, _ = io.WriteString(w, `{"status":"healthy","engine":"raft","version":"2.0.1"}`)
			return
		}
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		status, body := s.answer(req)
		if len(body) > 0 && (body[0] == '{' || body[0] == '[') {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.srv.Close)
	c, err := queen.New(s.srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatalf("queen.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return s, c
}

// requests returns a copy of the requests received so far.
func (s *wireStub) requests() []stubReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stubReq(nil), s.reqs...)
}

// only returns the single request received, failing the test otherwise.
func (s *wireStub) only() stubReq {
	s.t.Helper()
	reqs := s.requests()
	if len(reqs) != 1 {
		s.t.Fatalf("broker got %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// nothingSent fails the test if any request reached the stub.
func (s *wireStub) nothingSent() {
	s.t.Helper()
	if n := len(s.requests()); n != 0 {
		s.t.Fatalf("broker got %d requests, want none (the error must come before any request)", n)
	}
}

// jsonEqual fails the test unless got and want hold the same JSON value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("body mismatch\n got: %s\nwant: %s", got, want)
	}
}

// wantRoute fails the test unless r has the method and escaped path.
func wantRoute(t *testing.T, r stubReq, method, path string) {
	t.Helper()
	if r.Method != method || r.Path != path {
		t.Fatalf("request = %s %s, want %s %s", r.Method, r.Path, method, path)
	}
}
