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
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

func noRetryDelay(q *queentest.QueueConfig) { q.RetryDelay = 0 }

// Handler returns nil: acked completed, and the outcomes of one pop go to
// the broker in ONE batch ack.
func TestConsumeCompletesInOneBatchAck(t *testing.T) {
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
	if len(acks) != 1 || acks[0].Path != "/api/v1/ack/batch" || len(acks[0].Items) != 10 {
		t.Fatalf("ack requests %+v, want one batch ack of 10", acks)
	}
	for _, it := range acks[0].Items {
		if it.Status != "completed" {
			t.Fatalf("ack item %+v, want completed", it)
		}
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

// Handler error under Each(): that message is acked failed with the error
// text; the rest of its partition in the batch is not handled and goes back
// with a retry in the same ack (it comes back after the failed one, and the
// partition's lease is released whatever the broker decides about the
// failed one); other partitions go on.
func TestConsumeErrorSkipsRestOfPartition(t *testing.T) {
	e := newEnv(t, withQueueConfig(noRetryDelay), withSpy())
	e.pushN("q", "a", 3)
	e.pushN("q", "b", 2)
	var rec recorder
	failed := false
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(10).Partitions(2).Each().Limit(5).
			Consume(ctx, func(_ context.Context, m *queen.Message) error {
				rec.add(key(m))
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
	// a/2 skipped, b handled; then a/1 comes back first (the Limit of 5
	// caps that second pop to the one message left to handle).
	if got, want := rec.get(), []string{"a/0", "a/1", "b/0", "b/1", "a/1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	acks := e.spy.ackRequests()
	if len(acks) != 2 {
		t.Fatalf("%d ack requests, want one batch ack per pop (2)", len(acks))
	}
	var got []string
	for _, it := range acks[0].Items {
		got = append(got, it.Status+":"+it.Error)
	}
	if want := []string{"completed:", "retry:boom a/1", "retry:", "completed:", "completed:"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acked %v, want %v", got, want)
	}
	left := e.peek("q", "")
	if got, want := keys(left), []string{"a/2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if e.srv.DLQCount("q") != 0 {
		t.Fatal("a failed ack with retries left dead-lettered")
	}
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

// A handler panic is recovered, nacked, logged with its stack; the loop
// goes on.
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
	first := e.spy.ackRequests()[0].Items[0]
	if first.Status != "retry" || !strings.Contains(first.Error, "kaboom") {
		t.Fatalf("first ack %+v, want retry (a first failure) with the panic", first)
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
