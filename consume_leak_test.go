package queen_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"go.uber.org/goleak"
)

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
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
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
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
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
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
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
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
}
