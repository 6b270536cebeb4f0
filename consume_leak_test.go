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
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }))
	e.pushN("q", "p", 3)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(3).RenewLease(true, 5).Each().
			Consume(ctx, func(context.Context, *queen.Message) error {
				time.Sleep(20 * time.Millisecond) // a few renewals
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
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }))
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
					time.Sleep(20 * time.Millisecond)
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
