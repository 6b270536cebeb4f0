package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// BenchmarkLimitRun is the workload of issue 11's Limit end game: N
// messages over 10 partitions, consumed by Concurrency(4), Batch(100),
// Limit(N), in each of the loop's modes, next to a bare loop that does the
// same with net/http and encoding/json (4 goroutines, each popping up to
// 100 messages of any partition and acking each pop in one batch ack,
// until N are acked). Each iteration times one run of each on a fresh
// queue (the pushes are not timed) and the benchmark reports:
//
//	ratio   bare time / loop time (1.0: as fast as the bare loop)
//	loop-s  bare-s  seconds a run, averaged
//
// It runs against the integration backend, a real broker included:
//
//	QUEEN_URL=http://127.0.0.1:6632 go -C integration test -run '^$' -bench LimitRun -benchtime 3x ./...
//
// QUEEN_BENCH_MSGS sets N (default 2000).
func BenchmarkLimitRun(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("QUEEN_BENCH_MSGS")); err == nil && v > 0 {
		n = v
	}
	modes := []struct {
		name string
		run  func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error
	}{
		{"Each", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.Each().ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
				count.Add(int64(len(ms)))
				return nil
			}).Execute(ctx)
		}},
		{"Consume", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.Consume(ctx, func(context.Context, *queen.Message) error {
				count.Add(1)
				return nil
			}).Execute(ctx)
		}},
		{"ConsumeBatch", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
				count.Add(int64(len(ms)))
				return nil
			}).Execute(ctx)
		}},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			c := newBenchClient(b)
			var loopT, bareT time.Duration
			for i := range b.N {
				q := benchQueue(b, c, fmt.Sprintf("loop-%s-%d", mode.name, i), n)
				var got atomic.Int64
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := mode.run(ctx, c.Queue(q).Batch(100).Concurrency(4).Limit(n), &got)
				cancel()
				loopT += time.Since(start)
				if err != nil || got.Load() != int64(n) {
					b.Fatalf("loop: %v, %d of %d messages", err, got.Load(), n)
				}

				q = benchQueue(b, c, fmt.Sprintf("bare-%s-%d", mode.name, i), n)
				start = time.Now()
				bareConsume(b, be.url, q, n)
				bareT += time.Since(start)
			}
			b.ReportMetric(bareT.Seconds()/loopT.Seconds(), "ratio")
			b.ReportMetric(loopT.Seconds()/float64(b.N), "loop-s")
			b.ReportMetric(bareT.Seconds()/float64(b.N), "bare-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func newBenchClient(b *testing.B) *queen.Client {
	c, err := queen.New(be.url, queen.WithIdleConns(16))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// benchQueue makes a queue of n messages over 10 partitions and deletes it
// when the benchmark ends.
func benchQueue(b *testing.B, c *queen.Client, base string, n int) string {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	q := unique("bench-" + base)
	lease := time.Minute
	if _, err := c.Queue(q).Config(queen.QueueConfig{LeaseTime: &lease}).Create().Execute(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = c.Queue(q).Delete().Execute(context.Background()) })
	per := n / 10
	for p := range 10 {
		k := per
		if p == 9 {
			k = n - 9*per
		}
		payloads := make([]any, k)
		for i := range payloads {
			payloads[i] = map[string]any{"n": i}
		}
		for start := 0; start < k; start += 500 {
			end := min(start+500, k)
			if _, err := c.Queue(q).Partition(fmt.Sprintf("p%d", p)).Push(payloads[start:end]...).Execute(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return q
}

// bareConsume is the baseline: 4 goroutines pop (up to 100, any
// partition, no long poll) and ack each pop in one batch ack, until n
// messages are acked.
func bareConsume(b *testing.B, base, q string, n int) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer hc.CloseIdleConnections()
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for acked.Load() < int64(n) {
				left := int64(n) - acked.Load()
				if err := barePopAck(hc, base, q, min(100, int(left)), &acked); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

type barePop struct {
	LeaseID  *string `json:"leaseId"`
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
}

type bareAck struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
}

func barePopAck(hc *http.Client, base, q string, batch int, acked *atomic.Int64) error {
	resp, err := hc.Get(base + "/api/v1/pop/queue/" + url.PathEscape(q) + "?wait=false&batch=" + strconv.Itoa(batch))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var p barePop
	if resp.StatusCode == http.StatusNoContent || len(body) == 0 || json.Unmarshal(body, &p) != nil || len(p.Messages) == 0 {
		time.Sleep(2 * time.Millisecond) // every partition leased or empty
		return nil
	}
	acks := make([]bareAck, len(p.Messages))
	for i, m := range p.Messages {
		acks[i] = bareAck{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: "completed"}
	}
	out, _ := json.Marshal(map[string]any{"acknowledgments": acks})
	resp, err = hc.Post(base+"/api/v1/ack/batch", "application/json", bytes.NewReader(out))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ack: %s", resp.Status)
	}
	acked.Add(int64(len(acks)))
	return nil
}
