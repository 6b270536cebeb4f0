package queen_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// meeting is a handler that holds each call until want handlers run at
// once (or meetTimeout passes, which it records as a failure, so that a loop
// that cannot run them at once fails rather than hangs), and checks on the
// way that one partition's messages run one at a time and in order.
type meeting struct {
	want int

	mu      sync.Mutex
	running map[string]int // partition -> handlers running
	last    map[string]int // partition -> last message handled
	now     int
	most    int
	atPeak  []string // partitions running when want of them first ran
	bad     []string
	done    []string        // keys handled, in order
	leases  map[string]bool // lease ids of the handled messages: one per pop
	txKey   map[string]string
	all     chan struct{}
	allOnce sync.Once
}

// idleStop ends these runs once every message is done: 1.5 s with no
// pop in hand, a margin no gap between the pops of a busy run comes near,
// on a loaded machine too.
const idleStop = 1500

const meetTimeout = 20 * time.Second // a hang guard: handlers that run at once meet within milliseconds

func newMeeting(want int) *meeting {
	return &meeting{want: want, running: map[string]int{}, last: map[string]int{},
		leases: map[string]bool{}, txKey: map[string]string{}, all: make(chan struct{})}
}

func (mt *meeting) handle(_ context.Context, m *queen.Message) error {
	p, i := m.Data["p"].(string), int(m.Data["i"].(float64))
	mt.mu.Lock()
	mt.running[p]++
	if mt.running[p] > 1 {
		mt.bad = append(mt.bad, "two handlers at once on partition "+p)
	}
	if last, ok := mt.last[p]; ok && i <= last {
		mt.bad = append(mt.bad, fmt.Sprintf("%s: message %d after %d", p, i, last))
	}
	mt.last[p] = i
	mt.leases[m.LeaseID] = true
	mt.txKey[m.TransactionID] = key(m)
	mt.now++
	mt.most = max(mt.most, mt.now)
	if mt.now == mt.want && mt.atPeak == nil {
		for q, n := range mt.running {
			if n > 0 {
				mt.atPeak = append(mt.atPeak, q)
			}
		}
		mt.allOnce.Do(func() { close(mt.all) })
	}
	mt.mu.Unlock()

	select {
	case <-mt.all:
	case <-time.After(meetTimeout):
		mt.mu.Lock()
		mt.bad = append(mt.bad, fmt.Sprintf("waited %v for %d handlers at once; at most %d ran", meetTimeout, mt.want, mt.most))
		mt.mu.Unlock()
		mt.allOnce.Do(func() { close(mt.all) }) // the others need not wait too
	}

	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.running[p]--
	mt.now--
	mt.done = append(mt.done, key(m))
	return nil
}

// check fails t unless want handlers ran at once on want distinct
// partitions, never two of one partition, and every message of parts×per
// was handled once.
func (mt *meeting) check(t *testing.T, parts, per int) {
	t.Helper()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if len(mt.bad) > 0 {
		t.Fatalf("%v", mt.bad)
	}
	if mt.most != mt.want || len(mt.atPeak) != mt.want {
		t.Fatalf("at most %d handlers ran at once (on %v); want %d on %d partitions", mt.most, mt.atPeak, mt.want, mt.want)
	}
	seen := map[string]bool{}
	for _, k := range mt.done {
		if seen[k] {
			t.Fatalf("%s handled twice", k)
		}
		seen[k] = true
	}
	if len(seen) != parts*per {
		t.Fatalf("handled %d messages, want %d", len(seen), parts*per)
	}
}

// checkOneAckPerPop fails t unless the broker got exactly one ack request
// per pop that delivered messages (one lease id each), and every ack
// request settles the messages of one pop, each partition's in order,
// partition after partition.
func (mt *meeting) checkOneAckPerPop(t *testing.T, e *env) {
	t.Helper()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if n := e.acks(); n != len(mt.leases) {
		t.Fatalf("%d ack requests (ack %d, ack/batch %d) for %d pops; want one per pop",
			n, e.srv.Requests(queentest.RouteAck), e.srv.Requests(queentest.RouteAckBatch), len(mt.leases))
	}
	if e.spy == nil {
		return
	}
	for _, a := range e.spy.ackRequests() {
		var parts []string
		last := map[string]int{}
		for _, it := range a.Items {
			if it.LeaseID != a.Items[0].LeaseID {
				t.Fatalf("one ack request settles two pops: %+v", a.Items)
			}
			k, ok := mt.txKey[it.TransactionID]
			if !ok {
				t.Fatalf("ack of a message no handler got: %+v", it)
			}
			_, n, _ := strings.Cut(k, "/")
			i, _ := strconv.Atoi(n)
			p := it.PartitionID
			if len(parts) == 0 || parts[len(parts)-1] != p {
				for _, q := range parts {
					if q == p {
						t.Fatalf("ack items not in partition order: partition %s comes back after %v", p, parts)
					}
				}
				parts = append(parts, p)
			}
			if prev, ok := last[p]; ok && i <= prev {
				t.Fatalf("ack items of partition %s out of order: %d after %d", p, i, prev)
			}
			last[p] = i
		}
	}
}

// The page's worker ("Running a consumer for real"): Concurrency(4) runs
// four handlers at once, on four partitions, whatever sizes the pops: the
// autopilot (one pop may take every ready partition), a Limit with no
// Batch, a Limit with Partitions(1), a pinned pop over many partitions.
// Each pop is still settled with one ack request.
func TestConsumeConcurrencyRunsHandlersOnDistinctPartitions(t *testing.T) {
	const parts, per = 5, 3
	for _, tc := range []struct {
		name string
		opts func(*queen.QueueBuilder) *queen.QueueBuilder
	}{
		{"the page's worker (autopilot)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q }},
		{"Limit(200) without Batch", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(200) }},
		{"Limit(200) and Partitions(1)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(200).Partitions(1) }},
		{"Limit(15): ends with the Limit", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Limit(parts * per) }},
		{"Batch(100) and Partitions(8)", func(q *queen.QueueBuilder) *queen.QueueBuilder { return q.Batch(100).Partitions(8) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withSpy())
			for p := range parts {
				e.pushN("tasks", fmt.Sprint("p", p), per)
			}
			mt := newMeeting(4)
			err := execute(t, context.Background(), func(ctx context.Context) error {
				qb := e.c.Queue("tasks").
					Group("workers").
					SubscriptionMode(queen.SubscriptionModeAll).
					Concurrency(4).
					RenewLease(true, 10000).
					IdleMillis(idleStop).
					Each()
				return tc.opts(qb).Consume(ctx, mt.handle).Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			mt.check(t, parts, per)
			mt.checkOneAckPerPop(t, e)
			if n := e.srv.LeasedCount("tasks", "workers"); n != 0 {
				t.Fatalf("%d leased after Execute returned", n)
			}
			if left := e.peek("tasks", "workers"); len(left) != 0 {
				t.Fatalf("left %v, want every task done", keys(left))
			}
		})
	}
}

// ConsumeBatch with Each() is the same: per message, four at once.
func TestConsumeBatchEachConcurrency(t *testing.T) {
	e := newEnv(t)
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	mt := newMeeting(4)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Concurrency(4).Each().IdleMillis(idleStop).
			ConsumeBatch(ctx, func(ctx context.Context, msgs []*queen.Message) error {
				if len(msgs) != 1 {
					t.Errorf("Each() gave the handler %d messages", len(msgs))
				}
				return mt.handle(ctx, msgs[0])
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	mt.check(t, 4, 3)
	mt.checkOneAckPerPop(t, e)
}

// One pop over four partitions, handled by four handlers at once, is
// settled with ONE batch ack: the pop's outcomes, partition after
// partition, each in order.
func TestConsumeOnePopManyPartitionsOneAck(t *testing.T) {
	e := newEnv(t, withSpy())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	mt := newMeeting(4)
	err := execute(t, context.Background(), func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(12).Partitions(4).Concurrency(4).Each().IdleMillis(idleStop).
			Consume(ctx, mt.handle).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	mt.check(t, 4, 3)
	if len(mt.leases) != 1 {
		t.Fatalf("%d pops delivered the messages, want the first one all 12", len(mt.leases))
	}
	if a, b := e.srv.Requests(queentest.RouteAck), e.srv.Requests(queentest.RouteAckBatch); a != 0 || b != 1 {
		t.Fatalf("ack requests: ack %d, ack/batch %d; want one batch ack for the pop", a, b)
	}
	acks := e.spy.ackRequests()
	if len(acks) != 1 || len(acks[0].Items) != 12 {
		t.Fatalf("acks %+v, want one of 12 items", acks)
	}
	mt.checkOneAckPerPop(t, e)
	for _, it := range acks[0].Items {
		if it.Status != "completed" {
			t.Fatalf("acked %+v, want completed", it)
		}
	}
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d leased after Execute returned", n)
	}
}

// A stop while some partitions of a pop wait for a free handler: the
// running ones finish and are acked, the waiting ones are given back with
// retry, all in the pop's one batch ack; nothing stays leased.
func TestConsumeStopGivesBackWaitingPartitions(t *testing.T) {
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) { q.RetryDelay = 3_600_000 }), withSpy())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	second := make(chan struct{})
	err := execute(t, ctx, func(ctx context.Context) error {
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Batch(8).Partitions(4).Concurrency(2).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				switch rec.add(key(m)) {
				case 1: // waits for a second handler, on another partition
					select {
					case <-second:
					case <-time.After(meetTimeout):
					}
				case 2: // two handlers run: the stop
					cancel()
					close(second)
				}
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := rec.get()
	if len(got) != 2 || got[0][:2] == got[1][:2] {
		t.Fatalf("handled %v, want the first message of two partitions", got)
	}
	acks := e.spy.ackRequests()
	if len(acks) != 1 || len(acks[0].Items) != 8 {
		t.Fatalf("acks %+v, want the pop's 8 messages in one ack", acks)
	}
	completed := 0
	for _, it := range acks[0].Items {
		switch it.Status {
		case "completed":
			completed++
		case "retry":
		default:
			t.Fatalf("acked %+v, want completed or retry", it)
		}
	}
	if completed != 2 {
		t.Fatalf("%d completed, want the 2 handled", completed)
	}
	if n := e.srv.LeasedCount("q", "g"); n != 0 {
		t.Fatalf("%d leased after Execute returned", n)
	}
	if left := e.peek("q", "g"); len(left) != 6 {
		t.Fatalf("given back %v, want the 6 not handled, at once", keys(left))
	}
}

// A lost lease cancels only the handlers of its pop: another pop's handler,
// running at the same time, goes on and is acked.
func TestConsumeLostLeaseCancelsOnlyItsHandlers(t *testing.T) {
	renewals := newRenewWatch()
	e := newEnv(t, withHooks(renewals))
	e.pushN("q", "a", 1)
	e.pushN("q", "b", 1)
	type call struct {
		m    *queen.Message
		hctx context.Context
	}
	calls := make(chan call, 2)
	release := make(chan struct{})
	var mu sync.Mutex
	causes := map[string]error{}
	err := execute(t, context.Background(), func(ctx context.Context) error {
		go func() {
			a, b := <-calls, <-calls
			lost := a
			if key(b.m) == "a/0" {
				lost = b
			}
			// Release partition a's lease behind the loop's back: its next
			// renewal finds no live lease.
			give := []queen.Settlement{{Message: lost.m, Status: queen.StatusRetry}}
			if _, err := e.c.SettleBatch(context.Background(), give, queen.AckOptions{ConsumerGroup: "g"}); err != nil {
				t.Error(err)
			}
			select {
			case <-lost.hctx.Done():
			case <-time.After(30 * time.Second): // a hang guard
				t.Error("the handler of the lost lease was not cancelled")
			}
			if !renewals.await(2) { // a few more renewals of the other lease
				t.Error("no renewal after the lost lease")
			}
			close(release)
		}()
		return e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Partitions(1).Concurrency(2).RenewLease(true, 5).Each().Limit(2).
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				calls <- call{m, hctx}
				select {
				case <-release:
				case <-time.After(30 * time.Second): // a hang guard
				}
				mu.Lock()
				causes[key(m)] = context.Cause(hctx)
				mu.Unlock()
				return nil
			}).Execute(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(causes["a/0"], queen.ErrLeaseLost) {
		t.Fatalf("a/0's ctx: %v, want ErrLeaseLost", causes["a/0"])
	}
	if causes["b/0"] != nil {
		t.Fatalf("b/0's ctx was cancelled (%v): another pop's lease was lost", causes["b/0"])
	}
	left := e.peek("q", "g")
	if got := keys(left); !reflect.DeepEqual(got, []string{"a/0"}) {
		t.Fatalf("left %v, want a/0 only (b/0 acked completed)", got)
	}
}
