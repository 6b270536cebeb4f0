package queen_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// The page's consume snippets, run against queentest with the data they
// imply, checked against what the page says.
func TestConsumeSnippets(t *testing.T) {
	ctx := context.Background()
	t.Run("queue mode, Limit(1)", func(t *testing.T) {
		e := newEnv(t)
		e.push("orders", "", map[string]any{"total": 12}, map[string]any{"total": 13})
		snippetQueueMode(ctx, e.c)
		// One message handled and acked; the other still there.
		if e.srv.LeasedCount("orders", "") != 0 {
			t.Fatal("the handled message is still leased")
		}
		if left := e.peek("orders", ""); len(left) != 1 || left[0].Data["total"] != float64(13) {
			t.Fatalf("left %v, want the second order only", keys(left))
		}
	})
	t.Run("billing group, the handler acks", func(t *testing.T) {
		e := newEnv(t)
		e.push("orders", "", map[string]any{"total": 12.5})
		snippetBillingGroup(ctx, e.c)
		if e.srv.LeasedCount("orders", "billing") != 0 || len(e.peek("orders", "billing")) != 0 {
			t.Fatal("the order was not acked completed by the handler")
		}
	})
	t.Run("billing group, a refused order is failed by the handler", func(t *testing.T) {
		e := newEnv(t, withQueueConfig(noRetryDelay))
		e.push("orders", "", map[string]any{"total": -3})
		snippetBillingGroup(ctx, e.c)
		left := e.peek("orders", "billing")
		if len(left) != 1 || left[0].DeliveryAttempt != 2 {
			t.Fatalf("left %v, want the refused order back for a retry", keys(left))
		}
	})
	t.Run("archiver, whole batches", func(t *testing.T) {
		e := newEnv(t)
		events := make([]any, 1000)
		for i := range events {
			events[i] = map[string]any{"n": i}
		}
		e.push("events", "", events...)
		snippetArchiverBatch(ctx, e.c)
		if n := e.srv.Requests("ack/batch"); n != 10 {
			t.Fatalf("%d batch acks, want 10 (1000 messages, 100 per call)", n)
		}
		if len(e.peek("events", "archiver")) != 0 {
			t.Fatal("events left after Limit(1000)")
		}
	})
	t.Run("mailer settles each message itself", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			send      error
			dlq, back int
		}{
			{"sent", nil, 0, 0},
			{"permanent failure: dlq", fmt.Errorf("no such mailbox: %w", errPermanent), 1, 0},
			{"transient failure: failed", errors.New("smtp timeout"), 0, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t, withQueueConfig(noRetryDelay))
				e.push("emails", "", map[string]any{"to": "a@example.com"})
				sendEmail = func(map[string]any) error { return tc.send }
				defer func() { sendEmail = nil }()
				snippetMailer(ctx, e.c)
				if n := e.srv.DLQCount("emails"); n != tc.dlq {
					t.Fatalf("dead letters %d, want %d", n, tc.dlq)
				}
				if n := e.srv.LeasedCount("emails", "mailer"); n != 0 {
					t.Fatalf("%d leased", n)
				}
				if n := len(e.peek("emails", "mailer")); n != tc.back {
					t.Fatalf("%d came back, want %d", n, tc.back)
				}
			})
		}
	})
	t.Run("running for real, stopped by its ctx", func(t *testing.T) {
		e := newEnv(t)
		for p := range 4 {
			e.pushN("tasks", fmt.Sprint("p", p), 5)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var n atomic.Int32
		runTask = func(map[string]any) error {
			if n.Add(1) == 20 {
				cancel() // as a SIGTERM would
			}
			return nil
		}
		defer func() { runTask = nil }()
		done := make(chan struct{})
		go func() {
			defer close(done)
			snippetRunningForReal(ctx, e.c)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Execute did not return once ctx was cancelled")
		}
		if n.Load() != 20 || e.srv.LeasedCount("tasks", "workers") != 0 {
			t.Fatalf("ran %d tasks, %d leased", n.Load(), e.srv.LeasedCount("tasks", "workers"))
		}
	})
	t.Run("read it again from a time", func(t *testing.T) {
		e := newEnv(t, withFakeClock()) // 2026-10-22T12:00Z: after the snippet's time
		e.push("orders", "", map[string]any{"total": 7})
		// A group that already read it.
		if _, err := e.c.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Pop(ctx); err != nil {
			t.Fatal(err)
		}
		snippetReadAgain(ctx, e.c)
		if e.srv.LeasedCount("orders", "audit") != 0 || len(e.peek("orders", "audit")) != 0 {
			t.Fatal("the audit group did not read and ack the order")
		}
	})
}
