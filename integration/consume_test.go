package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// msgNum reads the "n" of a numbered payload without a *testing.T, for
// handlers (they run on the loop's goroutines).
func msgNum(m *queen.Message) int {
	v, _ := m.Data["n"].(float64)
	return int(v)
}

// TestConsumeOrderingUnderConcurrency: with Concurrency(4) four handlers run
// at once on four partitions, and within a partition the messages are
// handled one at a time, in order.
func TestConsumeOrderingUnderConcurrency(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("ordered")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const parts, per = 4, 25
	for p := range parts {
		push(t, c, q, fmt.Sprintf("p%d", p), numbered(p*per, per, nil)...)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var (
		mu         sync.Mutex
		running    = map[string]bool{}
		last       = map[string]int{}
		done       []int
		now, most  int
		allStarted = make(chan struct{})
		startOnce  sync.Once
	)
	handler := func(ctx context.Context, m *queen.Message) error {
		n := msgNum(m)
		mu.Lock()
		if running[m.Partition] {
			t.Errorf("partition %s: message %d started while another of the partition ran", m.Partition, n)
		}
		if prev, ok := last[m.Partition]; ok && n <= prev {
			t.Errorf("partition %s: message %d handled after %d", m.Partition, n, prev)
		}
		running[m.Partition], last[m.Partition] = true, n
		now++
		most = max(most, now)
		if now == parts {
			startOnce.Do(func() { close(allStarted) })
		}
		mu.Unlock()

		if n%per == 0 {
			// The head of each partition waits (a while) for the other
			// three: four slots on four partitions run at once.
			// 20 s guards against a hang, not a measurement: a loop that
			// runs four at once starts them within milliseconds.
			select {
			case <-allStarted:
			case <-time.After(20 * time.Second):
			}
		}
		time.Sleep(time.Millisecond)

		mu.Lock()
		defer mu.Unlock()
		running[m.Partition] = false
		now--
		done = append(done, n)
		if len(done) == parts*per {
			cancel()
		}
		return nil
	}
	err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).
		Concurrency(4).Partitions(1).Batch(10).Each().
		Consume(ctx, handler).Execute(ctx)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	checkExactlyOnce(t, "Concurrency(4)", done, 0, parts*per)
	if most != parts {
		t.Errorf("at most %d handlers ran at once; Concurrency(4) on %d partitions should run %d", most, parts, parts)
	}
}

// TestConsumeRenewLeaseKeepsSlowHandler: RenewLease keeps the lease of a
// handler that runs well past leaseTime: nobody else gets its message, its
// ctx is not cancelled, and its ack goes through.
func TestConsumeRenewLeaseKeepsSlowHandler(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("slow")
	// Margins, not measurements: renewals every second extend the lease to
	// 3 s from then (see RenewLease), so a renewal may come up to 2 s late,
	// and the first up to 2 s after the pop (a 3 s lease), before another
	// worker could take the message.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(3 * time.Second), RetryLimit: queen.Ptr(3)})
	push(t, c, q, "", numbered(0, 1, nil)...)

	// Another worker keeps trying to take the message while the slow
	// handler has it.
	other := newClient(t)
	spyCtx, stopSpy := context.WithCancel(testCtx(t))
	defer stopSpy()
	var stolen atomic.Int32
	var spy sync.WaitGroup
	handling := make(chan struct{})
	spy.Go(func() {
		select {
		case <-handling:
		case <-spyCtx.Done():
			return
		}
		for spyCtx.Err() == nil {
			msgs, err := other.Queue(q).Batch(1).Wait(false).Pop(spyCtx)
			if err == nil && len(msgs) > 0 {
				stolen.Add(int32(len(msgs)))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	var calls atomic.Int32
	var lost atomic.Bool
	const work = 7500 * time.Millisecond // two and a half lease times
	err := c.Queue(q).RenewLease(true, 1000).Batch(1).Each().Limit(1).
		Consume(testCtx(t), func(ctx context.Context, m *queen.Message) error {
			if calls.Add(1) == 1 {
				close(handling)
			}
			select {
			case <-ctx.Done():
				lost.Store(true)
				return ctx.Err()
			case <-time.After(work):
				return nil
			}
		}).Execute(testCtx(t))
	stopSpy()
	spy.Wait()
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want once", n)
	}
	if lost.Load() {
		t.Error("the handler's ctx was cancelled: the lease was lost despite RenewLease")
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("another worker got the message %d times while the slow handler held it", n)
	}
	if got := popNow(t, other.Queue(q).Batch(1)); len(got) != 0 {
		t.Errorf("after the slow handler returned, the message is still there: %v", nums(t, got))
	}
	if be.srv != nil {
		if n := be.srv.LeasedCount(q, ""); n != 0 {
			t.Errorf("queentest: %d messages leased after Execute returned", n)
		}
	}
}

// TestStoppedWorkerLosesNothing: a worker stopped mid-stream (its ctx
// cancelled while a handler runs) finishes that handler, acks it, and
// gives back what it had popped but not started: nothing stays leased and
// the next worker gets all the rest at once, not after a lease time.
func TestStoppedWorkerLosesNothing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("stop")
	// A long lease: a message left leased would be stuck for 30 s.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const total = 20
	push(t, c, q, "a", numbered(0, total/2, nil)...)
	push(t, c, q, "b", numbered(total/2, total/2, nil)...)

	worker := newClient(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var (
		mu      sync.Mutex
		handled []int
	)
	third := make(chan struct{})
	go func() {
		<-third
		cancel() // the deploy, while the third handler runs
	}()
	err := worker.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Partitions(2).Each().
		Consume(ctx, func(hctx context.Context, m *queen.Message) error {
			mu.Lock()
			handled = append(handled, msgNum(m))
			k := len(handled)
			mu.Unlock()
			if k == 3 {
				close(third)
				<-ctx.Done()                      // stopped while running...
				time.Sleep(50 * time.Millisecond) // ...and finishing its work
			}
			return nil
		}).Execute(ctx)
	if err != nil {
		t.Fatalf("Execute after a cancel = %v, want nil", err)
	}
	mu.Lock()
	done := append([]int(nil), handled...)
	mu.Unlock()
	if len(done) < 3 {
		t.Fatalf("the worker handled %v before the stop", done)
	}
	if be.srv != nil {
		if n := be.srv.LeasedCount(q, "g"); n != 0 {
			t.Errorf("queentest: %d messages still leased after the stopped worker returned", n)
		}
	}
	// The next worker, without waiting: everything not done, at once.
	next := newClient(t)
	start := time.Now()
	rest := drain(t, next, next.Queue(q).Group("g").Batch(100), "g", 0)
	t.Logf("stopped worker handled %d; the next got %d in %v", len(done), len(rest), time.Since(start).Round(time.Millisecond))
	checkExactlyOnce(t, "stopped worker + next worker", append(done, nums(t, rest)...), 0, total)
}

// TestDroppedResponsesLoseNothing: the broker applies a push, a pop and acks
// but the answers never arrive (queentest drops them). The client retries;
// at the end every message was processed at least once and nothing is left
// behind.
func TestDroppedResponsesLoseNothing(t *testing.T) {
	t.Parallel()
	srv := faultBroker(t, "dropping answers after the broker applied the request")
	c := newClientAt(t, srv.URL, nil)
	q := unique("drops")
	// A short lease: the messages of the pop whose answer is lost come back
	// after it.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(2 * time.Second), RetryLimit: queen.Ptr(5)})
	const total = 30

	srv.ResetCounters()
	srv.DropNextResponses(queentest.RoutePush, 1)
	res, err := c.Queue(q).Partition("a").Push(numbered(0, total/2, nil)...).Execute(testCtx(t))
	if err != nil {
		t.Fatalf("push after a lost answer: %v", err)
	}
	for _, r := range res {
		if !r.Stored() {
			t.Errorf("message %d: %s (%s) after the retry, want stored", r.Index, r.Status, r.Error)
		}
	}
	if n := srv.Requests(queentest.RoutePush); n < 2 {
		t.Errorf("the push was sent %d times; the lost answer should have made the client retry", n)
	}
	push(t, c, q, "b", numbered(total/2, total/2, nil)...)

	srv.ResetCounters()
	srv.DropNextResponses(queentest.RoutePop, 1)
	srv.DropNextResponses(queentest.RouteAckBatch, 1)
	srv.DropNextResponses(queentest.RouteAck, 1)

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[int]int{}
	)
	err = c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(5).Concurrency(2).Each().
		Consume(ctx, func(_ context.Context, m *queen.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen[msgNum(m)]++
			if len(seen) == total {
				cancel()
			}
			return nil
		}).Execute(ctx)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	var missing []int
	redelivered := 0
	for i := range total {
		if seen[i] == 0 {
			missing = append(missing, i)
		}
		redelivered += max(seen[i]-1, 0)
	}
	mu.Unlock()
	if len(missing) > 0 {
		t.Fatalf("messages never processed: %v", missing)
	}
	t.Logf("requests: pop %d, ack/batch %d, ack %d; %d messages processed twice",
		srv.Requests(queentest.RoutePop), srv.Requests(queentest.RouteAckBatch), srv.Requests(queentest.RouteAck), redelivered)
	if srv.Requests(queentest.RoutePop) < 2 {
		t.Errorf("pop sent %d times: the dropped pop answer was not retried", srv.Requests(queentest.RoutePop))
	}
	if srv.Requests(queentest.RouteAckBatch)+srv.Requests(queentest.RouteAck) == 0 {
		t.Error("no ack reached the broker")
	}
	// Nothing left behind: no lease, nothing to read, even after a lease time.
	// 20 s guards against a hang: the leases of the lost answers (2 s) run out.
	eventually(t, 20*time.Second, "messages still leased", func() bool { return srv.LeasedCount(q, "g") == 0 })
	if rest := popWithin(t, c.Queue(q).Group("g").Batch(100), 2500*time.Millisecond); len(rest) != 0 {
		t.Errorf("after the run, group g still reads %v", nums(t, rest))
	}
}

// TestConsumeOutcomes: OnSuccess and OnError choose each message's outcome:
// a permanent error goes to the dead-letter queue at once (with its text),
// a temporary one is failed and retried in place (Message.Attempt 2), and
// a success can still give the message back with Retry, which spends
// nothing.
func TestConsumeOutcomes(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("outcomes")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(1), RetryDelay: queen.Ptr(100 * time.Millisecond), DeadLetterQueue: queen.Ptr(true),
	})
	for i, kind := range []string{"ok", "permanent", "flaky", "again"} {
		push(t, c, q, kind, map[string]any{"n": i, "kind": kind})
	}
	errPermanent := errors.New("permanent: no such mailbox")
	errTemporary := errors.New("temporary: try later")

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var (
		mu        sync.Mutex
		attempts  = map[string][]int{} // kind -> Message.Attempt seen: the loop's calls
		delivered = map[string][]int{} // kind -> DeliveryAttempt seen: the broker's claims
		finished  = map[string]bool{}
	)
	finish := func(kind string) { // under mu
		finished[kind] = true
		if len(finished) == 4 {
			cancel()
		}
	}
	err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Each().
		Consume(ctx, func(_ context.Context, m *queen.Message) error {
			kind, _ := m.Data["kind"].(string)
			mu.Lock()
			attempts[kind] = append(attempts[kind], m.Attempt())
			delivered[kind] = append(delivered[kind], m.DeliveryAttempt)
			n := len(attempts[kind])
			mu.Unlock()
			switch {
			case kind == "permanent":
				return errPermanent
			case kind == "flaky" && n == 1:
				return errTemporary
			}
			return nil
		}).
		OnSuccess(func(_ context.Context, m *queen.Message) queen.Outcome {
			kind, _ := m.Data["kind"].(string)
			mu.Lock()
			defer mu.Unlock()
			if kind == "again" && len(attempts[kind]) == 1 {
				return queen.Retry()
			}
			finish(kind)
			return queen.Complete()
		}).
		OnError(func(_ context.Context, m *queen.Message, err error) queen.Outcome {
			kind, _ := m.Data["kind"].(string)
			if errors.Is(err, errPermanent) {
				mu.Lock()
				finish(kind)
				mu.Unlock()
				return queen.DLQ(err)
			}
			return queen.Fail(err)
		}).
		Execute(ctx)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// flaky's failure is retried in place (Attempt 2, the same claim);
	// again's Retry gives it back to the broker, which delivers it again
	// (a new claim, DeliveryAttempt 2 on 2.x, 0 on 0.15.1), and the loop's
	// count starts again (nothing failed).
	want := map[string][]int{"ok": {1}, "permanent": {1}, "flaky": {1, 2}, "again": {1, 1}}
	for kind, w := range want {
		if got := attempts[kind]; fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: handled with attempts %v, want %v", kind, got, w)
		}
	}
	if d := delivered["again"]; len(d) != 2 || (d[1] != 0 && d[1] != 2) {
		t.Errorf("again: delivery attempts %v, want its second delivery reported 2 (0 on 0.15.1)", d)
	}
	// Retry spent nothing and Fail one retry of the one allowed: neither
	// message was dead-lettered; only the permanent error was.
	page, err := c.Admin().ListDLQ(testCtx(t), q, queen.DLQListOptions{Limit: 100})
	if err != nil && !isNotSupported(err) {
		t.Fatalf("ListDLQ: %v", err)
	}
	if err == nil {
		if len(page.Messages) != 1 || page.Messages[0].Error != errPermanent.Error() {
			t.Errorf("dead letters %+v, want the permanent one alone, with error %q", page.Messages, errPermanent.Error())
		}
	}
	if rest := popNow(t, c.Queue(q).Group("g").Batch(10)); len(rest) != 0 {
		t.Errorf("after the run, group g still reads %v", nums(t, rest))
	}
}
