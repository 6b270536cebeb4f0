package queen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// BenchmarkProducer is a web service's push path: 64 goroutines, each
// pushing one message per call, to one queue. It pushes b.N messages with
// each side below, in rounds of b.N/10 messages a side, at least 10,000
// (-benchtime 10000x or more; fewer rounds when b.N is smaller), the order
// of the sides turning from round to round; each run of a side has a queue
// of its own created before the clock starts and a client (or, for the
// bare loops, an http.Transport) of its own. Afterwards (untimed) it reads
// every side's queue back and checks that each message is stored exactly
// once. The message i of a side goes to partition p<i%4> (a request r of a
// bare loop to p<r%4>) unless said otherwise.
//
//	producer       a Producer (default options); each goroutine pushes and
//	               goes on (Push returns at once), keeping the PendingPush;
//	               timed until every message has its outcome (each one
//	               checked)
//	producer-1p    the same, all to the Default partition
//	producer-16p   the same, over 16 partitions
//	producer-wait  each goroutine waits for its message's result before
//	               its next push (Push(ctx, msg).Wait(ctx))
//	push           the unbatched client.Queue(q).Push(msg).Execute(ctx), as
//	               the issue names it: the Default partition
//	push-4p        the same over the 4 partitions, Partition(p).Push(msg)
//
// and, against a real broker only (QUEEN_URL set), bare net/http loops with
// no client cost:
//
//	bare100   4 goroutines, 100 messages per request: what the producer is
//	          to approach
//	bare64x1  1 goroutine, 64 messages per request, the Default partition:
//	          64 callers that each wait for their result, on one partition
//	bare16x4  4 goroutines, 16 messages per request: 64 outstanding
//	          messages, no order kept
//
// QUEEN_BENCH_SIDES, a comma-separated list of side names, runs only those
// (a ratio whose sides did not run is not reported).
//
// It reports each side's msgs/s over all rounds, and, as medians of the
// rounds' paired ratios: ratio (producer to push), 4p-ratio (producer to
// push-4p), <side>-ratio and <side>-4p-ratio (another side to them), and
// against a real broker bare-ratio (producer to bare100) and
// <side>-bare-ratio.
//
//	go test -run '^$' -bench BenchmarkProducer -benchtime 50000x .
//	QUEEN_URL=http://127.0.0.1:6632 go test -run '^$' -bench BenchmarkProducer -benchtime 80000x .
func BenchmarkProducer(b *testing.B) {
	url := os.Getenv("QUEEN_URL")
	if url == "" {
		url = queentest.Start(b).URL
	}
	// The admin calls around the sides (create, check, delete).
	admin, err := queen.New(url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(context.Background())
	real := os.Getenv("QUEEN_URL") != ""

	// Each side runs on connections of its own, new for each run: a
	// client whose pool holds the 64 connections of the unbatched side
	// measured up to a fifth slower on the real 0.15.1 broker after it
	// (which spreads connections over its worker threads as they come,
	// so reused ones may crowd one thread), and the bare loops never share
	// theirs.
	const workers = 64
	type side struct {
		name string
		run  func(c *queen.Client, hc *http.Client, q string, n int) time.Duration
	}
	producer := func(name string, parts int, wait bool) side {
		return side{name, func(c *queen.Client, _ *http.Client, q string, n int) time.Duration {
			return benchProducer(b, c, q, workers, n, parts, wait)
		}}
	}
	push := func(name string, parts int) side {
		return side{name, func(c *queen.Client, _ *http.Client, q string, n int) time.Duration {
			return benchPush(b, c, q, workers, n, parts)
		}}
	}
	bare := func(name string, goroutines, per, parts int) side {
		return side{name, func(_ *queen.Client, hc *http.Client, q string, n int) time.Duration {
			return benchBare(b, hc, url, q, goroutines, per, n, parts)
		}}
	}
	sides := []side{
		producer("producer", 4, false),
		producer("producer-1p", 1, false),
		producer("producer-16p", 16, false),
		producer("producer-wait", 4, true),
		push("push", 1),
		push("push-4p", 4),
	}
	if real {
		sides = append(sides, bare("bare100", 4, 100, 4), bare("bare64x1", 1, 64, 1), bare("bare16x4", 4, 16, 4))
	}
	if only := os.Getenv("QUEEN_BENCH_SIDES"); only != "" {
		var keep []string
		for _, name := range strings.Split(only, ",") {
			name = strings.TrimSpace(name)
			if !slices.ContainsFunc(sides, func(s side) bool { return s.name == name }) {
				b.Fatalf("QUEEN_BENCH_SIDES: no side %q here", name)
			}
			keep = append(keep, name)
		}
		sides = slices.DeleteFunc(sides, func(s side) bool { return !slices.Contains(keep, s.name) })
	}
	rounds := min(10, max(1, b.N/10000))
	total := map[string]time.Duration{}
	ratios := map[string][]float64{}
	seq := time.Now().UnixNano()
	b.ResetTimer()
	for r := range rounds {
		n := b.N/rounds + btoi(r < b.N%rounds)
		took := map[string]time.Duration{}
		for i := range sides {
			s := sides[(i+r)%len(sides)]
			seq++
			q := fmt.Sprintf("bench-producer-%s-%d", s.name, seq)
			b.StopTimer()
			benchCreateQueue(b, admin, q)
			c, err := queen.New(url, queen.WithIdleConns(80))
			if err != nil {
				b.Fatal(err)
			}
			tr := &http.Transport{MaxIdleConnsPerHost: 8}
			b.StartTimer()
			d := s.run(c, &http.Client{Transport: tr}, q, n)
			b.StopTimer()
			took[s.name] = d
			total[s.name] += d
			tr.CloseIdleConnections()
			if err := c.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			benchCheckStored(b, admin, q, n)
			b.StartTimer()
		}
		var line []string
		for _, s := range sides {
			line = append(line, fmt.Sprintf("%s %.0f", s.name, float64(n)/took[s.name].Seconds()))
		}
		b.Logf("round %d (first %s), msgs/s: %s", r, sides[r%len(sides)].name, strings.Join(line, ", "))
		for _, s := range sides {
			for _, base := range []string{"push", "push-4p", "bare100"} {
				if s.name != base && took[base] > 0 {
					ratios[s.name+"/"+base] = append(ratios[s.name+"/"+base], took[base].Seconds()/took[s.name].Seconds())
				}
			}
		}
	}
	b.StopTimer()
	for _, s := range sides {
		b.ReportMetric(float64(b.N)/total[s.name].Seconds(), s.name+"-msgs/s")
		for base, unit := range map[string]string{"push": "ratio", "push-4p": "4p-ratio", "bare100": "bare-ratio"} {
			rs := ratios[s.name+"/"+base]
			if len(rs) == 0 {
				continue
			}
			if s.name != "producer" {
				unit = s.name + "-" + unit
			}
			b.ReportMetric(median(rs), unit)
		}
	}
}

// benchCreateQueue creates q (untimed), so that no side pays for the
// creation of its queue in its first push.
func benchCreateQueue(b *testing.B, c *queen.Client, q string) {
	if _, err := c.Queue(q).Create().Execute(context.Background()); err != nil {
		b.Fatal(err)
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

// benchProducer pushes n messages with a default Producer on workers
// goroutines, over parts partitions. With wait, each goroutine waits for
// its message's result before its next push; without, it pushes on and
// the time runs until every message has its outcome (each one checked).
func benchProducer(b *testing.B, c *queen.Client, q string, workers, n, parts int, wait bool) time.Duration {
	ctx := context.Background()
	p, err := c.Queue(q).Producer()
	if err != nil {
		b.Fatal(err)
	}
	pending := make([]*queen.PendingPush, n)
	start := time.Now()
	if _, err := spread(workers, n, func(i int) error {
		pending[i] = p.Partition(benchPart(i, parts)).Push(ctx, benchMsg(i))
		if !wait {
			return nil
		}
		_, err := pending[i].Wait(ctx)
		return benchBuffered(err)
	}); err != nil {
		b.Fatal(err)
	}
	for _, pp := range pending {
		if _, err := pp.Wait(ctx); benchBuffered(err) != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchBuffered lets through a push error that only says the broker kept
// messages to store later (0.15.1 "buffered", after a database error such
// as a deadlock between concurrent pushes): benchCheckStored then finds
// each of them stored once, or fails.
func benchBuffered(err error) error {
	if pe, ok := errors.AsType[*queen.PushError](err); ok {
		for _, i := range pe.Failed {
			if !strings.Contains(pe.Results[i].Error, "buffered") {
				return err
			}
		}
		return nil
	}
	if errors.Is(err, queen.ErrOutcomeUnknown) && strings.Contains(err.Error(), "buffered") {
		return nil
	}
	return err
}

// benchPush pushes n messages unbatched, one per call, on workers
// goroutines, over parts partitions.
func benchPush(b *testing.B, c *queen.Client, q string, workers, n, parts int) time.Duration {
	ctx := context.Background()
	qb := c.Queue(q)
	d, err := spread(workers, n, func(i int) error {
		_, err := qb.Partition(benchPart(i, parts)).Push(benchMsg(i)).Execute(ctx)
		return benchBuffered(err)
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

type benchBareItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId"`
}

// benchBare pushes n messages with bare net/http, per messages to a
// request, on workers goroutines; request r goes to partition r%parts.
func benchBare(b *testing.B, hc *http.Client, url, q string, workers, per, n, parts int) time.Duration {
	reqs := (n + per - 1) / per
	d, err := spread(workers, reqs, func(r int) error {
		items := make([]benchBareItem, 0, per)
		for i := r * per; i < min(n, (r+1)*per); i++ {
			items = append(items, benchBareItem{Queue: q, Partition: benchPart(r, parts), Payload: benchMsg(i),
				TransactionID: fmt.Sprintf("bare-%s-%d", q, i)})
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
			if x.Status != "queued" && x.Status != "buffered" {
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

// benchCheckStored checks (untimed) that q holds each of the n messages
// exactly once (by the "n" of its payload), then deletes it.
func benchCheckStored(b *testing.B, c *queen.Client, q string, n int) {
	ctx := context.Background()
	seen := make([]int, n)
	got := 0
	for {
		// Long polls; the last pop must come back empty.
		wait := 2000 // until all n came: 0.15.1 shows a push to pops a moment after its answer
		if got >= n {
			wait = 300 // then: nothing more (stored twice) comes
		}
		msgs, err := c.Queue(q).Batch(5000).Wait(true).TimeoutMillis(wait).CommitOnDelivery(true).Pop(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			var v struct{ N *int }
			if err := json.Unmarshal(m.Raw, &v); err != nil || v.N == nil || *v.N < 0 || *v.N >= n {
				b.Fatalf("%s: unexpected message %s (%v)", q, m.Raw, err)
			}
			seen[*v.N]++
		}
		got += len(msgs)
	}
	for i, k := range seen {
		if k != 1 {
			b.Fatalf("%s: message %d stored %d times (%d messages read, want %d)", q, i, k, got, n)
		}
	}
	if _, err := c.Queue(q).Delete().Execute(ctx); err != nil {
		b.Fatal(err)
	}
}
