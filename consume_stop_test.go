package queen_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
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

// A pop whose answer is on its way when the loop stops is not dropped: the
// messages it leased are given back, not left leased until their lease
// runs out. A proxy holds the broker's pop answers after the first until
// the stop, and lets them go with it. (The loop gives such an answer
// answerOnItsWay, 250 ms: the margin for a local HTTP answer to arrive; the
// drain's own timing is TestStopDrainsAnswerOnItsWay's, in a bubble.)
func TestConsumeStopWaitsForAnswerOnItsWay(t *testing.T) {
	srv := queentest.Start(t)
	var answered atomic.Int32
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
			if answered.Add(1) > 1 {
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
					waitFor(t, "both pops claimed", func() bool { return answered.Load() >= 2 })
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
