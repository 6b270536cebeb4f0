package queentest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// bubbleServer starts a Server for a test running in a testing/synctest
// bubble. It listens on nothing: its listener is closed at once (a goroutine
// waiting on the network would keep the bubble's clock from moving), and
// the client it returns hands each request straight to ServeHTTP on the
// caller's goroutine. Every wait of the broker (a long poll's timeout, the
// 0.15.1 schedule of looks) then runs on the bubble's clock: durations are
// exact, whatever the machine's load.
func bubbleServer(t *testing.T, opts ...Option) (*Server, *hc) {
	t.Helper()
	s := NewServer(opts...)
	s.lmu.Lock()
	ln := s.ln
	s.ln = nil
	s.lmu.Unlock()
	_ = ln.Close()
	t.Cleanup(s.Close)
	return s, &hc{t: t, base: s.URL, c: &http.Client{Transport: handlerTransport{s}}}
}

// handlerTransport is an http.RoundTripper that serves each request with h
// itself, no network in between.
type handlerTransport struct{ h http.Handler }

func (tr handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		r.Body = http.NoBody // as a server's request has
	}
	rec := httptest.NewRecorder()
	tr.h.ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r
	return res, nil
}
