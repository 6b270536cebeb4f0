package queen_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

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
