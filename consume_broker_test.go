package queen_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A batch ack that fails for a while is sent again by the loop until it
// goes through: one layer of retries (the transport makes one attempt of
// each, whatever RetryPolicy.MaxAttempts), so OnLoopError sees every
// failure, and nothing is left leased when Execute returns.
func TestConsumeSettleRetriesTransientFailures(t *testing.T) {
	e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	e.pushN("q", "p", 3)
	e.srv.FailNext(queentest.RouteAckBatch, 3, 503, 0)
	var failures atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(3).Each().Limit(3).
			Consume(ctx, func(context.Context, *queen.Message) error { return nil }).
			OnLoopError(func(_ context.Context, err error) {
				if le, ok := errors.AsType[*queen.LoopError](err); ok && le.Op == queen.LoopOpSettle {
					failures.Add(1)
				}
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.srv.Requests(queentest.RouteAckBatch); n != 4 {
		t.Fatalf("%d batch acks, want 4 (3 refused, then the one that went through)", n)
	}
	if n := failures.Load(); n != 3 {
		t.Fatalf("OnLoopError saw %d settle failures, want 3 (the transport must not retry the loop's acks)", n)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("left %v: the completed outcomes were never acked", keys(left))
	}
}

// renewSeen passes each renewal's error to ch.
type renewSeen chan error

func (ch renewSeen) OnRenew(_ context.Context, e queen.RenewEvent) {
	select {
	case ch <- e.Err:
	default: // the test reads two
	}
}

// A renewal that fails is tried again at the next tick, not by the
// transport: the failed attempt is one renewal request, and OnLoopError
// sees it.
func TestConsumeRenewOneAttemptPerTick(t *testing.T) {
	renews := make(renewSeen, 16)
	e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}),
		withHooks(renews))
	e.pushN("q", "p", 1)
	e.srv.FailNext(queentest.RouteRenew, 1, 503, 0)
	var failures atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(1).Each().Limit(1).RenewLease(true, 5).
			Consume(ctx, func(context.Context, *queen.Message) error {
				if err := <-renews; err == nil {
					t.Error("the first renewal succeeded: the transport retried it")
				}
				if err := <-renews; err != nil {
					t.Errorf("the renewal at the next tick failed: %v", err)
				}
				return nil
			}).
			OnLoopError(func(_ context.Context, err error) {
				if le, ok := errors.AsType[*queen.LoopError](err); ok && le.Op == queen.LoopOpRenew {
					failures.Add(1)
				}
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := failures.Load(); n != 1 {
		t.Fatalf("OnLoopError saw %d renewal failures, want 1", n)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
}

// The give-back at a stop goes through a network failure too: the broker
// refuses connections as the stop happens, and still nothing is leased when
// Execute returns.
func TestConsumeGiveBackSurvivesNetworkFailureAtStop(t *testing.T) {
	e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}),
		withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }))
	e.pushN("q", "p", 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	err := execute(t, ctx, func(ctx context.Context) error {
		return e.c.Queue("q").Batch(4).Each().
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				rec.add(key(m))
				cancel()                                        // the stop
				e.srv.RefuseConnections(150 * time.Millisecond) // and the network goes
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.get(); len(got) != 1 {
		t.Fatalf("handled %v, want one message", got)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if got, want := keys(e.peek("q", "")), []string{"p/1", "p/2", "p/3"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("given back %v, want %v at once", got, want)
	}
}

// A failure that asking again cannot change, without any answer (here a
// broker whose TLS certificate the client does not trust), ends Execute
// too, by the same rule as the transport's.
func TestConsumeUntrustedCertificateEndsExecute(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are expected
	srv.StartTLS()
	defer srv.Close()
	c, err := queen.New(srv.URL, queen.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = execute(t, context.Background(), func(ctx context.Context) error {
		return c.Queue("q").Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	})
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) {
		t.Fatalf("Execute = %v, want the certificate verification error", err)
	}
}

// hookLog collects what OnLoopError gets.
type hookLog struct {
	mu   sync.Mutex
	errs []error
}

func (h *hookLog) add(_ context.Context, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// ops returns the LoopErrors of op.
func (h *hookLog) ops(op string) []*queen.LoopError {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*queen.LoopError
	for _, err := range h.errs {
		var le *queen.LoopError
		if errors.As(err, &le) && le.Op == op {
			out = append(out, le)
		}
	}
	return out
}

// countLines counts the log records whose level and message match.
func countLines(logs, level, msg string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, msg) {
			n++
		}
	}
	return n
}

// A broker that cannot be reached is loud, and the loop goes on: one Warn
// at the first failure with the error, the failures after it at Debug,
// a Warn when pops succeed again, every failure to
// the hook; the loop resumes after the broker's return, with the client's
// default backoff; nothing is lost. (How soon, one capped backoff, is
// TestFetchResumesWithinCappedBackoff's, on a synctest bubble's clock.)
func TestConsumeBrokerDownIsLoud(t *testing.T) {
	e := newEnv(t, withRetry(queen.RetryPolicy{}))
	e.pushN("q", "p", 4)
	// The outage lasts a number of failed pops, not a time: a window of
	// wall clock holds fewer of them on a slow machine. Refused for an
	// hour, the broker comes back (a refusal of 1 ms restarts the window)
	// at the pop failure that reaches the backoff's cap and stays there
	// (50, 100, 200, 200 ms: the fourth).
	const failedPops = 4
	e.srv.RefuseConnections(time.Hour)
	var h hookLog
	var popFailures atomic.Int32
	onLoopError := func(ctx context.Context, err error) {
		h.add(ctx, err)
		var le *queen.LoopError
		if errors.As(err, &le) && le.Op == queen.LoopOpPop && popFailures.Add(1) == failedPops {
			e.srv.RefuseConnections(time.Millisecond)
		}
	}
	var handled atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(4).Limit(4).
			Consume(ctx, func(context.Context, *queen.Message) error {
				handled.Add(1)
				return nil
			}).OnLoopError(onLoopError).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 4 || len(e.peek("q", "")) != 0 {
		t.Fatalf("handled %d, want all 4 (nothing lost)", handled.Load())
	}
	failures := h.ops(queen.LoopOpPop)
	logs := e.logs.String()
	warns := countLines(logs, "WARN", "pop failed")
	if len(failures) < failedPops || warns != 1 {
		t.Fatalf("%d failures, %d Warn lines; want one Warn, at the outage's start:\n%s",
			len(failures), warns, logs)
	}
	if !strings.Contains(logs, "connection refused") && !strings.Contains(logs, "EOF") && !strings.Contains(logs, "reset") {
		t.Fatalf("the Warn does not carry the error:\n%s", logs)
	}
	if countLines(logs, "WARN", "pops succeed again") != 1 {
		t.Fatalf("no Warn line on recovery (the level of the outage's start):\n%s", logs)
	}
}

// Every failure of the loop's own requests, and a lost lease, reaches
// OnLoopError typed: errors.As finds the *BrokerError, errors.Is matches
// ErrLeaseLost. Every message is accounted for.
func TestConsumeLoopErrorsTyped(t *testing.T) {
	t.Run("pop, settle and renew 503s", func(t *testing.T) {
		e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
		e.pushN("q", "p", 3)
		e.srv.FailNext(queentest.RoutePop, 2, 503, 0)
		e.srv.FailNext(queentest.RouteAckBatch, 1, 503, 0)
		e.srv.FailNext(queentest.RouteRenew, 1, 503, 0)
		var h hookLog
		var handled atomic.Int32
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Batch(3).Limit(3).RenewLease(true, 5).
				Consume(ctx, func(context.Context, *queen.Message) error {
					awaitRequests(t, e.srv, queentest.RouteRenew, 2)
					handled.Add(1)
					return nil
				}).OnLoopError(h.add).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{queen.LoopOpPop, queen.LoopOpSettle, queen.LoopOpRenew} {
			got := h.ops(op)
			var be *queen.BrokerError
			if len(got) == 0 || !errors.As(got[0], &be) || be.Status != 503 {
				t.Errorf("%s: hook got %v, want a LoopError carrying the 503", op, got)
			}
		}
		if handled.Load() != 3 || len(e.peek("q", "")) != 0 || e.srv.LeasedCount("q", "") != 0 {
			t.Fatalf("handled %d: messages lost or left leased", handled.Load())
		}
	})
	t.Run("lease lost", func(t *testing.T) {
		e := newEnv(t, withFakeClock())
		e.pushN("q", "p", 1)
		var h hookLog
		started := make(chan struct{})
		err := execute(t, context.Background(), func(ctx context.Context) error {
			go func() { <-started; e.clock.Advance(61 * time.Second) }()
			return e.c.Queue("q").RenewLease(true, 5).Limit(1).
				Consume(ctx, func(hctx context.Context, _ *queen.Message) error {
					close(started)
					<-hctx.Done()
					return hctx.Err()
				}).OnLoopError(h.add).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		lost := h.ops(queen.LoopOpLease)
		if len(lost) != 1 || !errors.Is(lost[0], queen.ErrLeaseLost) || lost[0].LeaseID == "" {
			t.Fatalf("hook got %v, want one lease LoopError matching ErrLeaseLost", lost)
		}
		if left := e.peek("q", ""); len(left) != 1 {
			t.Fatalf("left %v, want the message back", keys(left))
		}
	})
}

// A handler panic is logged at Error with its stack, and its error (as
// OnError gets it) names the message: queue, partition, transaction id.
func TestConsumePanicNamesTheMessage(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay))
	e.pushN("orders", "p7", 1)
	var txn, text string
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("orders").Limit(2).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				if txn == "" {
					txn = m.TransactionID
					panic("kaboom")
				}
				return nil
			}).
			OnError(func(_ context.Context, _ *queen.Message, err error) queen.Outcome {
				text = err.Error()
				return queen.Outcome{}
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"queue orders", "partition p7", "transaction " + txn, "kaboom"} {
		if !strings.Contains(text, want) {
			t.Errorf("panic error %q lacks %q", text, want)
		}
	}
	if countLines(e.logs.String(), "ERROR", "panicked") != 1 || !strings.Contains(e.logs.String(), "consume_broker_test.go") {
		t.Fatalf("panic not logged at Error with its stack:\n%s", e.logs.String())
	}
}

// RenewLease(true, 1000) on a queue whose lease is 3 s: a live slow handler
// keeps its lease the whole time (10 s of broker time), while the
// messages of a worker that died (its renewals and acks never reach the
// broker again, and nothing is given back) come back within 5 s, not
// after 60 s as when a renewal stretched every lease to a minute. The
// broker's clock is a FakeClock: the test advances it in steps shorter
// than the renewal's extension (3 s) after each renewal.
func TestConsumeRenewLeaseCrashedWorker(t *testing.T) {
	renewed := newRenewWatch()
	e := newEnv(t, withFakeClock(), withQueueConfig(func(q *queentest.QueueConfig) { q.LeaseTime = 3 }), withHooks(renewed))
	e.pushN("q", "p", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).RenewLease(true, 1000).
			Consume(ctx, func(hctx context.Context, _ *queen.Message) error {
				close(started)
				select {
				case <-release:
				case <-hctx.Done():
				}
				return nil
			}).GracePeriod(time.Minute).Execute(ctx)
	}()
	<-started
	// Alive: a slow handler keeps its lease over 10 s of broker time.
	for range 5 {
		// The renewal's answer (RenewHook), not its arrival at the broker:
		// the clock moves only after the broker applied it.
		if !renewed.await(1) {
			t.Fatal("no renewal")
		}
		e.clock.Advance(2 * time.Second)
		if e.srv.LeasedCount("q", "g") != 1 {
			t.Fatal("the live handler lost its lease")
		}
	}
	// Dead: nothing reaches the broker any more (the process is gone).
	e.srv.RefuseConnections(time.Hour)
	e.clock.Advance(5 * time.Second)
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d messages still leased 5 s after the worker died", n)
	}
	// The end of the test: the broker answers again (a new window of 1 ms),
	// so that the loop's late ack is refused at once instead of being
	// tried for 15 s.
	e.srv.RefuseConnections(time.Millisecond)
	close(release)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return")
	}
}

// renewCount counts the renewals the broker answered.

// wireRecorder is an httptest broker that answers every pop with 204 (after
// an optional delay) and records the pop queries: for the exact wire shape
// of the loop's pops.
type wireRecorder struct {
	srv      *httptest.Server
	mu       sync.Mutex
	queries  []url.Values
	requests atomic.Int32
	popped   chan struct{} // closed at the first pop
}

func newWireRecorder(t *testing.T, delay time.Duration) *wireRecorder {
	t.Helper()
	w := &wireRecorder{popped: make(chan struct{})}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/health" {
			// The broker's generation, asked before a group's first pop
			// (subscription.go): 2.x.
			_, _ = io.WriteString(rw, `{"status":"healthy","engine":"raft","version":"2.0.1"}`)
			return
		}
		if strings.HasPrefix(req.URL.Path, "/api/v1/consumer-groups/") || strings.HasPrefix(req.URL.Path, "/api/v1/resources/queues/") {
			// The lookup before a group's first pop on 0.15.1
			// (subscription.go), and the loop's read of the queue's retry
			// settings.
			rw.WriteHeader(http.StatusNotFound)
			return
		}
		if w.requests.Add(1) == 1 {
			close(w.popped)
		}
		w.mu.Lock()
		w.queries = append(w.queries, req.URL.Query())
		w.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-req.Context().Done():
			}
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *wireRecorder) first(t *testing.T) url.Values {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queries) == 0 {
		t.Fatal("no pop was sent")
	}
	return w.queries[0]
}

func recorderClient(t *testing.T, w *wireRecorder) *queen.Client {
	t.Helper()
	c, err := queen.New(w.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// runUntilPop runs a loop until its first pop reached the server, then stops
// it and returns the pops' queries.
func runUntilPop(t *testing.T, w *wireRecorder, qb func(*queen.Client) *queen.QueueBuilder) url.Values {
	t.Helper()
	c := recorderClient(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- qb(c).Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	}()
	select {
	case <-w.popped:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("no pop reached the server")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Execute after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("Execute did not return after cancel")
	}
	return w.first(t)
}

// The loop long polls by default: wait=true, 30 s.
func TestConsumeLongPollsByDefault(t *testing.T) {
	w := newWireRecorder(t, time.Minute)
	q := runUntilPop(t, w, func(c *queen.Client) *queen.QueueBuilder { return c.Queue("orders").Group("g") })
	if q.Get("wait") != "true" || q.Get("timeout") != "30000" {
		t.Fatalf("pop query %v: want wait=true&timeout=30000", q)
	}
	if q.Get("autoAck") != "" {
		t.Fatalf("pop query %v: the loop's AutoAck must never travel as autoAck", q)
	}
}

// Limit caps the batch of a pop to what is left, so that nothing is popped
// only to be given back.
func TestConsumeLimitCapsPopBatch(t *testing.T) {
	cases := []struct {
		name string
		qb   func(*queen.Client) *queen.QueueBuilder
		want url.Values
	}{
		{"pinned batch above limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Batch(10).Partitions(4).Limit(3)
		}, url.Values{"batch": {"3"}, "partitions": {"4"}, "autopilot": nil}},
		{"pinned batch below limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Batch(10).Limit(50)
		}, url.Values{"batch": {"10"}, "autopilot": {"true"}}},
		{"autopilot batch, small limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Limit(7)
		}, url.Values{"batch": {"7"}, "autopilot": {"true"}}},
		{"autopilot batch and partitions pinned", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Partitions(3).Limit(7)
		}, url.Values{"batch": {"7"}, "partitions": {"3"}, "autopilot": nil}},
		{"autopilot, large limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Limit(5000)
		}, url.Values{"batch": nil, "autopilot": {"true"}}},
		{"no limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q")
		}, url.Values{"batch": nil, "autopilot": {"true"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each stop waits for its parked poll to be abandoned
			w := newWireRecorder(t, time.Minute)
			q := runUntilPop(t, w, tc.qb)
			for k, v := range tc.want {
				if v == nil {
					if q.Has(k) {
						t.Errorf("pop query %v: %s must be absent", q, k)
					}
					continue
				}
				if q.Get(k) != v[0] {
					t.Errorf("pop query %v: %s=%q, want %q", q, k, q.Get(k), v[0])
				}
			}
		})
	}
}

// Bad combinations fail before any request is sent.
func TestConsumeRefusesBeforeAnyRequest(t *testing.T) {
	h := func(context.Context, *queen.Message) error { return nil }
	cases := []struct {
		name string
		run  func(ctx context.Context, c *queen.Client) error
		want error
	}{
		{"commit on delivery", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").CommitOnDelivery(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrCommitOnDeliveryConsume},
		{"commit on delivery, batch", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").CommitOnDelivery(true).
				ConsumeBatch(ctx, func(context.Context, []*queen.Message) error { return nil }).Execute(ctx)
		}, queen.ErrCommitOnDeliveryConsume},
		{"conflation without group", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Conflation(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrConflationNeedsGroup},
		{"nil handler", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Consume(ctx, nil).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"negative grace", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Consume(ctx, h).GracePeriod(-time.Second).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"zero concurrency", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Concurrency(0).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"renew without interval", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").RenewLease(true, 0).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"timeout above 60 s", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").TimeoutMillis(60001).Consume(ctx, h).Execute(ctx)
		}, queen.ErrTimeoutOutOfRange},
		{"conflation with commit on delivery", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").Conflation(true).CommitOnDelivery(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidArgument},
		{"no queue", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("").Consume(ctx, h).Execute(ctx)
		}, queen.ErrEmptyQueue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWireRecorder(t, 0)
			c := recorderClient(t, w)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := tc.run(ctx, c)
			if !errors.Is(err, tc.want) || !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("Execute = %v, want %v (and ErrInvalidArgument)", err, tc.want)
			}
			if n := w.requests.Load(); n != 0 {
				t.Fatalf("%d requests sent before the refusal, want 0", n)
			}
		})
	}
}

// Every pop option reaches the wire from a consume loop exactly as from
// Pop (the autopilot rule of PROTOCOL.md 3.3 included): the loop adds
// nothing and drops nothing when no Limit caps the batch.
func TestConsumePopQueryMatchesPop(t *testing.T) {
	cases := map[string]func(*queen.Client) *queen.QueueBuilder{
		"defaults": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q") },
		"group":    func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Group("g") },
		"group mode all": func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll)
		},
		"group from": func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionFrom("2026-10-22T00:00:00Z")
		},
		"batch only":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(50) },
		"partitions only":  func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Partitions(1) },
		"batch+partitions": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(50).Partitions(4) },
		"autopilot off":    func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Autopilot(false).Partitions(3) },
		"conflation":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Group("g").Conflation(true) },
		"short poll":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Wait(false) },
		"timeout":          func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").TimeoutMillis(60000) },
		"lease time":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").LeaseTime(2 * time.Minute) },
		"pinned partition": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Partition("p-1").Batch(5) },
		"large limit":      func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(10).Limit(100) },
	}
	for name, qb := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each stop waits for its parked poll to be abandoned
			pw := newWireRecorder(t, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := qb(recorderClient(t, pw)).Pop(ctx); err != nil {
				t.Fatal(err)
			}
			want := pw.first(t)
			got := runUntilPop(t, newWireRecorder(t, time.Minute), qb)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("consume pop query %v, Pop sends %v", got, want)
			}
		})
	}
}
