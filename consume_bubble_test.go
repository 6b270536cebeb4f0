package queen_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// bubbleEnv is newEnv for a test in a testing/synctest bubble: call it in
// the bubble. Its broker is made there too (a wait on a channel made outside
// would keep the bubble's clock from moving) and listens on nothing: its
// listener is closed at once, as RefuseConnections does, for longer than any
// test (a goroutine waiting on the network would keep the clock still too).
// The client reaches the broker through spyTransport, with no connection, so
// that every wait, the client's and the broker's long polls, runs on the
// bubble's clock: durations are exact whatever the machine's load. env.spy
// records the acks; env.clock is nil.
func bubbleEnv(t *testing.T, opts ...queentest.Option) *env {
	t.Helper()
	srv := queentest.NewServer(opts...)
	srv.RefuseConnections(24 * time.Hour)
	e := &env{t: t, srv: srv, logs: &logSink{}, spy: &spy{}}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := queen.New(srv.URL, queen.WithLogger(log),
		queen.WithHTTPClient(&http.Client{Transport: spyTransport{srv: srv, spy: e.spy}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		srv.Close()
	})
	e.c = c
	return e
}

// spyTransport is an http.RoundTripper that serves each request with the
// broker's handler on the caller's goroutine, and notes the acks in spy.
type spyTransport struct {
	srv *queentest.Server
	spy *spy
}

func (rt spyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil {
		req.Body = http.NoBody
	}
	rt.spy.note(req)
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	res := rec.Result()
	res.Request = req
	return res, nil
}
