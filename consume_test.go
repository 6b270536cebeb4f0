package queen_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"go.uber.org/goleak"
)

func noRetryDelay(q *queentest.QueueConfig) { q.RetryDelay = 0 }

// Handler returns nil: acked completed, as it completes: every message
// once, in order, across as many batch acks as the sender made while the
// handler ran (what completes during a request goes in the next), never
// more than one request per message.
func TestConsumeAcksAsWorkCompletes(t *testing.T) {
	e := newEnv(t, withSpy())
	e.pushN("q", "p", 10)
	var rec recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(10).Each().Limit(10).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				rec.add(key(m))
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p/0", "p/1", "p/2", "p/3", "p/4", "p/5", "p/6", "p/7", "p/8", "p/9"}
	if got := rec.get(); !reflect.DeepEqual(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if n := e.srv.Requests(queentest.RoutePop); n != 1 {
		t.Fatalf("%d pops, want 1", n)
	}
	acks := e.spy.ackRequests()
	if got := ackedItems(acks); len(got) != 10 || strings.Join(got, ",") != strings.Repeat("completed,", 9)+"completed" {
		t.Fatalf("acked %v, want the 10 completed", got)
	}
	if len(acks) > 10 {
		t.Fatalf("%d ack requests for 10 messages", len(acks))
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d messages still leased", n)
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("messages left after completion: %v", keys(left))
	}
}

// ConsumeBatch: the whole batch is acked when the handler returns nil, and
// comes back when it returns an error.
func TestConsumeBatchAllOrNothing(t *testing.T) {
	t.Run("nil acks all", func(t *testing.T) {
		e := newEnv(t)
		e.pushN("q", "p", 5)
		var calls [][]string
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(5).Limit(5).
				ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
					calls = append(calls, keys(ms))
					return nil
				}).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 1 || len(calls[0]) != 5 {
			t.Fatalf("handler calls %v, want one call with 5 messages", calls)
		}
		if n := e.srv.Requests(queentest.RouteAckBatch); n != 1 {
			t.Fatalf("%d batch acks, want 1", n)
		}
		if left := e.peek("q", "g"); len(left) != 0 {
			t.Fatalf("left %v", keys(left))
		}
	})
	t.Run("error nacks all", func(t *testing.T) {
		e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
		e.pushN("q", "a", 3)
		e.pushN("q", "b", 2)
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Batch(5).Partitions(2).Limit(5).
				ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
					return errors.New("db down")
				}).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		acks := e.spy.ackRequests()
		if len(acks) != 1 || len(acks[0].Items) != 5 {
			t.Fatalf("ack requests %+v, want 1 of 5 items", acks)
		}
		// Each partition's first message fails; the rest of the partition
		// is given back (retry) in the same ack.
		var got []string
		for _, it := range acks[0].Items {
			got = append(got, it.Status+":"+it.Error)
		}
		// (A first failure, retries left: the loop sends it retry, its text kept.)
		if want := []string{"retry:db down", "retry:", "retry:", "retry:db down", "retry:"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("acked %v, want %v", got, want)
		}
		left := e.peek("q", "")
		if len(left) != 5 {
			t.Fatalf("after a failed batch %v came back, want all 5", keys(left))
		}
		for _, m := range left {
			if m.DeliveryAttempt != 2 {
				t.Fatalf("%s delivery attempt %d, want 2", key(m), m.DeliveryAttempt)
			}
		}
	})
}

// Handler error under Each(): the message is retried where it failed (its
// partition kept, RetryDelay 0 here), before the rest of its partition,
// which is not handled meanwhile; other partitions go on. The broker
// hears of the completions only: no failed or retry ack, nothing comes
// back, nothing is dead-lettered. (Limit(6): six handler calls.)
func TestConsumeErrorRetriesInPlace(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "a", 3)
	e.pushN("q", "b", 2)
	var rec recorder
	failed := false
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(10).Partitions(2).Each().Limit(6).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				rec.add(fmt.Sprintf("%s#%d", key(m), m.Attempt()))
				if key(m) == "a/1" && !failed { // the first time only
					failed = true
					return errors.New("boom a/1")
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.get(), []string{"a/0#1", "a/1#1", "a/1#2", "a/2#1", "b/0#1", "b/1#1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if got := ackedItems(e.spy.ackRequests()); strings.Join(got, ",") != "completed,completed,completed,completed,completed" {
		t.Fatalf("acked %v, want the 5 messages completed", got)
	}
	if n := e.srv.Requests(queentest.RoutePop); n != 1 {
		t.Fatalf("%d pops, want 1: the failed message went back to the broker", n)
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("left %v", keys(left))
	}
	if e.srv.DLQCount("q") != 0 {
		t.Fatal("a failure with retries left dead-lettered")
	}
}

// ackedItems flattens ack requests to their items' "status" or
// "status:error", in order.
func ackedItems(acks []spiedAck) []string {
	var out []string
	for _, a := range acks {
		for _, it := range a.Items {
			s := it.Status
			if it.Error != "" {
				s += ":" + it.Error
			}
			out = append(out, s)
		}
	}
	return out
}

// AutoAck(false): the handler acks itself; a handler that errors is still
// nacked, so its partition is not stuck until the lease runs out.
func TestConsumeAutoAckOff(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "p", 3)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(3).AutoAck(false).Each().Limit(2).
			Consume(ctx, func(ctx context.Context, m *queen.Message) error {
				if key(m) == "p/0" {
					_, err := e.c.Ack(ctx, m, true, queen.AckOptions{ConsumerGroup: "billing"})
					return err
				}
				return errors.New("no funds")
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	acks := e.spy.ackRequests()
	var got []string
	for _, a := range acks {
		for _, it := range a.Items {
			got = append(got, a.Group+":"+it.Status+":"+it.Error)
		}
	}
	// The handler's own completed ack, then the loop's nack (a first
	// failure: retry, counted by the loop); nothing else.
	if want := []string{"billing:completed:", "billing:retry:no funds"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acks %v, want %v", got, want)
	}
	if n := e.srv.LeasedCount("q", "billing"); n != 0 {
		t.Fatalf("%d messages still leased: the erroring handler's partition is stuck", n)
	}
	if got, want := keys(e.peek("q", "billing")), []string{"p/1", "p/2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("redelivered %v, want %v", got, want)
	}
}

// A handler panic is recovered, logged with its stack, and treated as a
// failure: the message is retried in place; the loop goes on.
func TestConsumePanicRecovered(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "p", 2)
	var rec recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(1).Each().Limit(3).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				if rec.add(key(m)) == 1 {
					panic("kaboom")
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.get(), []string{"p/0", "p/0", "p/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	if got := ackedItems(e.spy.ackRequests()); strings.Join(got, ",") != "completed,completed" {
		t.Fatalf("acked %v, want both completed (the panic retried in place)", got)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "panicked") || !strings.Contains(logs, "kaboom") || !strings.Contains(logs, "consume_test.go") {
		t.Fatalf("panic not logged with its stack:\n%s", logs)
	}
}

// Partition order under Concurrency: every partition's messages are handled
// in order and never two at once; n handlers do run at once.
func TestConsumePartitionOrderUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	const parts, per, slots = 8, 20, 4
	for p := range parts {
		e.pushN("q", fmt.Sprint("p", p), per)
	}
	var (
		mu       sync.Mutex
		next     = map[string]int{}
		inflight = map[string]int{}
		bad      []string
		arrived  atomic.Int32
		allIn    = make(chan struct{})
	)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(5).Partitions(1).Concurrency(slots).Each().Limit(parts*per).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				p, i := m.Data["p"].(string), int(m.Data["i"].(float64))
				mu.Lock()
				inflight[p]++
				if inflight[p] > 1 {
					bad = append(bad, "two at once in "+p)
				}
				if next[p] != i {
					bad = append(bad, fmt.Sprintf("%s: got %d, want %d", p, i, next[p]))
				}
				next[p] = i + 1
				mu.Unlock()
				// The first `slots` handlers meet: they must run at once.
				if n := arrived.Add(1); n <= slots {
					if n == slots {
						close(allIn)
					}
					select {
					case <-allIn:
					case <-time.After(20 * time.Second): // a hang guard: at once is within milliseconds
						mu.Lock()
						bad = append(bad, "fewer than 4 handlers ran at once")
						mu.Unlock()
					}
				}
				mu.Lock()
				inflight[p]--
				mu.Unlock()
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("order violations: %v", bad)
	}
	for p := range parts {
		if n := next[fmt.Sprint("p", p)]; n != per {
			t.Fatalf("partition p%d: %d handled, want %d", p, n, per)
		}
	}
}

// Limit counts across all slots, and caps each pop's batch so that nothing
// is popped only to be given back.
func TestConsumeLimitAcrossSlots(t *testing.T) {
	e := newEnv(t)
	for p := range 5 {
		e.pushN("q", fmt.Sprint("p", p), 10)
	}
	var n atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(10).Partitions(1).Concurrency(3).Each().Limit(5).
			Consume(ctx, func(context.Context, *queen.Message) error {
				n.Add(1)
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 5 {
		t.Fatalf("handled %d, want exactly 5 across 3 slots", n.Load())
	}
	if l := e.srv.LeasedCount("q", ""); l != 0 {
		t.Fatalf("%d leased after the limit", l)
	}
	left := e.peek("q", "")
	if len(left) != 45 {
		t.Fatalf("%d left, want 45", len(left))
	}
	for _, m := range left {
		if m.DeliveryAttempt != 1 {
			t.Fatalf("%s was popped before (attempt %d): popped needlessly", key(m), m.DeliveryAttempt)
		}
	}
}

// IdleMillis: the loop stops after that long with no message in any slot,
// abandoning its long polls. (Not while a handler runs: TestStopIdleNotWhileBusy.)
// In a synctest bubble: the durations are exact, whatever the machine's load.
func TestConsumeIdleMillis(t *testing.T) {
	t.Run("nothing to do", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := bubbleEnv(t)
			start := time.Now()
			err := e.c.Queue("q").Concurrency(3).IdleMillis(100).
				Consume(context.Background(), func(context.Context, *queen.Message) error { return nil }).
				Execute(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// The idle time, then the wait for answers on their way: a
			// stop that waited for its long polls would take their 30 s.
			if d, want := time.Since(start), 100*time.Millisecond+queen.AnswerOnItsWay; d != want {
				t.Fatalf("idle stop after %v, want %v (the 30 s long polls abandoned)", d, want)
			}
		})
	})
}

// RenewLease keeps a long handler's lease past the queue's leaseTime; without
// it the lease runs out and the ack is refused (so the test can fail). A
// renewal extends the lease by about three intervals (1 s here, the
// broker's unit): the broker's clock moves 0.8 s between renewals, 8 s in
// all, four times the lease.
func TestConsumeRenewLease(t *testing.T) {
	for _, renew := range []bool{true, false} {
		t.Run(fmt.Sprint("renew=", renew), func(t *testing.T) {
			e := newEnv(t, withFakeClock(), withQueueConfig(func(q *queentest.QueueConfig) { q.LeaseTime = 2 }))
			e.pushN("q", "p", 1)
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				ctx := context.Background()
				qb := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Each().Limit(1)
				if renew {
					qb = qb.RenewLease(true, 5)
				}
				done <- qb.Consume(ctx, func(context.Context, *queen.Message) error {
					close(started)
					<-release
					return nil
				}).Execute(ctx)
			}()
			<-started
			for range 10 { // 8 s of broker time, lease 2 s
				if renew {
					n := e.srv.Requests(queentest.RouteRenew)
					awaitRequests(t, e.srv, queentest.RouteRenew, n+2)
				}
				e.clock.Advance(800 * time.Millisecond)
			}
			close(release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Execute did not return")
			}
			left := e.peek("q", "g")
			if renew && len(left) != 0 {
				t.Fatalf("with renewal the message came back: %v", keys(left))
			}
			if !renew && len(left) != 1 {
				t.Fatalf("without renewal the lease must run out and the message come back; left %v", keys(left))
			}
		})
	}
}

// A renewal that reports the lease lost cancels the handler's ctx, and its
// outcome is not acked.
func TestConsumeLostLeaseCancelsHandler(t *testing.T) {
	e := newEnv(t, withFakeClock())
	e.pushN("q", "p", 1)
	started := make(chan struct{})
	var cause error
	err := execute(t, context.Background(), func(ctx context.Context) error {
		go func() {
			<-started
			e.clock.Advance(61 * time.Second) // the lease (60 s) runs out
		}()
		return e.c.Queue("q").RenewLease(true, 5).Each().Limit(1).
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				close(started)
				select {
				case <-hctx.Done():
					cause = context.Cause(hctx)
				case <-time.After(30 * time.Second): // a hang guard
				}
				return nil // would be acked completed if the loop did not know
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, queen.ErrLeaseLost) {
		t.Fatalf("handler ctx cause %v, want ErrLeaseLost", cause)
	}
	if n := e.acks(); n != 0 {
		t.Fatalf("%d acks sent for a lost lease, want 0", n)
	}
	left := e.peek("q", "")
	if len(left) != 1 || left[0].DeliveryAttempt != 2 {
		t.Fatalf("want the message redelivered (attempt 2), got %v", keys(left))
	}
}

// Transient broker errors back off and the loop goes on.
func TestConsumeTransientErrorsBackOff(t *testing.T) {
	cases := []struct {
		name  string
		fault func(*queentest.Server)
		wait  bool
	}{
		{"503 short polls", func(s *queentest.Server) { s.FailNext(queentest.RoutePop, 3, 503, 0) }, false},
		{"500 short polls", func(s *queentest.Server) { s.FailNext(queentest.RoutePop, 2, 500, 0) }, false},
		{"429 short polls", func(s *queentest.Server) { s.FailNext(queentest.RoutePop, 2, 429, 0) }, false},
		{"503 long polls", func(s *queentest.Server) { s.FailNext(queentest.RoutePop, 3, 503, 0) }, true},
		{"connection refused", func(s *queentest.Server) { s.RefuseConnections(100 * time.Millisecond) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
			e.pushN("q", "p", 1)
			tc.fault(e.srv)
			var n atomic.Int32
			err := execute(t, context.Background(), func(ctx context.Context) error {
				return e.c.Queue("q").Wait(tc.wait).Each().Limit(1).
					Consume(ctx, func(context.Context, *queen.Message) error { n.Add(1); return nil }).Execute(ctx)
			})
			if err != nil {
				t.Fatalf("Execute = %v, want nil after the broker recovered", err)
			}
			if n.Load() != 1 {
				t.Fatalf("handled %d, want 1", n.Load())
			}
		})
	}
}

// A non-retryable broker refusal ends Execute with that error (501: a
// broker without the route; asking again cannot change it).
func TestConsumeBrokerRefusalEndsExecute(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 501, 505} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := newEnv(t)
			e.srv.FailNext(queentest.RoutePop, 1, status, 0)
			err := execute(t, context.Background(), func(ctx context.Context) error {
				return e.c.Queue("q").Concurrency(2).
					Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
			})
			var be *queen.BrokerError
			if !errors.As(err, &be) || be.Status != status {
				t.Fatalf("Execute = %v, want the broker's %d", err, status)
			}
		})
	}
}

// Stop on ctx cancel: the running handler finishes within the grace period
// and is acked; popped but unstarted messages go back with a retry ack (no
// retry spent, back at once, not after retryDelay) in the same batch ack;
// nothing stays leased; the other slot's long poll is abandoned.
// In a synctest bubble: "not before the handler finished" is checked when
// every goroutine waits, and "at once" on the bubble's clock.
func TestConsumeStopGivesBackUnstarted(t *testing.T) {
	qc := queentest.DefaultQueueConfig()
	qc.RetryDelay = 3_600_000
	synctest.Test(t, func(t *testing.T) { stopGivesBackUnstarted(t, bubbleEnv(t, queentest.WithDefaultQueueConfig(qc))) })
}

func stopGivesBackUnstarted(t *testing.T, e *env) {
	e.pushN("q", "p", 5)
	started, finish := make(chan struct{}), make(chan struct{})
	var rec recorder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.c.Queue("q").Batch(5).Partitions(1).Concurrency(2).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				if rec.add(key(m)) == 1 {
					close(started)
					<-finish
					if hctx.Err() != nil {
						return errors.New("handler ctx cancelled within the grace period")
					}
				}
				return nil
			}).Execute(ctx)
	}()
	<-started
	awaitRequests(t, e.srv, queentest.RoutePop, 2)
	synctest.Wait() // the other slot's pop is parked at the broker
	cancel()
	synctest.Wait() // everything the stop does without the handler is done
	select {
	case err := <-done:
		t.Fatalf("Execute returned (%v) before the running handler finished", err)
	default:
	}
	finished := time.Now()
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("Execute = %v, want nil on cancel", err)
	}
	// On the bubble's clock (which stood still since the cancel): at most
	// the stop's drain of the other slot's long poll and the wait for the
	// broker to notice it abandoned (none if that poll was between two
	// tries at the stop), not the poll's 30 s.
	if d, most := time.Since(finished), queen.AnswerOnItsWay+queen.AbandonNoticed; d > most {
		t.Fatalf("Execute returned %v after the handler finished, want at most %v", d, most)
	}
	if got := rec.get(); !reflect.DeepEqual(got, []string{"p/0"}) {
		t.Fatalf("handled %v, want only p/0", got)
	}
	acks := e.spy.ackRequests()
	if len(acks) != 1 {
		t.Fatalf("%d ack requests, want one batch", len(acks))
	}
	var got []string
	for _, it := range acks[0].Items {
		got = append(got, it.Status)
	}
	if want := []string{"completed", "retry", "retry", "retry", "retry"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acked %v, want %v", got, want)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	left := e.peek("q", "")
	if got, want := keys(left), []string{"p/1", "p/2", "p/3", "p/4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("given back %v, want %v at once", got, want)
	}
}

// After the grace period the handler's ctx is cancelled; a handler that
// gives up because of it has its message given back with retry (no retry
// spent), not failed.
// In a synctest bubble: the grace period is exact.
func TestConsumeGracePeriodCancelsHandlers(t *testing.T) {
	qc := queentest.DefaultQueueConfig()
	qc.RetryDelay, qc.RetryLimit = 3_600_000, 0
	synctest.Test(t, func(t *testing.T) { gracePeriodCancelsHandlers(t, bubbleEnv(t, queentest.WithDefaultQueueConfig(qc))) })
}

func gracePeriodCancelsHandlers(t *testing.T, e *env) {
	e.pushN("q", "p", 1)
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-started; cancel() }()
	var stoppedAfter time.Duration
	err := e.c.Queue("q").Each().
		Consume(ctx, func(hctx context.Context, m *queen.Message) error {
			t0 := time.Now()
			close(started)
			<-hctx.Done()
			stoppedAfter = time.Since(t0)
			return hctx.Err()
		}).GracePeriod(50 * time.Millisecond).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stoppedAfter != 50*time.Millisecond {
		t.Fatalf("handler ctx cancelled after %v, want the 50 ms grace period", stoppedAfter)
	}
	if e.srv.DLQCount("q") != 0 {
		t.Fatal("a stopped handler was nacked failed (dead-lettered with retryLimit 0)")
	}
	if left := e.peek("q", ""); len(left) != 1 {
		t.Fatalf("the stopped message did not come back at once: %v", keys(left))
	}
}

// Either ctx ends the loop, and the in-flight long polls are abandoned
// (after the wait for answers on their way), in a synctest bubble: on its
// clock, not after the polls' 30 s.
func TestConsumeStopsOnEitherContext(t *testing.T) {
	for _, which := range []string{"execute", "consume"} {
		t.Run(which, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := bubbleEnv(t)
				cctx, ccancel := context.WithCancel(context.Background())
				xctx, xcancel := context.WithCancel(context.Background())
				defer ccancel()
				defer xcancel()
				done := make(chan error, 1)
				go func() {
					done <- e.c.Queue("q").Concurrency(2).
						Consume(cctx, func(context.Context, *queen.Message) error { return nil }).Execute(xctx)
				}()
				awaitRequests(t, e.srv, queentest.RoutePop, 2)
				synctest.Wait() // the long polls that follow the first (empty) pops are parked
				start := time.Now()
				if which == "execute" {
					xcancel()
				} else {
					ccancel()
				}
				if err := <-done; err != nil {
					t.Fatalf("Execute = %v, want nil", err)
				}
				if d := time.Since(start); d != queen.AnswerOnItsWay {
					t.Fatalf("stopped %v after the cancel, want %v (the 30 s long polls abandoned)", d, queen.AnswerOnItsWay)
				}
			})
		})
	}
}

// Outcome callbacks decide instead of the loop, still in one batch ack.
func TestConsumeOutcomeCallbacks(t *testing.T) {
	errPermanent := errors.New("no such address")
	t.Run("OnError dead-letters", func(t *testing.T) {
		e := newEnv(t, withSpy())
		e.pushN("q", "p", 2)
		var rec recorder
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Batch(2).Each().Limit(2).
				Consume(ctx, func(_ context.Context, m *queen.Message) error {
					rec.add(key(m))
					if key(m) == "p/0" {
						return fmt.Errorf("send: %w", errPermanent)
					}
					return nil
				}).
				OnError(func(_ context.Context, m *queen.Message, err error) queen.Outcome {
					if errors.Is(err, errPermanent) {
						return queen.DLQ(err)
					}
					return queen.Fail(err)
				}).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		// dlq moves past the message: the rest of the partition goes on.
		if got := rec.get(); !reflect.DeepEqual(got, []string{"p/0", "p/1"}) {
			t.Fatalf("handled %v", got)
		}
		acks := e.spy.ackRequests()
		if len(acks) != 1 || acks[0].Items[0].Status != "dlq" || acks[0].Items[0].Error != "send: no such address" {
			t.Fatalf("acks %+v, want one batch starting with dlq", acks)
		}
		if e.srv.DLQCount("q") != 1 {
			t.Fatalf("DLQ holds %d, want 1", e.srv.DLQCount("q"))
		}
		if left := e.peek("q", ""); len(left) != 0 {
			t.Fatalf("left %v", keys(left))
		}
	})
	t.Run("OnSuccess retries", func(t *testing.T) {
		e := newEnv(t)
		e.pushN("q", "p", 1)
		var rec recorder
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Each().Limit(2).
				Consume(ctx, func(_ context.Context, m *queen.Message) error {
					rec.add(fmt.Sprint(m.DeliveryAttempt))
					return nil
				}).
				OnSuccess(func(_ context.Context, m *queen.Message) queen.Outcome {
					if m.DeliveryAttempt == 1 {
						return queen.Retry()
					}
					return queen.Complete()
				}).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.get(); !reflect.DeepEqual(got, []string{"1", "2"}) {
			t.Fatalf("attempts %v, want [1 2]", got)
		}
		if left := e.peek("q", ""); len(left) != 0 {
			t.Fatalf("left %v", keys(left))
		}
	})
	t.Run("unknown status fails", func(t *testing.T) {
		e := newEnv(t, withSpy())
		e.pushN("q", "p", 1)
		err := execute(t, context.Background(), func(ctx context.Context) error {
			return e.c.Queue("q").Each().Limit(1).
				Consume(ctx, func(context.Context, *queen.Message) error { return nil }).
				OnSuccess(func(context.Context, *queen.Message) queen.Outcome {
					return queen.Outcome{Status: "maybe"}
				}).Execute(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		if a := e.spy.ackRequests(); len(a) != 1 || a[0].Items[0].Status != "retry" || !strings.Contains(a[0].Items[0].Error, "maybe") {
			t.Fatalf("acks %+v, want a failure (sent retry: retries left)", a)
		}
	})
}

// ConsumeBatch with Each() hands one message at a time.
func TestConsumeBatchEach(t *testing.T) {
	e := newEnv(t)
	e.pushN("q", "p", 3)
	var sizes []int
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(3).Each().Limit(3).
			ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
				sizes = append(sizes, len(ms))
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sizes, []int{1, 1, 1}) {
		t.Fatalf("batch sizes %v, want [1 1 1]", sizes)
	}
}

// A dropped ack answer (applied by the broker, connection closed) is retried
// and nothing is left leased or lost.
func TestConsumeDroppedAckAnswer(t *testing.T) {
	e := newEnv(t)
	e.pushN("q", "p", 4)
	e.srv.DropNextResponses(queentest.RouteAckBatch, 1)
	var n atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(4).Each().Limit(4).
			Consume(ctx, func(context.Context, *queen.Message) error { n.Add(1); return nil }).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 4 || e.srv.LeasedCount("q", "") != 0 {
		t.Fatalf("handled %d, leased %d", n.Load(), e.srv.LeasedCount("q", ""))
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("left %v", keys(left))
	}
}

// Bounded memory: at most Concurrency × Batch messages are ever leased to the
// loop at once.
func TestConsumeBoundedInFlight(t *testing.T) {
	e := newEnv(t)
	for p := range 10 {
		e.pushN("q", fmt.Sprint("p", p), 5)
	}
	var peak atomic.Int32
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(5).Concurrency(2).Each().Limit(50).
			Consume(ctx, func(context.Context, *queen.Message) error {
				if l := int32(e.srv.LeasedCount("q", "")); l > peak.Load() {
					peak.Store(l)
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > 10 || p == 0 {
		t.Fatalf("peak leased %d, want 1..10", p)
	}
}

// A ctx that has already ended stops the loop before it pops anything.
func TestConsumeCancelledBeforeExecute(t *testing.T) {
	for _, which := range []string{"execute", "consume"} {
		t.Run(which, func(t *testing.T) {
			e := newEnv(t)
			e.pushN("q", "p", 3)
			done := context.Background()
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			cctx, xctx := done, ended
			if which == "consume" {
				cctx, xctx = ended, done
			}
			for range 20 {
				var n atomic.Int32
				err := execute(t, xctx, func(ctx context.Context) error {
					return e.c.Queue("q").Concurrency(4).Each().
						Consume(cctx, func(context.Context, *queen.Message) error { n.Add(1); return nil }).Execute(xctx)
				})
				if err != nil {
					t.Fatal(err)
				}
				if n.Load() != 0 || e.srv.Requests(queentest.RoutePop) != 0 {
					t.Fatalf("handled %d after %d pops, want none: the ctx had ended", n.Load(), e.srv.Requests(queentest.RoutePop))
				}
			}
		})
	}
}

// A handler that fails because the stop cancelled a ctx of its own (the
// worker's signal ctx, say) has its message given back with retry: a deploy
// spends no retry and dead-letters nothing.
func TestConsumeStopCancellationGivenBack(t *testing.T) {
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000; q.RetryLimit = 0 }), withSpy())
	e.pushN("q", "p", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := execute(t, ctx, func(ctx context.Context) error {
		return e.c.Queue("q").Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				cancel() // the signal
				<-ctx.Done()
				return ctx.Err() // the work, done under the outer ctx, gave up
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if a := e.spy.ackRequests(); len(a) != 1 || a[0].Items[0].Status != "retry" {
		t.Fatalf("acks %+v, want one retry", a)
	}
	if e.srv.DLQCount("q") != 0 {
		t.Fatal("a handler stopped by the stop was dead-lettered")
	}
	if left := e.peek("q", ""); len(left) != 1 {
		t.Fatalf("the message did not come back at once: %v", keys(left))
	}
}

// A pop whose answer is on its way when the loop stops is not dropped: the
// messages it leased are given back, not left leased until their lease
// runs out. A proxy holds the broker's pop answers after the first until
// the stop, and lets them go with it. (The loop gives such an answer
// answerOnItsWay, 250 ms: the margin for a local HTTP answer to arrive; the
// drain's own timing is TestStopDrainsAnswerOnItsWay's, in a bubble.)
func TestConsumeStopWaitsForAnswerOnItsWay(t *testing.T) {
	srv := queentest.Start(t)
	var answered atomic.Int32
	claimed := make(chan struct{}) // closed when both pops have claimed
	held := make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	defer release()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = tr
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(resp.Request.URL.Path, "/api/v1/pop") && resp.StatusCode == http.StatusOK {
			if n := answered.Add(1); n > 1 {
				if n == 2 {
					close(claimed)
				}
				<-held // the answer on its way
			}
		}
		return nil
	}
	proxy := httptest.NewServer(rp)
	defer proxy.Close()
	c, err := queen.New(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	e := &env{t: t, srv: srv, c: c}
	e.pushN("q", "a", 5)
	e.pushN("q", "b", 5)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int32
	err = execute(t, ctx, func(ctx context.Context) error {
		return c.Queue("q").Batch(5).Partitions(1).Concurrency(2).Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				if handled.Add(1) == 1 {
					// Both slots' pops have claimed; the other answer is held.
					select {
					case <-claimed:
					case <-time.After(30 * time.Second): // a hang guard
						t.Error("the second pop never claimed")
					}
					cancel()
					release()
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d messages left leased after Execute returned: the answer on its way was dropped", n)
	}
	if n := len(e.peek("q", "")); int32(n) != 10-handled.Load() {
		t.Fatalf("%d messages back, want %d", n, 10-handled.Load())
	}
}

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

// A panic in an outcome callback is recovered like a handler's: the
// message fails with the panic (and is retried in place), the panic is
// logged, the loop goes on.
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
					cb = cb.OnSuccess(func(context.Context, *queen.Message) queen.Outcome {
						if once.CompareAndSwap(false, true) {
							panic("callback kaboom")
						}
						return queen.Complete()
					})
				} else {
					cb = cb.OnError(func(context.Context, *queen.Message, error) queen.Outcome { panic("callback kaboom") })
				}
				return cb.Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := rec.get(); strings.Join(got, ",") != "p/0,p/0,p/1" {
				t.Fatalf("handled %v, want p/0 twice then p/1", got)
			}
			// A first failure (retryLimit 3 left): retried in place, then completed.
			if got := ackedItems(e.spy.ackRequests()); strings.Join(got, ",") != "completed,completed" {
				t.Fatalf("acked %v, want both completed", got)
			}
			if !strings.Contains(e.logs.String(), "callback kaboom") {
				t.Fatal("the callback's panic was not logged")
			}
		})
	}
}

// Consume without Each() still calls the handler once per message (Each is
// implied by its signature), a partition's in order.
func TestConsumeImpliesEach(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "a", 3)
	e.pushN("q", "b", 2)
	var rec recorder
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(5).Partitions(2).Limit(6).
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
	// a/0 fails: retried in place before a/1 and a/2; then b.
	if got := strings.Join(rec.get(), ","); got != "a/0,a/0,a/1,a/2,b/0,b/1" {
		t.Fatalf("handled %s", got)
	}
	if got := ackedItems(e.spy.ackRequests()); len(got) != 5 {
		t.Fatalf("acked %v, want the 5 messages once each", got)
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

// meeting is a handler that holds each call until want handlers run at
// once (or meetTimeout passes, which it records as a failure, so that a loop
// that cannot run them at once fails rather than hangs), and checks on the
// way that one partition's messages run one at a time and in order.
type meeting struct {
	want int

	mu      sync.Mutex
	running map[string]int // partition -> handlers running
	last    map[string]int // partition -> last message handled
	now     int
	most    int
	atPeak  []string // partitions running when want of them first ran
	bad     []string
	done    []string        // keys handled, in order
	leases  map[string]bool // lease ids of the handled messages: one per pop
	txKey   map[string]string
	all     chan struct{}
	allOnce sync.Once
}

// idleStop ends these runs once every message is done: 1.5 s with no
// pop in hand, a margin no gap between the pops of a busy run comes near,
// on a loaded machine too.
const idleStop = 1500

const meetTimeout = 20 * time.Second // a hang guard: handlers that run at once meet within milliseconds

func newMeeting(want int) *meeting {
	return &meeting{want: want, running: map[string]int{}, last: map[string]int{},
		leases: map[string]bool{}, txKey: map[string]string{}, all: make(chan struct{})}
}

func (mt *meeting) handle(_ context.Context, m *queen.Message) error {
	p, i := m.Data["p"].(string), int(m.Data["i"].(float64))
	mt.mu.Lock()
	mt.running[p]++
	if mt.running[p] > 1 {
		mt.bad = append(mt.bad, "two handlers at once on partition "+p)
	}
	if last, ok := mt.last[p]; ok && i <= last {
		mt.bad = append(mt.bad, fmt.Sprintf("%s: message %d after %d", p, i, last))
	}
	mt.last[p] = i
	mt.leases[m.LeaseID] = true
	mt.txKey[m.TransactionID] = key(m)
	mt.now++
	mt.most = max(mt.most, mt.now)
	if mt.now == mt.want && mt.atPeak == nil {
		for q, n := range mt.running {
			if n > 0 {
				mt.atPeak = append(mt.atPeak, q)
			}
		}
		mt.allOnce.Do(func() { close(mt.all) })
	}
	mt.mu.Unlock()

	select {
	case <-mt.all:
	case <-time.After(meetTimeout):
		mt.mu.Lock()
		mt.bad = append(mt.bad, fmt.Sprintf("waited %v for %d handlers at once; at most %d ran", meetTimeout, mt.want, mt.most))
		mt.mu.Unlock()
		mt.allOnce.Do(func() { close(mt.all) }) // the others need not wait too
	}

	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.running[p]--
	mt.now--
	mt.done = append(mt.done, key(m))
	return nil
}

// check fails t unless want handlers ran at once on want distinct
// partitions, never two of one partition, and every message of parts×per
// was handled once.
func (mt *meeting) check(t *testing.T, parts, per int) {
	t.Helper()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if len(mt.bad) > 0 {
		t.Fatalf("%v", mt.bad)
	}
	if mt.most != mt.want || len(mt.atPeak) != mt.want {
		t.Fatalf("at most %d handlers ran at once (on %v); want %d on %d partitions", mt.most, mt.atPeak, mt.want, mt.want)
	}
	seen := map[string]bool{}
	for _, k := range mt.done {
		if seen[k] {
			t.Fatalf("%s handled twice", k)
		}
		seen[k] = true
	}
	if len(seen) != parts*per {
		t.Fatalf("handled %d messages, want %d", len(seen), parts*per)
	}
}

// checkAcks fails t unless every message a handler got was acked once,
// completed, each partition's in order across the ack requests (acks go
// as work completes: a request may hold several pops' and partitions'
// messages, a partition's in order within it).
func (mt *meeting) checkAcks(t *testing.T, e *env) {
	t.Helper()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	acked := map[string]bool{}
	last := map[string]int{}
	for _, a := range e.spy.ackRequests() {
		for _, it := range a.Items {
			k, ok := mt.txKey[it.TransactionID]
			if !ok {
				t.Fatalf("ack of a message no handler got: %+v", it)
			}
			if it.Status != "completed" || acked[k] {
				t.Fatalf("%s acked %s (acked before: %v), want completed once", k, it.Status, acked[k])
			}
			acked[k] = true
			p, n, _ := strings.Cut(k, "/")
			i, _ := strconv.Atoi(n)
			if prev, ok := last[p]; ok && i <= prev {
				t.Fatalf("acks of partition %s out of order: %d after %d", p, i, prev)
			}
			last[p] = i
		}
	}
	if len(acked) != len(mt.txKey) {
		t.Fatalf("%d messages acked, %d handled", len(acked), len(mt.txKey))
	}
}

// The page's worker ("Running a consumer for real"): Concurrency(4) runs
// four handlers at once, on four partitions, whatever sizes the pops: the
// autopilot (one pop may take every ready partition), a Limit with no
// Batch, a Limit with Partitions(1), a pinned pop over many partitions.
// Every message is acked once, each partition's in order.
func TestConsumeConcurrencyRunsHandlersOnDistinctPartitions(t *testing.T) {
	const parts, per = 5, 3
	for _, tc := range []struct {
		name string
		opts func(*queen.QueueBuilder) *queen.QueueBuilder
	}{
		{"the page's worker (autopilot)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q }},
		{"Limit(200) without Batch", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(200) }},
		{"Limit(200) and Partitions(1)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(200).Partitions(1) }},
		{"Limit(15): ends with the Limit", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(parts * per) }},
		{"Batch(100) and Partitions(8)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Batch(100).Partitions(8) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withSpy())
			for p := range parts {
				e.pushN("tasks", fmt.Sprint("p", p), per)
			}
			mt := newMeeting(4)
			err := execute(t, context.Background(), func(ctx context.Context) error {
				qb := e.c.Queue("tasks").
					Group("workers").
					SubscriptionMode(queen.SubscriptionModeAll).
					Concurrency(4).
					RenewLease(true, 10000).
					IdleMillis(idleStop).
					Each()
				return tc.opts(qb).Consume(ctx, mt.handle).Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			mt.check(t, parts, per)
			mt.checkAcks(t, e)
			if n := e.srv.LeasedCount("tasks", "workers"); n != 0 {
				t.Fatalf("%d leased after Execute returned", n)
			}
			if left := e.peek("tasks", "workers"); len(left) != 0 {
				t.Fatalf("left %v, want every task done", keys(left))
			}
		})
	}
}

// ConsumeBatch with Each() is the same: per message, four at once.
func TestConsumeBatchEachConcurrency(t *testing.T) {
	e := newEnv(t, withSpy())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	mt := newMeeting(4)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Concurrency(4).Each().IdleMillis(idleStop).
			ConsumeBatch(ctx, func(ctx context.Context, msgs []*queen.Message) error {
				if len(msgs) != 1 {
					t.Errorf("Each() gave the handler %d messages", len(msgs))
				}
				return mt.handle(ctx, msgs[0])
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	mt.check(t, 4, 3)
	mt.checkAcks(t, e)
}

// One pop over four partitions, handled by four handlers at once: every
// message acked once, in its partition's order, in at most one request
// per message.
func TestConsumeOnePopManyPartitions(t *testing.T) {
	e := newEnv(t, withSpy())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	mt := newMeeting(4)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(12).Partitions(4).Concurrency(4).Each().IdleMillis(idleStop).
			Consume(ctx, mt.handle).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	mt.check(t, 4, 3)
	if len(mt.leases) != 1 {
		t.Fatalf("%d pops delivered the messages, want the first one all 12", len(mt.leases))
	}
	if a, b := e.srv.Requests(queentest.RouteAck), e.srv.Requests(queentest.RouteAckBatch); a+b > 12 {
		t.Fatalf("ack requests: ack %d, ack/batch %d; want at most one per message", a, b)
	}
	mt.checkAcks(t, e)
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d leased after Execute returned", n)
	}
}

// A stop while some partitions of a pop wait for a free handler: the
// running ones finish and are acked, the waiting ones are given back with
// retry, each message once (acks leave as work completes, so in one
// request or in several); nothing stays leased.
func TestConsumeStopGivesBackWaitingPartitions(t *testing.T) {
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }), withSpy())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	second := make(chan struct{})
	err := execute(t, ctx, func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(8).Partitions(4).Concurrency(2).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				switch rec.add(key(m)) {
				case 1: // waits for a second handler, on another partition
					select {
					case <-second:
					case <-time.After(meetTimeout):
					}
				case 2: // two handlers run: the stop
					cancel()
					close(second)
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := rec.get()
	if len(got) != 2 || got[0][:2] == got[1][:2] {
		t.Fatalf("handled %v, want the first message of two partitions", got)
	}
	seen := map[string]bool{}
	completed := 0
	for _, a := range e.spy.ackRequests() {
		for _, it := range a.Items {
			if seen[it.TransactionID] {
				t.Fatalf("%s acked twice", it.TransactionID)
			}
			seen[it.TransactionID] = true
			switch it.Status {
			case "completed":
				completed++
			case "retry":
			default:
				t.Fatalf("acked %+v, want completed or retry", it)
			}
		}
	}
	if len(seen) != 8 {
		t.Fatalf("%d messages acked, want the pop's 8", len(seen))
	}
	if completed != 2 {
		t.Fatalf("%d completed, want the 2 handled", completed)
	}
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d leased after Execute returned", n)
	}
	if left := e.peek("q", "g"); len(left) != 6 {
		t.Fatalf("given back %v, want the 6 not handled, at once", keys(left))
	}
}

// A lost lease cancels only the handlers of its pop: another pop's handler,
// running at the same time, goes on and is acked.
func TestConsumeLostLeaseCancelsOnlyItsHandlers(t *testing.T) {
	renewals := newRenewWatch()
	e := newEnv(t, withHooks(renewals))
	e.pushN("q", "a", 1)
	e.pushN("q", "b", 1)
	type call struct {
		m    *queen.Message
		hctx context.Context
	}
	calls := make(chan call, 2)
	release := make(chan struct{})
	var mu sync.Mutex
	causes := map[string]error{}
	err := execute(t, context.Background(), func(ctx context.Context) error {
		go func() {
			a, b := <-calls, <-calls
			lost := a
			if key(b.m) == "a/0" {
				lost = b
			}
			// Release partition a's lease behind the loop's back: its next
			// renewal finds no live lease.
			give := []queen.Settlement{{Message: lost.m, Status: queen.StatusRetry}}
			if _, err := e.c.SettleBatch(context.Background(), give, queen.AckOptions{ConsumerGroup: "g"}); err != nil {
				t.Error(err)
			}
			select {
			case <-lost.hctx.Done():
			case <-time.After(30 * time.Second): // a hang guard
				t.Error("the handler of the lost lease was not cancelled")
			}
			if !renewals.await(2) { // a few more renewals of the other lease
				t.Error("no renewal after the lost lease")
			}
			close(release)
		}()
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Partitions(1).Concurrency(2).RenewLease(true, 5).Each().Limit(2).
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				calls <- call{m, hctx}
				select {
				case <-release:
				case <-time.After(30 * time.Second): // a hang guard
				}
				mu.Lock()
				causes[key(m)] = context.Cause(hctx)
				mu.Unlock()
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(causes["a/0"], queen.ErrLeaseLost) {
		t.Fatalf("a/0's ctx: %v, want ErrLeaseLost", causes["a/0"])
	}
	if causes["b/0"] != nil {
		t.Fatalf("b/0's ctx was cancelled (%v): another pop's lease was lost", causes["b/0"])
	}
	left := e.peek("q", "g")
	if got := keys(left); !reflect.DeepEqual(got, []string{"a/0"}) {
		t.Fatalf("left %v, want a/0 only (b/0 acked completed)", got)
	}
}

// After Execute returns, no goroutine of the loop is left: slots,
// supervisor, renewers and long polls are all gone (the client's and the
// broker's pooled connections are closed before the check).
func TestConsumeLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := newEnv(t, withFakeClock())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- e.c.Queue("q").Batch(3).Partitions(1).Concurrency(6).RenewLease(true, 5).IdleMillis(60_000).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				started <- struct{}{}
				<-hctx.Done() // ends with the grace period
				return hctx.Err()
			}).GracePeriod(20 * time.Millisecond).Execute(ctx)
	}()
	for range 4 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d messages still leased after Execute returned", n)
	}
	e.closeNoLeak(t, before)
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow in a
// handler does) stops the loop with an error; its message and the
// unstarted ones are given back, and no renewer is left behind.
func TestConsumeHandlerGoexit(t *testing.T) {
	before := goleak.IgnoreCurrent()
	renewals := newRenewWatch()
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }), withHooks(renewals))
	e.pushN("q", "p", 3)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(3).RenewLease(true, 5).Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				if !renewals.await(2) { // a renewer runs when the goroutine ends
					t.Error("no renewal")
				}
				runtime.Goexit()
				return nil
			}).Execute(ctx)
	})
	if err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("Execute = %v, want the handler's Goexit reported", err)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if left := e.peek("q", ""); len(left) != 3 {
		t.Fatalf("given back %v, want all 3 at once", keys(left))
	}
	e.closeNoLeak(t, before)
}

// The same with a pop's partitions handled side by side: one handler ends
// its goroutine while another of the pop runs and two partitions wait for a
// slot. The loop stops with the error; the running handler's outcome is
// acked, everything else is given back; no renewer, slot or poller is left.
func TestConsumeHandlerGoexitSideBySide(t *testing.T) {
	before := goleak.IgnoreCurrent()
	renewals := newRenewWatch()
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }), withHooks(renewals))
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 2)
	}
	var calls atomic.Int32
	second := make(chan struct{})
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(8).Partitions(4).Concurrency(2).RenewLease(true, 5).Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				if calls.Add(1) == 1 {
					select { // the other slot's handler ends its goroutine meanwhile
					case <-second:
					case <-time.After(30 * time.Second): // a hang guard
						return errors.New("no second handler ran at once")
					}
					if !renewals.await(2) { // the loop stops meanwhile; its renewals go on
						t.Error("no renewal")
					}
					return nil
				}
				close(second)
				runtime.Goexit()
				return nil
			}).Execute(ctx)
	})
	if err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("Execute = %v, want the handler's Goexit reported", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d handler calls, want 2", n)
	}
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if left := e.peek("q", "g"); len(left) != 7 {
		t.Fatalf("given back %v, want 7 (all but the one completed)", keys(left))
	}
	e.closeNoLeak(t, before)
}

// A stop during a hold for retryDelay (3_600_000 ms here), with
// Concurrency(1) and a later pop of another partition handled during the
// hold: the hold ends at once, the held message is given back (its retry
// ack sent), nothing stays leased and no goroutine of the loop is left.
func TestConsumeStopDuringHoldLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }))
	e.pushN("q", "a", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	err := execute(t, ctx, func(ctx context.Context) error {
		return e.c.Queue("q").Batch(5).Partitions(1).RenewLease(true, 5).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				switch rec.add(key(m)); key(m) {
				case "a/0": // b comes in a later pop, handled during a's hold
					_, err := e.c.Queue("q").Partition("b").Push(
						map[string]any{"p": "b", "i": 0}, map[string]any{"p": "b", "i": 1}).Execute(hctx)
					if err != nil {
						return fmt.Errorf("push b: %w", err)
					}
					return errors.New("fails")
				case "b/1":
					cancel() // the stop, during a's hold
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rec.get(), ","), "a/0,b/0,b/1"; got != want {
		t.Fatalf("handled %s, want %s", got, want)
	}
	// a's held retry ack went (nothing leased, a/0 back at once), b's
	// completions too (b is gone).
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if left := e.peek("q", ""); len(left) != 1 || key(left[0]) != "a/0" {
		t.Fatalf("given back %v, want a/0 alone, at once", keys(left))
	}
	e.closeNoLeak(t, before)
}

// goexitOnSettle is a SettleHook that ends its goroutine (runtime.Goexit,
// as t.FailNow in a hook does).
type goexitOnSettle struct{}

func (goexitOnSettle) OnSettle(context.Context, queen.SettleEvent) { runtime.Goexit() }

// A hook that ends the sender's goroutine stops the loop with an error,
// rather than leave it waiting for the ack's answer; nothing is left
// running.
func TestConsumeHookGoexit(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := newEnv(t, withHooks(goexitOnSettle{}))
	e.pushN("q", "p", 2)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(2).Each().
			Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	})
	if err == nil || !strings.Contains(err.Error(), "Goexit") {
		t.Fatalf("Execute = %v, want the hook's Goexit reported", err)
	}
	e.closeNoLeak(t, before)
}
