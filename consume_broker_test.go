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
	"strings"
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
