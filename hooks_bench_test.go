package queen

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
)

// noopHook implements every hook interface and does nothing.
type noopHook struct{}

func (noopHook) OnPush(context.Context, PushEvent) {}
func (noopHook) OnPop(context.Context, PopEvent)   {}
func (noopHook) OnHandlerStart(ctx context.Context, _ HandlerStart) context.Context {
	return ctx
}
func (noopHook) OnHandlerEnd(context.Context, HandlerEnd) {}
func (noopHook) OnSettle(context.Context, SettleEvent)    {}
func (noopHook) OnRenew(context.Context, RenewEvent)      {}
func (noopHook) OnLeaseLost(context.Context, LeaseLost)   {}
func (noopHook) OnRequest(context.Context, RequestEvent)  {}

// BenchmarkHooks measures what hooks cost on the request path: one cycle
// is a push of one message, a pop of it and its ack (three requests and
// three events besides the three request events) against queentest in
// the same process, by a client without hooks ("none") and one with a hook
// that implements every interface and does nothing ("noop"). The b.N
// cycles of each run in up to 20 alternating rounds, so that a change of
// load hits both alike. Reported: none-µs/cycle, noop-µs/cycle, ratio
// (noop/none) and allocations per cycle of each.
//
// Run: go test -run '^$' -bench BenchmarkHooks -benchtime 5000x -count 3 .
func BenchmarkHooks(b *testing.B) {
	srv := queentest.Start(b)
	none, err := New(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	noop, err := New(srv.URL, WithHooks(noopHook{}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = none.Close(context.Background())
		_ = noop.Close(context.Background())
	})
	ctx := context.Background()
	cycle := func(c *Client, q string) {
		if _, err := c.Queue(q).Push(1).Execute(ctx); err != nil {
			b.Fatal(err)
		}
		msgs, err := c.Queue(q).Wait(false).Batch(1).Pop(ctx)
		if err != nil || len(msgs) != 1 {
			b.Fatalf("pop: %v, %d messages", err, len(msgs))
		}
		if _, err := c.Ack(ctx, msgs[0], true, AckOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Warm both clients' connections.
	cycle(none, "bench-hooks-none")
	cycle(noop, "bench-hooks-noop")

	rounds := min(20, max(1, b.N/50))
	var dur [2]time.Duration
	var allocs [2]uint64
	var ms runtime.MemStats
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		for k := range 2 {
			side := (k + r) % 2 // alternate which goes first
			c, q := none, "bench-hooks-none"
			if side == 1 {
				c, q = noop, "bench-hooks-noop"
			}
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			start := time.Now()
			for range n {
				cycle(c, q)
			}
			dur[side] += time.Since(start)
			runtime.ReadMemStats(&ms)
			allocs[side] += ms.Mallocs - before
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(per(dur[0]), "none-µs/cycle")
	b.ReportMetric(per(dur[1]), "noop-µs/cycle")
	b.ReportMetric(float64(dur[1])/float64(dur[0]), "ratio")
	b.ReportMetric(float64(allocs[0])/float64(b.N), "none-allocs/cycle")
	b.ReportMetric(float64(allocs[1])/float64(b.N), "noop-allocs/cycle")
}

// BenchmarkHookSites is the cost of the call sites alone, per event
// (push, pop, handler start and end, settle, renew): without hooks (a
// nil check each) and with one no-op hook.
func BenchmarkHookSites(b *testing.B) {
	msgs := []*Message{{TransactionID: "t"}}
	acks := []Settlement{{Message: msgs[0], Status: StatusCompleted}}
	outcomes := []Outcome{Complete()}
	noop, err := newHookSet([]Hook{noopHook{}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		hs   *hookSet
	}{{"none", nil}, {"noop", noop}} {
		b.Run(bc.name, func(b *testing.B) {
			hs := bc.hs
			ctx := context.Background()
			b.ReportAllocs()
			for range b.N {
				start := hs.now()
				hs.pushed(ctx, "q", "", 1, start, nil, nil)
				hs.popped(ctx, "q", "", "g", 0, start, msgs, nil)
				hctx, turn := hs.handlerStart(ctx, "q", "g", msgs)
				hs.handlerEnd(hctx, turn, nil, outcomes, false)
				hs.settled(ctx, "g", nil, acks, nil, start, nil)
				hs.renewed(ctx, "q", "g", "l", time.Second, start, RenewResult{Success: true}, nil)
			}
		})
	}
}
