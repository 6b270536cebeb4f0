package queen

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of this file replace process-wide defaults (http.DefaultTransport,
// slog.Default) and put them back. They must not call t.Parallel: a
// top-level test that does not runs while no other test of the package
// does (parallel tests wait until the sequential ones are done).

// New works whatever http.DefaultTransport is: the client builds its own
// pool with the standard settings and pops through it.
func TestNewWithWrappedDefaultTransport(t *testing.T) {
	orig := http.DefaultTransport
	// Not an *http.Transport, as an instrumentation library or a test mock
	// installs in http.DefaultTransport (countingRT, client_test.go).
	wrapped := &countingRT{next: orig}
	http.DefaultTransport = wrapped
	t.Cleanup(func() { http.DefaultTransport = orig })

	rec, _ := newRecorder(t, ok200(t, "broker-0.15.1/pop_queue_mode_three.json"))
	var c *Client
	require.NotPanics(t, func() {
		var err error
		c, err = New(rec.srv.URL, WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
		require.NoError(t, err)
	})
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	http.DefaultTransport = orig // the pool is built: nothing else needs the wrapper

	msgs, err := c.Queue("t1").Wait(false).Pop(context.Background())
	require.NoError(t, err)
	assert.Len(t, msgs, 3)
	assert.Equal(t, 1, rec.hits())
	assert.Zero(t, wrapped.n.Load(), "the client's own pool, not the replaced default")
}

// swapDefaultLogger makes slog.Default() write text records of every level
// to the returned buffer until the test ends. slog.SetDefault also
// redirects package log, which is put back too.
func swapDefaultLogger(t *testing.T) *syncBuffer {
	buf := &syncBuffer{}
	orig, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		slog.SetDefault(orig)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	return buf
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failover makes a client with opts fail over from a dead URL to a live
// one, which logs a Warn (the failing URL) and Debug lines (the retry, the
// failover).
func failover(t *testing.T, opts ...Option) {
	t.Helper()
	live, _ := newRecorder(t, answer{status: 201, body: `[{"index":0,"status":"queued"}]`})
	dead, _ := newRecorder(t)
	dead.srv.Close()
	opts = append([]Option{WithURLs(live.srv.URL), WithLoadBalancing(InOrder),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})}, opts...)
	c, err := New(dead.srv.URL, opts...)
	require.NoError(t, err)
	defer c.Close(context.Background())
	_, err = c.Queue("q").Push(1).Execute(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, live.hits())
}

// Without WithLogger, Warn and Error records go to slog.Default(); Info
// and Debug do not.
func TestDefaultLoggerIsSlogDefaultFromWarn(t *testing.T) {
	buf := swapDefaultLogger(t)
	failover(t)
	logs := buf.String()
	assert.Contains(t, logs, "level=WARN")
	assert.Contains(t, logs, "broker URL failing")
	assert.NotContains(t, logs, "level=DEBUG")
	assert.NotContains(t, logs, "level=INFO")

	// The same default logger passes Error and drops Info.
	buf2 := swapDefaultLogger(t)
	c, err := New("http://127.0.0.1:1")
	require.NoError(t, err)
	defer c.Close(context.Background())
	c.log.With("k", "v").WithGroup("g").Error("boom", "a", 1)
	c.log.Info("chatter")
	assert.Contains(t, buf2.String(), `level=ERROR msg=boom k=v g.a=1`)
	assert.NotContains(t, buf2.String(), "chatter")
}

// WithLogger(slog.New(slog.DiscardHandler)) silences the client.
func TestDiscardLoggerSilences(t *testing.T) {
	buf := swapDefaultLogger(t)
	failover(t, WithLogger(slog.New(slog.DiscardHandler)))
	assert.Empty(t, buf.String())
}
