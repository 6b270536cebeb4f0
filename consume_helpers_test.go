package queen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"go.uber.org/goleak"
)

// env is one test's broker (queentest), optional fake clock, client and
// captured client log.
type env struct {
	t     *testing.T
	srv   *queentest.Server
	clock *queentest.FakeClock
	c     *queen.Client
	logs  *logSink
	spy   *spy
}

type envOpt func(*envCfg)

type envCfg struct {
	fakeClock bool
	queue     *queentest.QueueConfig
	spy       bool
	retry     queen.RetryPolicy
	profile   queentest.Profile
	hooks     []queen.Hook
}

// withFakeClock gives the broker a FakeClock (env.clock).
func withFakeClock() envOpt { return func(c *envCfg) { c.fakeClock = true } }

// withQueueConfig sets the config of implicitly created queues.
func withQueueConfig(f func(*queentest.QueueConfig)) envOpt {
	return func(c *envCfg) {
		q := queentest.DefaultQueueConfig()
		f(&q)
		c.queue = &q
	}
}

// withSpy puts a recording proxy between the client and the broker, to
// read the ack bodies the client sends.
func withSpy() envOpt { return func(c *envCfg) { c.spy = true } }

// withProfile makes the broker imitate generation p.
func withProfile(p queentest.Profile) envOpt { return func(c *envCfg) { c.profile = p } }

func withRetry(p queen.RetryPolicy) envOpt { return func(c *envCfg) { c.retry = p } }

// withHooks gives the client hooks.
func withHooks(h ...queen.Hook) envOpt { return func(c *envCfg) { c.hooks = append(c.hooks, h...) } }

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	cfg := envCfg{retry: queen.RetryPolicy{MinBackoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}}
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{t: t, logs: &logSink{}}
	var sopts []queentest.Option
	if cfg.fakeClock {
		e.clock = queentest.NewFakeClock(time.Date(2026, 10, 22, 12, 0, 0, 0, time.UTC))
		sopts = append(sopts, queentest.WithClock(e.clock))
	}
	if cfg.queue != nil {
		sopts = append(sopts, queentest.WithDefaultQueueConfig(*cfg.queue))
	}
	if cfg.profile != "" {
		sopts = append(sopts, queentest.WithProfile(cfg.profile))
	}
	e.srv = queentest.Start(t, sopts...)
	target := e.srv.URL
	if cfg.spy {
		e.spy = newSpy(t, e.srv.URL)
		target = e.spy.URL
	}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := queen.New(target, queen.WithLogger(log), queen.WithRetryPolicy(cfg.retry), queen.WithHooks(cfg.hooks...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	queen.SetMinRenewMillis(c, 1) // the tests renew every few ms
	e.c = c
	return e
}

// closeNoLeak closes the client and the broker (their pooled connections
// too) and fails t if a goroutine not in before is left.
func (e *env) closeNoLeak(t *testing.T, before goleak.Option) {
	t.Helper()
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
}

// push pushes payloads to queue/partition and fails the test on error.
func (e *env) push(queue, partition string, payloads ...any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.c.Queue(queue).Partition(partition).Push(payloads...).Execute(ctx); err != nil {
		e.t.Fatalf("push: %v", err)
	}
}

// pushN pushes n messages {"p": partition, "i": 0..n-1} to queue/partition.
func (e *env) pushN(queue, partition string, n int) {
	e.t.Helper()
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = map[string]any{"p": partition, "i": i}
	}
	e.push(queue, partition, payloads...)
}

// peek pops everything visible for group (queue mode when empty), without
// waiting, and leaves it leased: for the checks at the end of a test.
func (e *env) peek(queue, group string) []*queen.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var all []*queen.Message
	for {
		qb := e.c.Queue(queue).Wait(false).Batch(1000).Partitions(64)
		if group != "" {
			qb = qb.Group(group).SubscriptionMode(queen.SubscriptionModeAll)
		}
		msgs, err := qb.Pop(ctx)
		if err != nil {
			e.t.Fatalf("peek: %v", err)
		}
		if len(msgs) == 0 {
			return all
		}
		all = append(all, msgs...)
	}
}

// acks returns the number of ack requests (single and batch) the broker got.
func (e *env) acks() int {
	return e.srv.Requests(queentest.RouteAck) + e.srv.Requests(queentest.RouteAckBatch)
}

// execute runs f with a ctx and fails the test if it has not returned
// within 10 s (then cancels it).
func execute(t *testing.T, ctx context.Context, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second): // a hang guard, no measurement
		cancel()
		<-done
		t.Fatal("Execute did not return within 30 s")
		return nil
	}
}

// key names a message by its payload: "<partition>/<i>".
func key(m *queen.Message) string {
	return fmt.Sprintf("%v/%v", m.Data["p"], m.Data["i"])
}

func keys(ms []*queen.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = key(m)
	}
	return out
}

// recorder collects handler calls safely across goroutines.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
	return len(r.calls)
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// logSink is an io.Writer for a slog handler, safe for concurrent use.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// spy is a reverse proxy in front of the broker that records ack bodies.
type spy struct {
	URL  string
	mu   sync.Mutex
	acks []spiedAck
}

// spiedAck is one ack request as the client sent it.
type spiedAck struct {
	Path  string
	Group string
	Items []spiedItem
}

type spiedItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
	Error         string `json:"error"`
}

func newSpy(t *testing.T, target string) *spy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = tr
	rp.ErrorLog = log.New(io.Discard, "", 0)
	s := &spy{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.note(r)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		tr.CloseIdleConnections()
	})
	s.URL = hs.URL
	return s
}

// note records r if it is an ack, and leaves its body to be read again.
func (s *spy) note(r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api/v1/ack") {
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in struct {
		spiedItem
		ConsumerGroup   string      `json:"consumerGroup"`
		Acknowledgments []spiedItem `json:"acknowledgments"`
	}
	_ = json.Unmarshal(body, &in)
	a := spiedAck{Path: r.URL.Path, Group: in.ConsumerGroup, Items: in.Acknowledgments}
	if len(a.Items) == 0 {
		a.Items = []spiedItem{in.spiedItem}
	}
	s.mu.Lock()
	s.acks = append(s.acks, a)
	s.mu.Unlock()
}

func (s *spy) ackRequests() []spiedAck {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spiedAck(nil), s.acks...)
}

// renewWatch counts the client's lease renewals that succeeded (a
// RenewHook), so that a test waits for renewals, not for a time.
type renewWatch struct {
	mu   sync.Mutex
	n    int
	more chan struct{} // closed and replaced at each renewal
}

func newRenewWatch() *renewWatch { return &renewWatch{more: make(chan struct{})} }

func (w *renewWatch) OnRenew(_ context.Context, e queen.RenewEvent) {
	if e.Err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	close(w.more)
	w.more = make(chan struct{})
}

// await waits for n renewals more than had happened when it was called
// (false after 30 s: a hang guard, no measurement).
func (w *renewWatch) await(n int) bool {
	w.mu.Lock()
	want := w.n + n
	w.mu.Unlock()
	guard := time.NewTimer(30 * time.Second)
	defer guard.Stop()
	for {
		w.mu.Lock()
		got, more := w.n, w.more
		w.mu.Unlock()
		if got >= want {
			return true
		}
		select {
		case <-more:
		case <-guard.C:
			return false
		}
	}
}

// awaitRequests waits until srv has received n requests of route r (false
// after 30 s: a hang guard, no measurement; it may run on a handler's
// goroutine, so it reports with Errorf).
func awaitRequests(t testing.TB, srv *queentest.Server, r queentest.Route, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.AwaitRequests(ctx, r, n); err != nil {
		t.Errorf("waiting for %d %s requests: %v", n, r, err)
	}
}
