package queen_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A batch ack that fails for a while (503s beyond the client's own retries)
// is sent again until it goes through: nothing is left leased when Execute
// returns.
func TestConsumeSettleRetriesTransientFailures(t *testing.T) {
	e := newEnv(t, withRetry(queen.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	e.pushN("q", "p", 3)
	e.srv.FailNext(queentest.RouteAckBatch, 3, 503, 0)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Batch(3).Each().Limit(3).
			Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.srv.Requests(queentest.RouteAckBatch); n != 4 {
		t.Fatalf("%d batch acks, want 4 (3 refused, then the one that went through)", n)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d still leased after Execute returned", n)
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("left %v: the completed outcomes were never acked", keys(left))
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
