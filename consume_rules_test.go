package queen_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A renewal that fails on the way (503, network) is not a lost lease: the
// handler's ctx stays alive and its outcome is acked.
func TestConsumeRenewTransientFailureKeepsHandler(t *testing.T) {
	e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	e.pushN("q", "p", 1)
	e.srv.FailNext(queentest.RouteRenew, 3, 503, 0)
	var cancelled atomic.Bool
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").RenewLease(true, 5).Each().Limit(1).
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				awaitRequests(t, e.srv, queentest.RouteRenew, 5)
				cancelled.Store(hctx.Err() != nil)
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Load() {
		t.Fatal("a renewal that failed on the way cancelled the handler")
	}
	if e.acks() != 1 || e.srv.LeasedCount("q", "") != 0 || len(e.peek("q", "")) != 0 {
		t.Fatal("the handler's outcome was not acked")
	}
}

// Renewals go on during the grace period (they do not use the cancelled
// ctx): a handler that runs past its lease after the stop keeps it, and its
// outcome is acked.
func TestConsumeRenewalsGoOnDuringGrace(t *testing.T) {
	e := newEnv(t, withFakeClock(), withQueueConfig(func(q *queentest.QueueConfig) { q.LeaseTime = 2 }))
	e.pushN("q", "p", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.c.Queue("q").RenewLease(true, 5).Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				close(started)
				<-finish
				return nil
			}).GracePeriod(time.Minute).Execute(ctx)
	}()
	<-started
	cancel()
	for range 10 { // 8 s of broker time after the stop, lease 2 s; each renewal extends it by 1 s
		n := e.srv.Requests(queentest.RouteRenew)
		awaitRequests(t, e.srv, queentest.RouteRenew, n+2)
		e.clock.Advance(800 * time.Millisecond)
	}
	close(finish)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("Execute did not return")
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("the message came back (%v): its lease ran out during the grace period", keys(left))
	}
}

// A panic in an outcome callback is recovered like a handler's: the message
// is acked failed with the panic, the panic is logged, the loop goes on.
func TestConsumeCallbackPanics(t *testing.T) {
	for _, which := range []string{"OnSuccess", "OnError"} {
		t.Run(which, func(t *testing.T) {
			e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
			e.pushN("q", "p", 2)
			var rec recorder
			err := execute(t, context.Background(), func(ctx context.Context) error {
				cb := e.c.Queue("q").Batch(1).Each().Limit(3).
					Consume(ctx, func(_ context.Context, m *queen.Message) error {
						if rec.add(key(m)) == 1 && which == "OnError" {
							return errors.New("first")
						}
						return nil
					})
				if which == "OnSuccess" {
					var once atomic.Bool
					cb.OnSuccess(func(context.Context, *queen.Message) queen.Outcome {
						if once.CompareAndSwap(false, true) {
							panic("callback kaboom")
						}
						return queen.Complete()
					})
				} else {
					cb.OnError(func(context.Context, *queen.Message, error) queen.Outcome { panic("callback kaboom") })
				}
				return cb.Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.get(); strings.Join(got, ",") != "p/0,p/0,p/1" {
				t.Fatalf("handled %v, want p/0 twice then p/1", got)
			}
			first := e.spy.ackRequests()[0].Items[0]
			// A first failure (retryLimit 3 left) goes back with retry, its text kept.
			if first.Status != "retry" || !strings.Contains(first.Error, "callback kaboom") {
				t.Fatalf("first ack %+v, want retry with the panic", first)
			}
			if !strings.Contains(e.logs.String(), "callback kaboom") {
				t.Fatal("the callback's panic was not logged")
			}
		})
	}
}

// Consume without Each() still calls the handler once per message (Each is
// implied by its signature), and settles the pop in one batch ack.
func TestConsumeImpliesEach(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "a", 3)
	e.pushN("q", "b", 2)
	var rec recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(5).Partitions(2).Limit(5).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				if rec.add(key(m)) == 1 {
					return errors.New("first fails")
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	// a/0 fails: a/1, a/2 given back (retry) in the same ack; b goes on;
	// then a/0 comes back, first of its partition (the Limit caps that pop
	// to the two messages left).
	if got := strings.Join(rec.get(), ","); got != "a/0,b/0,b/1,a/0,a/1" {
		t.Fatalf("handled %s", got)
	}
	if a := e.spy.ackRequests(); len(a) != 2 || len(a[0].Items) != 5 || len(a[1].Items) != 2 {
		t.Fatalf("acks %+v, want one batch ack per pop (5 items, then 2)", a)
	}
}

// ConsumeBatch with OnError and no Each(): the callback is asked for each
// message of the failed batch, in order, until it fails one; the rest of
// that partition is given back (retry) without a call, the other
// partitions are still asked.
func TestConsumeBatchOnErrorPerMessage(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "a", 3)
	e.pushN("q", "b", 2)
	var asked recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(5).Partitions(2).Limit(5).
			ConsumeBatch(ctx, func(context.Context, []*queen.Message) error { return errors.New("bulk insert") }).
			OnError(func(_ context.Context, m *queen.Message, err error) queen.Outcome {
				asked.add(key(m))
				if key(m) == "a/1" {
					return queen.Fail(err)
				}
				return queen.DLQ(err)
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(asked.get(), ","); got != "a/0,a/1,b/0,b/1" {
		t.Fatalf("OnError asked for %s", got)
	}
	var got []string
	for _, it := range e.spy.ackRequests()[0].Items {
		got = append(got, it.Status)
	}
	if strings.Join(got, ",") != "dlq,retry,retry,dlq,dlq" { // a/1's Fail: a first failure, sent retry
		t.Fatalf("acked %v", got)
	}
	if e.srv.DLQCount("q") != 3 {
		t.Fatalf("DLQ holds %d, want 3", e.srv.DLQCount("q"))
	}
	if left := keys(e.peek("q", "")); strings.Join(left, ",") != "a/1,a/2" {
		t.Fatalf("left %v, want a/1 a/2", left)
	}
}

// The ctx a handler gets carries the values of the ctx given to Consume.
func TestConsumeHandlerCtxValues(t *testing.T) {
	type key struct{}
	e := newEnv(t)
	e.pushN("q", "p", 1)
	var got any
	cctx := context.WithValue(context.Background(), key{}, "tenant-7")
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Each().Limit(1).
			Consume(cctx, func(hctx context.Context, _ *queen.Message) error {
				got = hctx.Value(key{})
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != "tenant-7" {
		t.Fatalf("handler ctx value %v, want the Consume ctx's", got)
	}
}

// A failed ack spends a retry: with a retry limit of 1 the second failure
// dead-letters the message. A Retry outcome spends none: three in a row
// dead-letter nothing.
func TestConsumeFailureSpendsRetry(t *testing.T) {
	for _, retry := range []bool{false, true} {
		t.Run(map[bool]string{false: "failed", true: "retry"}[retry], func(t *testing.T) {
			e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 0; q.RetryLimit = 1 }))
			e.pushN("q", "p", 1)
			var calls atomic.Int32
			err := execute(t, context.Background(), func(ctx context.Context) error {
				cb := e.c.Queue("q").Each().IdleMillis(300).
					Consume(ctx, func(context.Context, *queen.Message) error {
						calls.Add(1)
						return errors.New("boom")
					})
				if retry {
					cb = cb.OnError(func(context.Context, *queen.Message, error) queen.Outcome {
						if calls.Load() == 3 {
							return queen.Complete()
						}
						return queen.Retry()
					})
				}
				return cb.Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			wantCalls, wantDLQ := int32(2), 1
			if retry {
				wantCalls, wantDLQ = 3, 0
			}
			if calls.Load() != wantCalls || e.srv.DLQCount("q") != wantDLQ {
				t.Fatalf("%d calls, %d dead letters; want %d and %d", calls.Load(), e.srv.DLQCount("q"), wantCalls, wantDLQ)
			}
		})
	}
}

// A conflating consume hands the handler only the newest message of the
// partition, and its ack retires the older ones.
func TestConsumeConflation(t *testing.T) {
	e := newEnv(t)
	e.pushN("prices", "EURUSD", 3)
	var rec recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("prices").Group("repricer").SubscriptionMode(queen.SubscriptionModeAll).Conflation(true).
			Each().Limit(1).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				rec.add(key(m))
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.get(), ","); got != "EURUSD/2" {
		t.Fatalf("handled %s, want only the newest (EURUSD/2)", got)
	}
	if left := e.peek("prices", "repricer"); len(left) != 0 {
		t.Fatalf("left %v: the ack did not retire the older messages", keys(left))
	}
}

// A conflating consume against a broker that does not conflate (no echo)
// ends with ErrConflationUnsupported and hands the handler nothing.
func TestConsumeConflationUnsupported(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "broker-0.15.1", "pop_group_three.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/health" {
			// A 0.15.1 broker's report (no engine): the generation a
			// group's first pop asks for.
			_, _ = w.Write([]byte(`{"status":"healthy","database":"connected","version":"1.0.0"}`))
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var calls atomic.Int32
	err = execute(t, context.Background(), func(ctx context.Context) error {
		return c.Queue("t1").Group("G").Conflation(true).Each().
			Consume(ctx, func(context.Context, *queen.Message) error { calls.Add(1); return nil }).Execute(ctx)
	})
	if !errors.Is(err, queen.ErrConflationUnsupported) || calls.Load() != 0 {
		t.Fatalf("Execute = %v after %d handler calls, want ErrConflationUnsupported and none", err, calls.Load())
	}
}
