package queen

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
)

var chainSink *QueueBuilder

// BenchmarkBuilderCopies puts the cost of builders being values (every
// setter copies) beside one pop: a full chain of ten setters from
// Client.Queue, and one Pop of an empty queue (no wait) through a builder
// built once, against queentest in the same process. The b.N of each run
// in up to 20 alternating rounds, so that a change of load hits both
// alike. Reported: chain-ns, pop-ns, ratio (chain/pop) and allocations of
// each.
//
// Run: go test -run '^$' -bench BenchmarkBuilderCopies -benchtime 5000x -count 3 .
func BenchmarkBuilderCopies(b *testing.B) {
	srv := queentest.Start(b)
	c, err := New(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := context.Background()
	chain := func() *QueueBuilder {
		return c.Queue("bench-builders").Partition("p").Group("g").SubscriptionMode(SubscriptionModeAll).
			Batch(10).Wait(false).TimeoutMillis(1000).LeaseTime(30*time.Second).
			Concurrency(4).RenewLease(true, 1000).Each()
	}
	qb := chain()
	pop := func() {
		if _, err := qb.Pop(ctx); err != nil {
			b.Fatal(err)
		}
	}
	pop() // the group's first pop, and a warm connection

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
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			start := time.Now()
			if side == 0 {
				for range n {
					chainSink = chain()
				}
			} else {
				for range n {
					pop()
				}
			}
			dur[side] += time.Since(start)
			runtime.ReadMemStats(&ms)
			allocs[side] += ms.Mallocs - before
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(per(dur[0]), "chain-ns")
	b.ReportMetric(per(dur[1]), "pop-ns")
	b.ReportMetric(float64(dur[0])/float64(dur[1]), "ratio")
	b.ReportMetric(float64(allocs[0])/float64(b.N), "chain-allocs")
	b.ReportMetric(float64(allocs[1])/float64(b.N), "pop-allocs")
}
