package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// fastRetry makes retried pushes quick in tests.
var fastRetry = queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 8, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})

func newProducerClient(t *testing.T, srv *queentest.Server, opts ...queen.Option) *queen.Client {
	t.Helper()
	c, err := queen.New(srv.URL, append([]queen.Option{fastRetry}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// stored pops everything in queue (queue mode, committed on delivery) and
// counts each payload's "n" by partition order: it returns how many times
// each n was stored and, per partition, the ns in stored order.
func stored(t *testing.T, c *queen.Client, queue string) (map[int]int, map[string][]int) {
	t.Helper()
	counts := map[int]int{}
	order := map[string][]int{}
	for {
		msgs, err := c.Queue(queue).Batch(1000).Partitions(64).Wait(false).CommitOnDelivery(true).Pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return counts, order
		}
		for _, m := range msgs {
			var p struct{ N int }
			if err := json.Unmarshal(m.Raw, &p); err != nil {
				t.Fatal(err)
			}
			counts[p.N]++
			order[m.Partition] = append(order[m.Partition], p.N)
		}
	}
}

func payload(n int) json.RawMessage { return json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`) }

// Many goroutines pushing one message each: every push gets its stored
// result, batches are few, and per partition the broker keeps push order.
func TestProducerBatchesAndKeepsOrder(t *testing.T) {
	defer noProducerGoroutine(t)
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	p, err := c.Queue("orders").Producer(queen.WithBatchCount(50))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			part := p.Partition("p" + strconv.Itoa(w%2))
			pending := make([]*queen.PendingPush, 0, each)
			for i := range each {
				pending = append(pending, part.Push(context.Background(), payload(w*each+i)))
			}
			for _, pp := range pending {
				res, err := pp.Wait(context.Background())
				if err == nil && (res.Status != queen.PushQueued || res.MessageID == "" || res.TransactionID == "") {
					err = fmt.Errorf("result %+v", res)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := srv.Requests(queentest.RoutePush); n > workers*each/5 {
		t.Fatalf("%d push requests for %d messages: not batched", n, workers*each)
	}
	counts, order := stored(t, c, "orders")
	if len(counts) != workers*each {
		t.Fatalf("%d distinct messages stored, want %d", len(counts), workers*each)
	}
	for n, k := range counts {
		if k != 1 {
			t.Fatalf("message %d stored %d times", n, k)
		}
	}
	// Each worker's messages go to one partition in push order.
	for part, ns := range order {
		last := map[int]int{}
		for _, n := range ns {
			w := n / each
			if prev, ok := last[w]; ok && n < prev {
				t.Fatalf("partition %s: message %d after %d", part, n, prev)
			}
			last[w] = n
		}
	}
	if res := p.Push(context.Background(), payload(1)); !errors.Is(waitErr(res), queen.ErrClosed) {
		t.Fatalf("push after Close: %v", waitErr(res))
	}
}

func waitErr(pp *queen.PendingPush) error {
	_, err := pp.Wait(context.Background())
	return err
}

// Bad input is refused by Push itself, before anything is buffered, and
// the callback hears of it too.
func TestProducerValidatesEachPush(t *testing.T) {
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	var calls atomic.Int32
	p, err := c.Producer(queen.WithOnResult(func(queen.PushResult, error) { calls.Add(1) }),
		queen.WithBufferLimit(100, 1000))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	cases := []struct {
		name string
		pp   *queen.PendingPush
		want error
	}{
		{"no queue", p.Push(ctx, payload(1)), queen.ErrEmptyQueue},
		{"bad partition", p.Queue("q").Partition("a\x00b").Push(ctx, payload(1)), queen.ErrInvalidName},
		{"bad JSON", p.Queue("q").Push(ctx, json.RawMessage(`{`)), queen.ErrInvalidPayload},
		{"unencodable", p.Queue("q").Push(ctx, func() {}), queen.ErrInvalidPayload},
		{"bad trace id", p.Queue("q").Push(ctx, queen.Item{Payload: 1, TraceID: "x"}), queen.ErrInvalidTraceID},
		{"too large", p.Queue("q").Push(ctx, json.RawMessage(`"`+strings.Repeat("a", 1000)+`"`)), queen.ErrMessageTooLarge},
	}
	for _, tc := range cases {
		select {
		case <-tc.pp.Done():
		default:
			t.Fatalf("%s: not refused at once", tc.name)
		}
		if err := waitErr(tc.pp); !errors.Is(err, tc.want) || !errors.Is(err, queen.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if int(calls.Load()) != len(cases) {
		t.Fatalf("callback called %d times for %d refusals", calls.Load(), len(cases))
	}
	if n := srv.Requests(queentest.RoutePush); n != 0 {
		t.Fatalf("%d push requests for refused messages", n)
	}
	if _, err := c.Producer(queen.WithBatchCount(0)); !errors.Is(err, queen.ErrInvalidOption) {
		t.Fatalf("WithBatchCount(0): %v", err)
	}
	if _, err := c.Queue("").Producer(); !errors.Is(err, queen.ErrEmptyQueue) {
		t.Fatalf("Queue(\"\").Producer: %v", err)
	}
}

// Dropped answers, 503 and 429 on the way: the client resends the same
// batches, the broker deduplicates them, and every message is stored
// exactly once with a stored result.
func TestProducerFaultsNoLossNoDouble(t *testing.T) {
	for _, prof := range queentest.Profiles() {
		t.Run(string(prof), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(prof))
			c := newProducerClient(t, srv)
			p, err := c.Queue("faults").Producer(queen.WithBatchCount(20))
			if err != nil {
				t.Fatal(err)
			}
			srv.DropNextResponses(queentest.RoutePush, 2)
			srv.FailNext(queentest.RoutePush, 1, 503, 0)
			srv.FailNext(queentest.RoutePush, 1, 429, time.Millisecond)
			const n = 400
			var wg sync.WaitGroup
			var dup, queued, failed atomic.Int32
			for w := range 8 {
				wg.Go(func() {
					for i := range n / 8 {
						res, err := p.Partition("p"+strconv.Itoa(w%4)).Push(context.Background(), payload(w*1000+i)).Wait(context.Background())
						switch {
						case err != nil:
							failed.Add(1)
							t.Error(err)
						case res.Status == queen.PushDuplicate:
							dup.Add(1)
						case res.Status == queen.PushQueued:
							queued.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			counts, _ := stored(t, c, "faults")
			if len(counts) != n {
				t.Fatalf("%d messages stored, want %d (lost %d)", len(counts), n, n-len(counts))
			}
			for m, k := range counts {
				if k != 1 {
					t.Fatalf("message %d stored %d times", m, k)
				}
			}
			if dup.Load() == 0 {
				t.Fatal("no duplicate answer although answers were dropped after the broker stored the batch")
			}
			if dup.Load()+queued.Load() != n || failed.Load() != 0 {
				t.Fatalf("queued %d, duplicate %d, failed %d", queued.Load(), dup.Load(), failed.Load())
			}
		})
	}
}

// oneSend is a delivery timeout that lets a batch be sent once: the wait
// before a second send never fits in it.
var oneSend = queen.WithDeliveryTimeout(time.Nanosecond)

// Under WithPauseOnFailure a batch that fails for good pauses its
// partition: the messages waiting there fail, so do later pushes, other
// partitions go on; after Resume a push again of the failed messages (same
// transaction ids) stores each once.
func TestProducerPauseAndResume(t *testing.T) {
	srv := queentest.Start(t)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := c.Queue("pause").Producer(queen.WithBatchCount(5), queen.WithMaxInflight(1), oneSend, queen.WithPauseOnFailure())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The one send of the first batch gets its answer dropped after the
	// broker stored it: the outcome is unknown.
	srv.DropNextResponses(queentest.RoutePush, 1)
	a := p.Partition("a")
	var first []*queen.PendingPush
	items := make([]queen.Item, 12)
	for i := range items {
		items[i] = queen.Item{Payload: payload(i), TransactionID: "tx-" + strconv.Itoa(i)}
		first = append(first, a.Push(ctx, items[i]))
	}
	unknown, paused := 0, 0
	for _, pp := range first {
		_, err := pp.Wait(ctx)
		var pe *queen.PartitionPausedError
		switch {
		case errors.Is(err, queen.ErrOutcomeUnknown):
			unknown++
		case errors.As(err, &pe):
			paused++
			if pe.Queue != "pause" || pe.Partition != "a" || !errors.Is(pe.Cause, queen.ErrOutcomeUnknown) {
				t.Fatalf("paused error %+v", pe)
			}
			if errors.Is(err, queen.ErrOutcomeUnknown) || !errors.Is(err, queen.ErrNotSent) {
				t.Fatal("a message never sent does not say so")
			}
		default:
			t.Fatalf("unexpected %v", err)
		}
	}
	// The first batch holds what was buffered when the partition's worker
	// took it (1 to 5 messages, as the pushes race the worker): all of it
	// unknown, every later message paused (none is sent after it).
	if unknown < 1 || unknown > 5 || unknown+paused != len(items) {
		t.Fatalf("unknown %d, paused %d: want the first batch (1 to 5) unknown and the rest paused", unknown, paused)
	}
	if err := waitErr(a.Push(ctx, payload(99))); !errors.Is(err, queen.ErrPartitionPaused) {
		t.Fatalf("push to a paused partition: %v", err)
	}
	if _, err := p.Partition("b").Push(ctx, payload(100)).Wait(ctx); err != nil {
		t.Fatalf("other partition: %v", err)
	}
	a.Resume()
	dups := 0
	for i, pp := range first {
		if err := waitErr(pp); err == nil {
			continue
		}
		res, err := a.Push(ctx, items[i]).Wait(ctx)
		if err != nil {
			t.Fatalf("push again after Resume: %v", err)
		}
		if res.Status == queen.PushDuplicate {
			dups++
		}
	}
	if dups != unknown {
		t.Fatalf("%d duplicates on the push again, want the %d of the lost batch", dups, unknown)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	counts, order := stored(t, c, "pause")
	if len(counts) != 13 {
		t.Fatalf("stored %v", counts)
	}
	for m, k := range counts {
		if k != 1 {
			t.Fatalf("message %d stored %d times", m, k)
		}
	}
	for i, n := range order["a"] {
		if n != i {
			t.Fatalf("partition a in order %v", order["a"])
		}
	}
}

// A batch refused for good (503s past the retries) fails its messages as
// not stored, and Flush counts them apart from the unknown ones.
func TestProducerFlushCounts(t *testing.T) {
	srv := queentest.Start(t)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := c.Producer(queen.WithBatchDelay(time.Hour), queen.WithMaxInflight(1), oneSend)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	for i := range 3 {
		p.Queue("refused").Push(ctx, payload(i))
	}
	srv.FailNext(queentest.RoutePush, 1, 503, 0)
	srv.DropNextResponses(queentest.RoutePush, 0)
	err = p.Flush(ctx)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || pe.NotStored != 3 || pe.Unknown != 0 {
		t.Fatalf("Flush: %v", err)
	}
	var be *queen.BrokerError
	if !errors.As(err, &be) || be.Status != 503 || !errors.Is(err, queen.ErrDeliveryTimeout) {
		t.Fatalf("Flush's cause: %v", err)
	}
	p2 := p.Queue("lost")
	for i := range 2 {
		p2.Push(ctx, payload(i))
	}
	srv.DropNextResponses(queentest.RoutePush, 1)
	err = p.Flush(ctx)
	if !errors.As(err, &pe) || pe.NotStored != 0 || pe.Unknown != 2 || !errors.Is(err, queen.ErrOutcomeUnknown) {
		t.Fatalf("Flush: %v", err)
	}
	fine := p.Queue("fine").Push(ctx, payload(1))
	if err := p.Flush(ctx); err != nil || waitErr(fine) != nil {
		t.Fatalf("Flush of nothing: %v", err)
	}
}

// At the buffer's limit a push waits for room, or for its ctx; with
// WithFailWhenFull it fails at once.
func TestProducerBufferLimit(t *testing.T) {
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	srv.AddLatency(queentest.RoutePush, 50*time.Millisecond)
	for _, failFast := range []bool{false, true} {
		opts := []queen.ProducerOption{queen.WithBufferLimit(2, 1<<20)}
		if failFast {
			opts = append(opts, queen.WithFailWhenFull())
		}
		p, err := c.Queue("full").Producer(opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		a, b := p.Push(ctx, payload(1)), p.Push(ctx, payload(2))
		short, cancel := context.WithCancel(ctx)
		cancel()
		third := p.Push(short, payload(3))
		want := context.Canceled
		if failFast {
			want = queen.ErrBufferFull
		}
		if err := waitErr(third); !errors.Is(err, want) {
			t.Fatalf("failFast %v: push at the limit: %v", failFast, err)
		}
		fourth := p.Push(ctx, payload(4)) // waits for a or b (or fails fast)
		if failFast {
			if !errors.Is(waitErr(fourth), queen.ErrBufferFull) {
				t.Fatal("fail fast did not fail")
			}
		} else {
			for _, pp := range []*queen.PendingPush{a, b, fourth} {
				if err := waitErr(pp); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Close with a ctx that ends while a batch is on the wire: the batch's
// outcome is unknown, the buffered messages fail with ErrClosed, and no
// goroutine is left.
func TestProducerCloseCut(t *testing.T) {
	defer noProducerGoroutine(t)
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	srv.AddLatency(queentest.RoutePush, 300*time.Millisecond)
	p, err := c.Queue("cut").Producer(queen.WithBatchCount(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var pending []*queen.PendingPush
	for i := range 5 {
		pending = append(pending, p.Push(ctx, payload(i)))
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = p.Close(short)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || !errors.Is(err, context.DeadlineExceeded) || pe.NotStored+pe.Unknown != 5 || pe.Unknown == 0 {
		t.Fatalf("Close: %v", err)
	}
	for _, pp := range pending {
		select {
		case <-pp.Done():
		default:
			t.Fatal("a message without an outcome after Close")
		}
		if err := waitErr(pp); !errors.Is(err, queen.ErrOutcomeUnknown) && !errors.Is(err, queen.ErrClosed) {
			t.Fatalf("after a cut Close: %v", err)
		}
	}
}

// PushHook sees one event per batch.
type countHook struct {
	mu     sync.Mutex
	events []queen.PushEvent
}

func (h *countHook) OnPush(_ context.Context, e queen.PushEvent) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func TestProducerPushHookPerBatch(t *testing.T) {
	srv := queentest.Start(t)
	h := &countHook{}
	c := newProducerClient(t, srv, queen.WithHooks(h))
	p, err := c.Queue("hooked").Producer(queen.WithBatchDelay(time.Hour), queen.WithBatchCount(10))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last *queen.PendingPush
	for i := range 25 {
		last = p.Push(ctx, payload(i))
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(last); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 3 || h.events[0].Count != 10 || h.events[1].Count != 10 || h.events[2].Count != 5 {
		t.Fatalf("events %+v", h.events)
	}
	for _, e := range h.events {
		if e.Queue != "hooked" || len(e.Results) != e.Count || e.Err != nil {
			t.Fatalf("event %+v", e)
		}
	}
}

// noProducerGoroutine fails t if a goroutine of a producer is running (the
// package's TestMain checks for every other leftover goroutine).
// A goroutine that has called its WaitGroup's Done (which Close waits for)
// may still be returning: like goleak, it looks again (yielding, no sleep)
// before it calls one a leak (a hang guard, not a bound on how soon).
func noProducerGoroutine(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for range 10000 {
		buf = buf[:runtime.Stack(buf[:cap(buf)], true)]
		if !strings.Contains(string(buf), "queen.(*producer)") {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("a producer goroutine outlived Close:\n%s", buf)
}

// A 0.15.1 "buffered" answer (here: a transaction id longer than the
// broker's column, which it files in its failover buffer) is never a
// success: the message fails with an error matching ErrOutcomeUnknown and
// *PushError, counted as unknown; a later push to its partition goes out.
func TestProducerBuffered015(t *testing.T) {
	srv := queentest.Start(t, queentest.WithProfile(queentest.Profile015))
	c := newProducerClient(t, srv)
	p, err := c.Queue("buf").Producer(queen.WithBatchDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	long := p.Push(ctx, queen.Item{Payload: payload(1), TransactionID: strings.Repeat("x", 300)})
	err = p.Flush(ctx)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || pe.Unknown != 1 || pe.NotStored != 0 {
		t.Fatalf("Flush: %v", err)
	}
	res, err := long.Wait(ctx)
	var push *queen.PushError
	if !errors.Is(err, queen.ErrOutcomeUnknown) || !errors.As(err, &push) || res.Status != queen.PushFailed || res.Stored() {
		t.Fatalf("buffered answer: %+v %v", res, err)
	}
	next := p.Push(ctx, payload(2))
	if err := p.Flush(ctx); err != nil || waitErr(next) != nil {
		t.Fatalf("after a buffered answer: %v %v", err, waitErr(next))
	}
}

// Partitions whose messages come one at a time (each caller waits for its
// answer) still share push requests: one request carries the ready batches
// of several partitions, each partition with at most one on the wire and in
// push order. In a synctest bubble, each push taking 1 ms of its time: a
// message pushed at a tick goes at that tick or in the request that takes
// the last free slot at the next one, so each of the 30 rounds takes at
// most 2 ms and at most 2 requests start per tick: at most 122 requests
// (without sharing: 480), checked against a third of the messages.
func TestProducerPartitionsShareRequests(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		h := &countHook{}
		rt := &inProcess{srv: srv, latency: time.Millisecond}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}), queen.WithHooks(h))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("users").Producer(queen.WithMaxInflight(2))
		if err != nil {
			t.Fatal(err)
		}
		const users, each = 16, 30
		var wg sync.WaitGroup
		for u := range users {
			wg.Go(func() {
				part := p.Partition("u" + strconv.Itoa(u))
				for i := range each {
					if _, err := part.Push(context.Background(), payload(u*each+i)).Wait(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(rt.arrivals()); n > users*each/3 {
			t.Fatalf("%d push requests for %d messages of %d one-at-a-time partitions", n, users*each, users)
		}
		counts, order := stored(t, c, "users")
		if len(counts) != users*each {
			t.Fatalf("%d stored", len(counts))
		}
		for part, ns := range order {
			for i := 1; i < len(ns); i++ {
				if ns[i] != ns[i-1]+1 {
					t.Fatalf("partition %s out of order: %v", part, ns)
				}
			}
		}
		// One hook event per partition batch, each of one partition.
		h.mu.Lock()
		defer h.mu.Unlock()
		total := 0
		for _, e := range h.events {
			if e.Count != 1 || len(e.Results) != 1 || e.Results[0].Index != 0 || e.Err != nil {
				t.Fatalf("event %+v: a one-at-a-time partition's batch is one message", e)
			}
			total += e.Count
		}
		if total != users*each {
			t.Fatalf("hook saw %d messages", total)
		}
	})
}
