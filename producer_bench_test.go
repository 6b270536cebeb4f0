package queen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// BenchmarkProducer is a web service's push path: 64 goroutines, each
// pushing one message per call and waiting for its result, to one queue.
// It pushes b.N messages with each of
//
//	producer  a Producer (default options): Push(ctx, msg).Wait(ctx)
//	push      the unbatched client.Queue(q).Push(msg).Execute(ctx)
//	bare100   bare net/http, 4 goroutines each sending 100 messages per
//	          request (what the producer is to approach), only against a
//	          real broker (QUEEN_URL set)
//
// in up to 10 rounds of all sides (the order turning), and reports the
// msgs/s of each side over all rounds and, as the median of the rounds'
// ratios, ratio (producer to push) and bare-ratio (producer to bare100).
// Every message of every side is checked stored.
//
// Against a real broker it also runs, each with its ratio to bare100
// (<side>-bare-ratio):
//
//	producer-delay1ms  producer with WithBatchDelay(time.Millisecond)
//	producer-4p        producer, the messages spread over 4 partitions
//	producer-nowait    64 goroutines that push without waiting for each
//	                   result (fire and forget), timed until every
//	                   message is settled
//	producer-nowait-4p the same, over 4 partitions
//	bare64x1           bare net/http, 1 goroutine sending 64 messages per
//	                   request: the most one partition (one batch on the
//	                   wire) can carry for 64 callers that wait
//	bare16x4           bare net/http, 4 goroutines sending 16 per request:
//	                   64 outstanding messages without the order rule
//
// With QUEEN_URL unset it runs against queentest in the same process.
//
//	go test -run '^$' -bench BenchmarkProducer -benchtime 20000x .
//	QUEEN_URL=http://127.0.0.1:6632 go test -run '^$' -bench BenchmarkProducer -benchtime 6400x .
func BenchmarkProducer(b *testing.B) {
	url := os.Getenv("QUEEN_URL")
	if url == "" {
		url = queentest.Start(b).URL
	}
	c, err := queen.New(url, queen.WithIdleConns(80))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	real := os.Getenv("QUEEN_URL") != ""

	const workers = 64
	rounds := min(10, max(1, b.N/(10*workers)))
	sides := []string{"producer", "push"}
	if real {
		sides = append(sides, "bare100", "producer-delay1ms", "producer-4p", "producer-nowait",
			"producer-nowait-4p", "bare64x1", "bare16x4")
	}
	total := map[string]time.Duration{}
	var ratios []float64
	bareRatios := map[string][]float64{}
	seq := time.Now().UnixNano()
	b.ResetTimer()
	for r := range rounds {
		n := b.N/rounds + btoi(r < b.N%rounds)
		took := map[string]time.Duration{}
		for i := range sides {
			side := sides[(i+r)%len(sides)]
			seq++
			q := fmt.Sprintf("bench-producer-%s-%d", side, seq)
			var d time.Duration
			switch side {
			case "producer":
				d = benchProducer(b, c, q, workers, n, 1)
			case "producer-4p":
				d = benchProducer(b, c, q, workers, n, 4)
			case "producer-delay1ms":
				d = benchProducer(b, c, q, workers, n, 1, queen.WithBatchDelay(time.Millisecond))
			case "producer-nowait":
				d = benchProducerNoWait(b, c, q, workers, n, 1)
			case "producer-nowait-4p":
				d = benchProducerNoWait(b, c, q, workers, n, 4)
			case "push":
				d = benchPush(b, c, q, workers, n)
			case "bare100":
				d = benchBare(b, hc, url, q, 4, 100, n)
			case "bare64x1":
				d = benchBare(b, hc, url, q, 1, 64, n)
			case "bare16x4":
				d = benchBare(b, hc, url, q, 4, 16, n)
			}
			took[side] = d
			total[side] += d
			b.StopTimer()
			benchCheckStored(b, c, q, n)
			b.StartTimer()
		}
		ratios = append(ratios, took["push"].Seconds()/took["producer"].Seconds())
		if real {
			for _, s := range sides {
				if s != "bare100" && s != "push" {
					bareRatios[s] = append(bareRatios[s], took["bare100"].Seconds()/took[s].Seconds())
				}
			}
		}
	}
	b.StopTimer()
	for _, s := range sides {
		b.ReportMetric(float64(b.N)/total[s].Seconds(), s+"-msgs/s")
	}
	b.ReportMetric(median(ratios), "ratio")
	if real {
		b.ReportMetric(median(bareRatios["producer"]), "bare-ratio")
		for _, s := range sides {
			if s != "bare100" && s != "push" && s != "producer" {
				b.ReportMetric(median(bareRatios[s]), s+"-bare-ratio")
			}
		}
	}
}

// benchPart is the partition of message i over parts partitions ("" for
// the Default one when parts is 1).
func benchPart(i, parts int) string {
	if parts == 1 {
		return ""
	}
	return "p" + strconv.Itoa(i%parts)
}

// spread runs f(i) for i in 0..n-1 on workers goroutines and returns the
// wall time.
func spread(workers, n int, f func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if p := first.Load(); p != nil {
		return d, *p
	}
	return d, nil
}

func benchMsg(i int) json.RawMessage {
	return json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"event":"page_view","user":"u-42"}`)
}

// benchProducer pushes n messages with a Producer on workers goroutines,
// each waiting for its result, over parts partitions.
func benchProducer(b *testing.B, c *queen.Client, q string, workers, n, parts int, opts ...queen.ProducerOption) time.Duration {
	ctx := context.Background()
	p, err := c.Queue(q).Producer(opts...)
	if err != nil {
		b.Fatal(err)
	}
	d, err := spread(workers, n, func(i int) error {
		_, err := p.Partition(benchPart(i, parts)).Push(ctx, benchMsg(i)).Wait(ctx)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchProducerNoWait is benchProducer with callers that do not wait for
// each result before the next push (fire and forget): the time is until
// every message is settled (checked stored).
func benchProducerNoWait(b *testing.B, c *queen.Client, q string, workers, n, parts int) time.Duration {
	ctx := context.Background()
	p, err := c.Queue(q).Producer()
	if err != nil {
		b.Fatal(err)
	}
	pending := make([]*queen.PendingPush, n)
	start := time.Now()
	if _, err := spread(workers, n, func(i int) error {
		pending[i] = p.Partition(benchPart(i, parts)).Push(ctx, benchMsg(i))
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, pp := range pending {
		if _, err := pp.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

func benchPush(b *testing.B, c *queen.Client, q string, workers, n int) time.Duration {
	ctx := context.Background()
	qb := c.Queue(q)
	d, err := spread(workers, n, func(i int) error {
		_, err := qb.Push(benchMsg(i)).Execute(ctx)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

type benchBareItem struct {
	Queue         string          `json:"queue"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId"`
}

// benchBare pushes n messages with bare net/http, per messages to a
// request, on workers goroutines.
func benchBare(b *testing.B, hc *http.Client, url, q string, workers, per, n int) time.Duration {
	reqs := (n + per - 1) / per
	d, err := spread(workers, reqs, func(r int) error {
		items := make([]benchBareItem, 0, per)
		for i := r * per; i < min(n, (r+1)*per); i++ {
			items = append(items, benchBareItem{Queue: q, Payload: benchMsg(i), TransactionID: fmt.Sprintf("bare-%s-%d", q, i)})
		}
		body, err := json.Marshal(map[string]any{"items": items})
		if err != nil {
			return err
		}
		resp, err := hc.Post(url+"/api/v1/push", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var res []struct{ Status string }
		if err := json.Unmarshal(out, &res); err != nil || len(res) != len(items) {
			return fmt.Errorf("push answer %d %s: %v", resp.StatusCode, out, err)
		}
		for _, x := range res {
			if x.Status != "queued" {
				return fmt.Errorf("push answer: %s", out)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// benchCheckStored checks (untimed) that q holds n messages, then deletes it.
func benchCheckStored(b *testing.B, c *queen.Client, q string, n int) {
	ctx := context.Background()
	got := 0
	for got < n {
		// A short long poll: a 0.15.1 broker makes pushed messages
		// visible to pops a moment after it answered the push.
		msgs, err := c.Queue(q).Batch(5000).Wait(true).TimeoutMillis(2000).CommitOnDelivery(true).Pop(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		got += len(msgs)
	}
	if got != n {
		b.Fatalf("%s: %d messages stored, want %d", q, got, n)
	}
	if _, err := c.Queue(q).Delete().Execute(ctx); err != nil {
		b.Fatal(err)
	}
}
