package queen_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

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
// at the first failure with the error, then a line per backoff step only
// (not per failure), a Warn when pops succeed again, every failure to
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
	if len(failures) < failedPops || warns < 1 || warns > 3 || warns >= len(failures) {
		t.Fatalf("%d failures, %d Warn lines; want a Warn at the first and at each of the 3 backoff steps only:\n%s",
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

// A handler panic is logged at Error with its stack, and its error names
// the message: queue, partition, transaction id.
func TestConsumePanicNamesTheMessage(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("orders", "p7", 1)
	var txn string
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("orders").Limit(2).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				if txn == "" {
					txn = m.TransactionID
					panic("kaboom")
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	text := e.spy.ackRequests()[0].Items[0].Error
	for _, want := range []string{"queue orders", "partition p7", "transaction " + txn, "kaboom"} {
		if !strings.Contains(text, want) {
			t.Errorf("panic error %q lacks %q", text, want)
		}
	}
	if countLines(e.logs.String(), "ERROR", "panicked") != 1 || !strings.Contains(e.logs.String(), "consume_loud_test.go") {
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
