package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// BenchmarkClusterSpread compares a client of the first broker of a
// cluster with a client of all of them (the default Affinity) on the same
// work: Q queues of M messages each (10 partitions, pushed 100 a request),
// then read by one consume loop per queue (group "bench", Concurrency 4,
// Limit M). It reports msg/s-1url and msg/s-all (messages pushed and
// handled per second, push and consume together), their ratio
// (all-vs-1url) and logs the requests each broker received in each run.
// It runs only against a cluster:
//
//	QUEEN_URL=http://h1:6632,http://h2:6632,http://h3:6632 go -C integration test -run '^$' -bench ClusterSpread -benchtime 3x .
//
// QUEEN_BENCH_CLUSTER_QUEUES sets Q (default 12), QUEEN_BENCH_CLUSTER_MSGS
// sets M (default 1000).
func BenchmarkClusterSpread(b *testing.B) {
	if len(be.urls) < 2 {
		b.Skip("needs a cluster: QUEEN_URL as a comma list of its brokers' URLs")
	}
	queues, msgs := envInt("QUEEN_BENCH_CLUSTER_QUEUES", 12), envInt("QUEEN_BENCH_CLUSTER_MSGS", 1000)
	var one, all []float64
	for b.Loop() {
		round := len(one)
		// Alternate which side goes first, so that neither always meets a
		// warmer broker.
		sides := []bool{false, true}
		if round%2 == 1 {
			slices.Reverse(sides)
		}
		for _, spread := range sides {
			rate, perHost := clusterRun(b, spread, queues, msgs, round)
			name := "1url"
			if spread {
				name = "all"
				all = append(all, rate)
			} else {
				one = append(one, rate)
			}
			b.Logf("round %d, %s: %.0f msg/s, requests per broker %v", round, name, rate, perHost)
		}
	}
	b.ReportMetric(median(one), "msg/s-1url")
	b.ReportMetric(median(all), "msg/s-all")
	b.ReportMetric(median(all)/median(one), "all-vs-1url")
}

// clusterRun does the work once with a client of the first broker or of
// all of them, and returns the messages per second and the requests per
// broker host.
func clusterRun(b *testing.B, spread bool, queues, msgs, round int) (float64, map[string]int) {
	b.Helper()
	counter := &hostCounter{next: http.DefaultTransport.(*http.Transport).Clone(), hits: map[string]int{}}
	counter.next.MaxIdleConnsPerHost = 4 * queues
	defer counter.next.CloseIdleConnections()
	opts := []queen.Option{queen.WithHTTPClient(&http.Client{Transport: counter})}
	if spread {
		opts = append(opts, queen.WithURLs(be.urls[1:]...))
	}
	c, err := queen.New(be.url, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	names := make([]string, queues)
	b.StopTimer()
	for i := range names {
		names[i] = unique(fmt.Sprintf("spread-%d-%d-%t", round, i, spread))
		lease := time.Minute
		if _, err := c.Queue(names[i]).Config(queen.QueueConfig{LeaseTime: &lease}).Create().Execute(ctx); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, q := range names {
			_, _ = c.Queue(q).Delete().Execute(context.Background())
		}
	}()
	counter.reset()
	b.StartTimer()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*queues)
	for _, q := range names {
		wg.Go(func() { // push
			for k := 0; k < msgs; k += 100 {
				payloads := make([]any, min(100, msgs-k))
				for j := range payloads {
					payloads[j] = map[string]any{"n": k + j}
				}
				if _, err := c.Queue(q).Partition("p" + strconv.Itoa(k/100%10)).Push(payloads...).Execute(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() { // consume
			err := c.Queue(q).Group("bench").SubscriptionMode(queen.SubscriptionModeAll).Concurrency(4).Batch(100).
				Limit(msgs).Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(queues*msgs) / elapsed.Seconds(), counter.snapshot()
}

// hostCounter counts the requests per host it sends.
type hostCounter struct {
	next *http.Transport
	mu   sync.Mutex
	hits map[string]int
}

func (h *hostCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.hits[r.URL.Host]++
	h.mu.Unlock()
	return h.next.RoundTrip(r)
}

func (h *hostCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.hits)
}

func (h *hostCounter) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.hits))
	for k, v := range h.hits {
		out[k] = v
	}
	return out
}

// envInt reads a positive integer from the environment, def otherwise.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && v > 0 {
		return v
	}
	return def
}
