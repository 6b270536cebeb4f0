package queen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	if !errors.As(err, &pe) || len(pe.NotStored) != 3 || len(pe.Unknown) != 0 {
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
	if !errors.As(err, &pe) || len(pe.NotStored) != 0 || len(pe.Unknown) != 2 || !errors.Is(err, queen.ErrOutcomeUnknown) {
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
	if !errors.As(err, &pe) || !errors.Is(err, context.DeadlineExceeded) || len(pe.NotStored)+len(pe.Unknown) != 5 || len(pe.Unknown) == 0 {
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
// (Its delivery timeout leaves no time to send it again:
// TestProducerSendsBufferedAgain015 has the resends.)
func TestProducerBuffered015(t *testing.T) {
	srv := queentest.Start(t, queentest.WithProfile(queentest.Profile015))
	c := newProducerClient(t, srv)
	p, err := c.Queue("buf").Producer(queen.WithBatchDelay(time.Hour), queen.WithDeliveryTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	long := p.Push(ctx, queen.Item{Payload: payload(1), TransactionID: strings.Repeat("x", 300)})
	err = p.Flush(ctx)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || len(pe.Unknown) != 1 || len(pe.NotStored) != 0 {
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

// partitionCounter is a RoundTripper that counts, per push request body,
// the items of partition "a" before the request goes out.
type partitionCounter struct {
	next http.RoundTripper
	a    atomic.Int64
}

func (pc *partitionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && strings.HasSuffix(r.URL.Path, "/push") {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		pc.a.Add(int64(strings.Count(string(body), `"partition":"a"`)))
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return pc.next.RoundTrip(r)
}

// While a callback of a partition's batch runs, the partition's next batch
// is not sent (not even in another partition's request), and the
// partition's callbacks come in push order, one batch after the other; a
// callback may push.
func TestProducerCallbacksHoldTheNextBatch(t *testing.T) {
	srv := queentest.Start(t)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	pc := &partitionCounter{next: tr}
	c := newProducerClient(t, srv, queen.WithHTTPClient(&http.Client{Transport: pc}))
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seen []string
	var p *queen.Producer
	var pushedA3 *queen.PendingPush
	record := func(s string) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}
	p, err := c.Queue("held").Producer(queen.WithMaxInflight(2), queen.WithOnResult(func(r queen.PushResult, err error) {
		if err != nil {
			t.Errorf("%s: %v", r.TransactionID, err)
		}
		if !strings.HasPrefix(r.TransactionID, "a") {
			return
		}
		record(r.TransactionID)
		if r.TransactionID == "a1" {
			close(entered)
			<-release
			pushedA3 = p.Partition("a").Push(context.Background(), queen.Item{Payload: payload(3), TransactionID: "a3"})
			record("a1 returned")
			close(returned)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := p.Partition("a")
	a1 := a.Push(ctx, queen.Item{Payload: payload(1), TransactionID: "a1"})
	<-entered
	a2 := a.Push(ctx, queen.Item{Payload: payload(2), TransactionID: "a2"})
	// b's worker takes the last free request slot: it would carry a's
	// ready batch too, were a not held by its callback.
	if err := waitErr(p.Partition("b").Push(ctx, queen.Item{Payload: payload(10), TransactionID: "b1"})); err != nil {
		t.Fatal(err)
	}
	if n := pc.a.Load(); n != 1 {
		t.Fatalf("%d messages of partition a sent while a1's callback runs, want 1 (a1 itself)", n)
	}
	select {
	case <-a2.Done():
		t.Fatal("a2 settled while a1's callback runs")
	default:
	}
	close(release)
	<-returned
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pp := range []*queen.PendingPush{a1, a2, pushedA3} {
		if err := waitErr(pp); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a1", "a1 returned", "a2", "a3"}; !slices.Equal(seen, want) {
		t.Fatalf("callbacks of partition a: %q, want %q", seen, want)
	}
	if n := pc.a.Load(); n != 3 {
		t.Fatalf("%d messages of partition a sent, want 3", n)
	}
}

// ProducerError.Err is the failure of the earliest pushed message, whatever
// the order the producer holds its partitions in.
func TestProducerErrorIsEarliest(t *testing.T) {
	// A few rounds: a pick in the producer's map order would hit the
	// earliest by chance 1 in 16 times each.
	for round := range 4 {
		earliestRound(t, round)
	}
}

func earliestRound(t *testing.T, round int) {
	t.Helper()
	srv := queentest.Start(t)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const parts = 16
	p, err := c.Queue("earliest"+strconv.Itoa(round)).Producer(queen.WithBatchDelay(time.Hour), queen.WithMaxInflight(parts+1), oneSend)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	var pps []*queen.PendingPush
	for i := range parts {
		pps = append(pps, p.Partition("p"+strconv.Itoa(i)).Push(ctx, payload(i)))
	}
	// Flush sends each partition in a request of its own (a slot each,
	// so none gathers another's), each refused with its own error value.
	srv.FailNext(queentest.RoutePush, parts, 400, 0)
	err = p.Flush(ctx)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || len(pe.NotStored) != parts {
		t.Fatalf("Flush: %v", err)
	}
	want := waitErr(pps[0])
	for _, pp := range pps[1:] {
		if waitErr(pp) == want {
			t.Fatal("two requests failed with the same error value: the test cannot tell them apart")
		}
	}
	if pe.Err != want {
		t.Fatalf("round %d: ProducerError.Err is not the first pushed message's error", round)
	}
}

// inProcess is a RoundTripper that serves each request with the broker's
// handler on the caller's goroutine, and notes when each push arrived (in
// the synctest bubble's time).
type inProcess struct {
	srv     *queentest.Server
	latency time.Duration // of each push, in bubble time
	mu      sync.Mutex
	pushes  []time.Time
}

func (rt *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/api/v1/push" {
		rt.mu.Lock()
		rt.pushes = append(rt.pushes, time.Now())
		rt.mu.Unlock()
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	if req.URL.Path == "/api/v1/push" {
		time.Sleep(rt.latency)
	}
	return rec.Result(), nil
}

func (rt *inProcess) arrivals() []time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]time.Time(nil), rt.pushes...)
}

// The delay bound on a lone message, in a synctest bubble: with a batch
// delay a lone message goes exactly when the delay has passed, not before;
// without one it goes at once; a batch that reaches its count or its bytes
// goes at once whatever the delay.
func TestProducerDelayBound(t *testing.T) {
	cases := []struct {
		name  string
		delay time.Duration
		count int
		bytes int
		push  int
		want  time.Duration
	}{
		{"lone message waits the delay", 5 * time.Millisecond, 100, 1 << 20, 1, 5 * time.Millisecond},
		{"no delay: at once", 0, 100, 1 << 20, 1, 0},
		{"count reached: at once", time.Hour, 3, 1 << 20, 3, 0},
		{"bytes reached: at once", time.Hour, 100, 1, 1, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A broker of its own, used only in the bubble (its state's
			// channels are made there) and closed there.
			srv := queentest.NewServer()
			synctest.Test(t, func(t *testing.T) {
				defer srv.Close()
				rt := &inProcess{srv: srv}
				c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				p, err := c.Queue("delay-"+string(rune('a'+i))).Producer(queen.WithBatchDelay(tc.delay),
					queen.WithBatchCount(tc.count), queen.WithBatchBytes(tc.bytes))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var last *queen.PendingPush
				for j := range tc.push {
					last = p.Push(context.Background(), payload(j))
				}
				if tc.want > 0 {
					time.Sleep(tc.want - time.Nanosecond)
					synctest.Wait()
					if n := len(rt.arrivals()); n != 0 {
						t.Fatalf("%d pushes before the delay", n)
					}
				}
				res, err := last.Wait(context.Background())
				if err != nil || res.Status != queen.PushQueued {
					t.Fatalf("%+v %v", res, err)
				}
				got := rt.arrivals()
				if len(got) != 1 || got[0].Sub(start) != tc.want {
					t.Fatalf("pushes at %v after the start, want one at %v", sinceAll(got, start), tc.want)
				}
				if err := p.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func sinceAll(ts []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}

// A message pushed while its partition's batch is on the wire waits the
// delay from the moment that batch is settled (not from its own push), so
// that the callers of the settled batch can join it.
func TestProducerDelayAfterSettle(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &inProcess{srv: srv, latency: 2 * time.Millisecond}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("settle").Producer(queen.WithBatchDelay(5 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		a := p.Push(context.Background(), payload(1)) // sent at 5 ms, settled at 7 ms
		time.Sleep(6 * time.Millisecond)
		b := p.Push(context.Background(), payload(2)) // pushed at 6 ms, during a's flight
		for _, pp := range []*queen.PendingPush{a, b} {
			if err := waitErr(pp); err != nil {
				t.Fatal(err)
			}
		}
		got := sinceAll(rt.arrivals(), start)
		if len(got) != 2 || got[0] != 5*time.Millisecond || got[1] != 12*time.Millisecond {
			t.Fatalf("pushes at %v, want at 5ms and 12ms (5 ms after the first was settled)", got)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// refusing is a RoundTripper for a test in a synctest bubble: it serves
// each request with the broker's handler on the caller's goroutine (no
// connection, which would keep the bubble's clock from moving), and during
// a refusal window, on the bubble's clock, refuses it with the error
// net/http gives for a refused connection. It is queentest's
// RefuseConnections (listener down, state kept) for a bubble, whose
// goroutines cannot share RefuseConnections' WaitGroup with the broker's.
type refusing struct {
	srv   *queentest.Server
	mu    sync.Mutex
	until time.Time // the end of the refusal window
	// gate, when set, holds every push until it is closed.
	gate chan struct{}
	// refused counts the refused requests.
	refused int
}

func (rt *refusing) refuse(d time.Duration) {
	rt.mu.Lock()
	rt.until = time.Now().Add(d)
	rt.mu.Unlock()
}

func (rt *refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	if time.Now().Before(rt.until) {
		rt.refused++
		rt.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	}
	gate := rt.gate
	rt.mu.Unlock()
	if gate != nil && req.URL.Path == "/api/v1/push" {
		<-gate
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (rt *refusing) refusals() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.refused
}

// outageClient is a client of srv for a bubble, with the default retry
// policy.
func outageClient(t *testing.T, srv *queentest.Server) (*queen.Client, *refusing) {
	t.Helper()
	rt := &refusing{srv: srv}
	c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	return c, rt
}

// pushEach pushes n messages one per Push, spread over parts partitions of
// p (message i to partition i%parts), and returns their PendingPush.
func pushEach(p *queen.Producer, n, parts int) []*queen.PendingPush {
	out := make([]*queen.PendingPush, n)
	for i := range n {
		out[i] = p.Partition("p"+strconv.Itoa(i%parts)).Push(context.Background(), payload(i))
	}
	return out
}

// A refusal window far longer than the transport's budget (4 attempts,
// about 1.5 s): the producer keeps its batches, sends them again with
// backoff, and stores every message once, in order, when the broker
// listens again.
func TestProducerRidesOutRefusal(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("outage").Producer()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rt.refuse(20 * time.Second)
		pending := pushEach(p, 400, 8)
		for i, pp := range pending {
			res, err := pp.Wait(context.Background())
			if err != nil || res.Status != queen.PushQueued {
				t.Fatalf("message %d: %+v %v", i, res, err)
			}
		}
		if took := time.Since(start); took < 20*time.Second {
			t.Fatalf("stored after %v, before the broker listened again", took)
		}
		// The transport alone (4 attempts, its waits 1.7 s at most) would
		// have failed them long before the broker came back.
		if rt.refusals() <= 4 {
			t.Fatalf("%d refused sends", rt.refusals())
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		counts, order := stored(t, c, "outage")
		if len(counts) != 400 {
			t.Fatalf("%d stored", len(counts))
		}
		for part, ns := range order {
			for i := 1; i < len(ns); i++ {
				if ns[i] <= ns[i-1] {
					t.Fatalf("partition %s out of order: %v", part, ns)
				}
			}
		}
		for n, k := range counts {
			if k != 1 {
				t.Fatalf("message %d stored %d times", n, k)
			}
		}
	})
}

// A delivery timeout shorter than the outage: the batches on the wire fail
// with ErrDeliveryTimeout and ErrNotSent (every send refused: nothing
// stored), the messages buffered behind them with a *PartitionFailedError
// that reaches that cause; once the broker is back every partition takes
// pushes again.
func TestProducerDeliveryTimeoutShorterThanOutage(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("short").Producer(queen.WithDeliveryTimeout(5*time.Second), queen.WithBatchCount(10))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rt.refuse(30 * time.Second)
		pending := pushEach(p, 400, 8)
		var timedOut, behind int
		for i, pp := range pending {
			_, err := pp.Wait(context.Background())
			var pf *queen.PartitionFailedError
			switch {
			case err == nil:
				t.Fatalf("message %d stored during the outage", i)
			case errors.Is(err, queen.ErrOutcomeUnknown) && !errors.As(err, &pf):
				t.Fatalf("message %d: %v; nothing was sent, so the outcome is known", i, err)
			case !errors.Is(err, queen.ErrNotSent):
				t.Fatalf("message %d: %v; want ErrNotSent", i, err)
			case errors.As(err, &pf):
				behind++
				if !errors.Is(pf.Cause, queen.ErrDeliveryTimeout) || pf.Queue != "short" {
					t.Fatalf("message %d: %+v", i, pf)
				}
			case errors.Is(err, queen.ErrDeliveryTimeout):
				timedOut++
			default:
				t.Fatalf("message %d: %v", i, err)
			}
		}
		// No send starts after the delivery timeout, counted from each
		// message's push (on the bubble's clock: the sends take no time).
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the batches failed after %v, past their delivery timeout", took)
		}
		if timedOut == 0 || behind == 0 || timedOut+behind != 400 {
			t.Fatalf("%d timed out, %d behind them", timedOut, behind)
		}
		err = p.Flush(context.Background())
		if err != nil {
			t.Fatalf("Flush after every message settled: %v", err)
		}
		time.Sleep(30 * time.Second) // the broker listens again
		for part := range 8 {
			pp := p.Partition("p"+strconv.Itoa(part)).Push(context.Background(), payload(1000+part))
			if _, err := pp.Wait(context.Background()); err != nil {
				t.Fatalf("partition p%d after the outage: %v", part, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "short"); len(counts) != 8 {
			t.Fatalf("stored %v, want only the 8 pushes after the outage", counts)
		}
	})
}

// 503 and 429 answers past the transport's budget: sent again, stored once.
func TestProducerRetriesRefusalsPastTransportBudget(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, _ := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("busy").Producer(queen.WithMaxInflight(1))
		if err != nil {
			t.Fatal(err)
		}
		// 8 refusals in a row, twice the transport's attempts: waits of
		// 0.2 to 3.2 s, then 6.4 s and 10 s (the cap) past the Retry-After.
		srv.FailNext(queentest.RoutePush, 5, 503, 0)
		srv.FailNext(queentest.RoutePush, 3, 429, 2*time.Second)
		for i, pp := range pushEach(p, 20, 1) {
			if _, err := pp.Wait(context.Background()); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "busy"); len(counts) != 20 {
			t.Fatalf("stored %v", counts)
		}
	})
}

// Close whose ctx ends during an outage: the batches waiting to be sent
// again fail at once (ErrClosed, and ErrNotSent as nothing was sent), and
// no goroutine is left.
func TestProducerCloseDuringOutage(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("closing").Producer()
		if err != nil {
			t.Fatal(err)
		}
		rt.refuse(time.Hour)
		pending := pushEach(p, 50, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = p.Close(ctx)
		var pe *queen.ProducerError
		if !errors.As(err, &pe) || len(pe.NotStored) != 50 || len(pe.Unknown) != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v", err)
		}
		for _, pp := range pending {
			if err := waitErr(pp); !errors.Is(err, queen.ErrClosed) || !errors.Is(err, queen.ErrNotSent) {
				t.Fatalf("after Close: %v", err)
			}
		}
		synctest.Wait() // every goroutine of the bubble has ended or waits
	})
}

// The same over the network, with queentest's own RefuseConnections (its
// listener down for a while, its state kept): a refusal window longer than
// the transport's budget of the fast retry policy (8 attempts, 5 ms apart
// at most), and the default delivery timeout. Every message is stored
// once. (Timing is the bubble tests'; this one shows the real dial path.)
func TestProducerRidesOutRefusedConnections(t *testing.T) {
	defer noProducerGoroutine(t)
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	p, err := c.Queue("refused").Producer()
	if err != nil {
		t.Fatal(err)
	}
	// A first push opens a connection: the broker closes it as the window
	// begins, and a request written on it before the client saw that may
	// have reached the broker: it is then sent again, deduplicated.
	if err := waitErr(p.Push(context.Background(), payload(-1))); err != nil {
		t.Fatal(err)
	}
	srv.RefuseConnections(500 * time.Millisecond)
	for i, pp := range pushEach(p, 200, 8) {
		if err := waitErr(pp); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts, _ := stored(t, c, "refused")
	if len(counts) != 201 {
		t.Fatalf("%d stored", len(counts))
	}
	for n, k := range counts {
		if k != 1 {
			t.Fatalf("message %d stored %d times", n, k)
		}
	}
}

// By default a batch that fails for good (here refused with a 400) fails
// the messages buffered behind it in its partition, with a
// *PartitionFailedError that matches ErrNotSent and reaches the batch's
// *BrokerError; the partition is not paused: a later push is stored.
func TestProducerFailureFailsOnlyWhatIsBehind(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		rt.gate = make(chan struct{})
		p, err := c.Queue("behind").Producer(queen.WithBatchCount(5), queen.WithBatchDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		srv.FailNext(queentest.RoutePush, 1, http.StatusBadRequest, 0)
		pending := pushEach(p, 12, 1) // 5 go at once (held at the gate), 7 wait behind them
		synctest.Wait()
		close(rt.gate)
		for i, pp := range pending {
			err := waitErr(pp)
			var be *queen.BrokerError
			var pf *queen.PartitionFailedError
			switch {
			case i < 5:
				if !errors.As(err, &be) || be.Status != http.StatusBadRequest || errors.As(err, &pf) {
					t.Fatalf("message %d of the batch: %v", i, err)
				}
			default:
				if !errors.As(err, &pf) || !errors.Is(err, queen.ErrNotSent) || !errors.As(err, &be) ||
					errors.Is(err, queen.ErrPartitionPaused) || pf.Partition != "p0" {
					t.Fatalf("message %d behind the batch: %v", i, err)
				}
			}
		}
		after := p.Partition("p0").Push(context.Background(), payload(99))
		if err := p.Flush(context.Background()); err != nil || waitErr(after) != nil {
			t.Fatalf("push after the failure: %v %v", err, waitErr(after))
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "behind"); len(counts) != 1 || counts[99] != 1 {
			t.Fatalf("stored %v", counts)
		}
	})
}

// buffering is a RoundTripper for a bubble that answers the first n pushes
// as a 0.15.1 broker whose database is failing does: every item "buffered"
// (kept in the broker's file, stored later), nothing stored now. Later
// pushes reach srv.
type buffering struct {
	srv    *queentest.Server
	mu     sync.Mutex
	n      int // pushes still to answer "buffered"
	pushes int
}

func (rt *buffering) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	isPush := req.URL.Path == "/api/v1/push"
	if isPush {
		rt.pushes++
	}
	buffer := isPush && rt.n > 0
	if buffer {
		rt.n--
	}
	rt.mu.Unlock()
	if buffer {
		var body struct{ Items []json.RawMessage }
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			return nil, err
		}
		answer := make([]map[string]string, len(body.Items))
		for i := range answer {
			answer[i] = map[string]string{"status": "buffered", "queue": "buf"}
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rec).Encode(answer)
		return rec.Result(), nil
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// A 0.15.1 "buffered" answer may pass: the producer sends the batch again
// with its transaction ids, and its partition waits, so every message is
// stored once and in push order (the broker's later replay of its file
// finds them stored).
func TestProducerSendsBufferedAgain015(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &buffering{srv: srv, n: 3}
		var logs logSink
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
			queen.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("buf").Producer(queen.WithBatchCount(5))
		if err != nil {
			t.Fatal(err)
		}
		pending := make([]*queen.PendingPush, 20)
		for i := range pending {
			pending[i] = p.Partition("p").Push(context.Background(), payload(i))
		}
		for i, pp := range pending {
			res, err := pp.Wait(context.Background())
			if err != nil || !res.Stored() {
				t.Fatalf("message %d: %+v %v", i, res, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rt.pushes < 4+3 {
			t.Fatalf("%d push requests; the 3 buffered answers were not sent again", rt.pushes)
		}
		// The resends are in the log: the failure, then the success.
		if l := logs.String(); !strings.Contains(l, "sending it again until the delivery timeout") ||
			!strings.Contains(l, "buffered by the broker") || !strings.Contains(l, "push sent again succeeds") {
			t.Fatalf("log:\n%s", l)
		}
		counts, order := stored(t, c, "buf")
		if len(counts) != 20 {
			t.Fatalf("%d stored", len(counts))
		}
		for n, k := range counts {
			if k != 1 {
				t.Fatalf("message %d stored %d times", n, k)
			}
		}
		for i, n := range order["p"] {
			if n != i {
				t.Fatalf("out of push order: %v", order["p"])
			}
		}
	})
}

// A message the broker keeps answering "buffered" fails, at its delivery
// timeout, with an error matching ErrOutcomeUnknown and *PushError (the
// broker may still store it from its file); a later push goes out.
func TestProducerBufferedUntilTimeout015(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &buffering{srv: srv, n: 1 << 30}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("buf").Producer(queen.WithDeliveryTimeout(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := p.Push(context.Background(), payload(1)).Wait(context.Background())
		var push *queen.PushError
		if !errors.Is(err, queen.ErrOutcomeUnknown) || !errors.Is(err, queen.ErrDeliveryTimeout) || !errors.As(err, &push) || res.Stored() {
			t.Fatalf("kept buffered: %+v %v", res, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("failed after %v, past its delivery timeout (10 s)", took)
		}
		if rt.pushes < 3 {
			t.Fatalf("%d push requests; the buffered batch was not sent again", rt.pushes)
		}
		rt.mu.Lock()
		rt.n = 0
		rt.mu.Unlock()
		if _, err := p.Push(context.Background(), payload(2)).Wait(context.Background()); err != nil {
			t.Fatalf("after a buffered failure: %v", err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A broker that answers every send "not applied" (503) until the delivery
// timeout: the message fails with ErrDeliveryTimeout and the broker's
// *BrokerError, neither ErrNotSent nor ErrOutcomeUnknown, counted not
// stored.
func TestProducerDeliveryTimeoutAfterRefusals(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, _ := outageClient(t, srv)
		defer c.Close(context.Background())
		srv.FailNext(queentest.RoutePush, 1000, http.StatusServiceUnavailable, 0)
		p, err := c.Queue("busy").Producer(queen.WithDeliveryTimeout(3 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Push(context.Background(), payload(1)).Wait(context.Background())
		be, ok := errors.AsType[*queen.BrokerError](err)
		if !errors.Is(err, queen.ErrDeliveryTimeout) || !ok || be.Status != http.StatusServiceUnavailable ||
			errors.Is(err, queen.ErrNotSent) || errors.Is(err, queen.ErrOutcomeUnknown) {
			t.Fatalf("Push: %v", err)
		}
		var pe *queen.ProducerError
		if err := p.Close(context.Background()); err != nil && (!errors.As(err, &pe) || len(pe.Unknown) != 0) {
			t.Fatalf("Close: %v", err)
		}
	})
}
