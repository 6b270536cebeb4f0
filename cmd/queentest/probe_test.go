package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestProbe checks the exit status of "queentest probe" against a /health
// that answers 200, one that answers 503, and an address nobody listens on.
func TestProbe(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"status":"settling"}`))
	}))
	defer srv.Close()

	var stderr bytes.Buffer
	if code := run([]string{"probe", srv.URL + "/"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Errorf("probe of a 200 /health = %d (%s), want 0", code, stderr.String())
	}
	// Without a URL the probe targets -addr.
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code := run([]string{"-addr", addr, "probe"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Errorf("probe of -addr %s = %d (%s), want 0", addr, code, stderr.String())
	}

	status.Store(http.StatusServiceUnavailable)
	stderr.Reset()
	if code := run([]string{"probe", srv.URL}, &bytes.Buffer{}, &stderr); code != 1 {
		t.Errorf("probe of a 503 /health = %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "503") || !strings.Contains(stderr.String(), "settling") {
		t.Errorf("probe of a 503 says %q, want the status and the body", stderr.String())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if code := run([]string{"probe", closed}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("probe of %s (nobody listens) = %d, want 1", closed, code)
	}
	if code := run([]string{"probe", "localhost:1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("probe of a URL without scheme = %d, want 2 (usage)", code)
	}
	if code := run([]string{"probe", "a", "b"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("probe with two URLs = %d, want 2 (usage)", code)
	}
}

func TestProbeBase(t *testing.T) {
	for _, tc := range []struct{ target, addr, want string }{
		{"", "0.0.0.0:6632", "http://127.0.0.1:6632"},
		{"", ":6632", "http://127.0.0.1:6632"},
		{"", "[::]:7000", "http://127.0.0.1:7000"},
		{"", "10.1.2.3:6632", "http://10.1.2.3:6632"},
		{"http://h:1/", "0.0.0.0:6632", "http://h:1"},
	} {
		got, err := probeBase(tc.target, tc.addr)
		if err != nil || got != tc.want {
			t.Errorf("probeBase(%q, %q) = %q, %v; want %q", tc.target, tc.addr, got, err, tc.want)
		}
	}
	if _, err := probeBase("", "127.0.0.1:0"); err == nil {
		t.Error("probeBase of port 0: no error, want one (nothing fixed to probe)")
	}
}
