package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// TestPinnedNewGroupKeepsItsStart: a group read through pinned pops in
// mode new gets every message pushed after its first pop where a 2.x
// broker keeps a pinned pop's start only in memory (PROTOCOL.md §18): (a)
// a partition that did not exist at the group's first pop, (b) a broker
// restart, (c) a queue-wide pop registering the group. The client carries
// a fixed start time from the first answered pinned pop on; a 0.15.1
// broker stores the start, and the same holds there.
func TestPinnedNewGroupKeepsItsStart(t *testing.T) {
	t.Parallel()
	const n = 3
	// first reads partition part of a new queue as group g in mode new,
	// before anything is pushed there.
	// (A QueueBuilder keeps what it is told: each pop gets a new one.)
	first := func(t *testing.T, c *queen.Client, base, part string) (string, func() *queen.QueueBuilder) {
		t.Helper()
		q := unique(base)
		newQueue(t, c, q, queen.QueueConfig{})
		push(t, c, q, "old", numbered(-1, 1, nil)...) // another partition: the queue exists
		g := func() *queen.QueueBuilder { return c.Queue(q).Group("g") }
		if got := popNow(t, g().Partition(part)); len(got) > 0 {
			t.Fatalf("the group's first pop got %v; nothing was pushed to %s", nums(t, got), part)
		}
		return q, g
	}
	// fresh leaves out the message pushed before the group's first pop:
	// the fixed start time may read up to a second before that pop.
	fresh := func(t *testing.T, msgs []*queen.Message) []int {
		var out []int
		for _, v := range nums(t, msgs) {
			if v >= 0 {
				out = append(out, v)
			}
		}
		return out
	}
	t.Run("a: a partition created after the first pop", func(t *testing.T) {
		t.Parallel()
		c := newClient(t)
		q, g := first(t, c, "start-a", "p2")
		push(t, c, q, "p2", numbered(0, n, nil)...)
		checkExactlyOnce(t, "p2", fresh(t, drain(t, c, g().Partition("p2"), "g", 0)), 0, n)
	})
	t.Run("b: a broker restart", func(t *testing.T) {
		t.Parallel()
		srv := faultBroker(t, "restarting the broker")
		c := newClientAt(t, srv.URL, nil)
		q, g := first(t, c, "start-b", "old")
		push(t, c, q, "old", numbered(0, n, nil)...)
		srv.Restart(0)
		if _, err := c.Admin().Health(testCtx(t)); err != nil {
			t.Fatalf("the broker after its restart: %v", err)
		}
		checkExactlyOnce(t, "after the restart", fresh(t, drain(t, c, g().Partition("old"), "g", 0)), 0, n)
	})
	t.Run("c: a queue-wide pop registers the group", func(t *testing.T) {
		t.Parallel()
		c := newClient(t)
		q, g := first(t, c, "start-c", "old")
		push(t, c, q, "old", numbered(0, n, nil)...)
		checkExactlyOnce(t, "queue-wide", fresh(t, drain(t, c, g().Partitions(4), "g", 0)), 0, n)
	})
}

// TestConsumeLoopRidesOutARestart: a consume loop (group, Each,
// Concurrency(4)) reads while the broker restarts. Every stored message is
// handled, those of a pop whose answer was lost in the crash once its
// lease ends, and none twice unless its ack got no answer or was refused.
func TestConsumeLoopRidesOutARestart(t *testing.T) {
	t.Parallel()
	srv := faultBroker(t, "restarting the broker")
	var lost sync.Map // transaction ids whose ack may not have been applied
	c := newClientVia(t, srv.URL, nil, nil)
	hooked, err := queen.New(srv.URL, append(clientOpts(), queen.WithHooks(settleWatch{&lost}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooked.Close(context.Background()) })
	q := unique("restart")
	// A short lease: a pop whose answer the crash cut holds its messages
	// until it ends.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(2 * time.Second), RetryLimit: queen.Ptr(5)})
	const parts, per = 4, 50
	for p := range parts {
		push(t, c, q, fmt.Sprintf("p%d", p), numbered(p*per, per/2, nil)...)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var (
		mu       sync.Mutex
		seen     = map[int]int{}
		txn      = map[int]string{}
		restart  sync.Once
		restarts = make(chan struct{})
	)
	handler := func(_ context.Context, m *queen.Message) error {
		mu.Lock()
		defer mu.Unlock()
		n := msgNum(m)
		seen[n]++
		txn[n] = m.TransactionID
		if len(seen) == parts*per/4 {
			restart.Do(func() { close(restarts) })
		}
		if len(seen) == parts*per {
			cancel()
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- hooked.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Concurrency(4).Batch(5).Each().Consume(ctx, handler).Execute(ctx)
	}()
	select {
	case <-restarts:
	case err := <-done:
		t.Fatalf("the loop ended before the restart: %v", err)
	}
	srv.Restart(300 * time.Millisecond)
	for p := range parts {
		push(t, c, q, fmt.Sprintf("p%d", p), numbered(p*per+per/2, per/2, nil)...)
	}
	if err := <-done; err != nil {
		t.Fatalf("Execute: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var missing, twice []int
	for i := range parts * per {
		switch k := seen[i]; {
		case k == 0:
			missing = append(missing, i)
		case k > 1:
			if _, ok := lost.Load(txn[i]); !ok {
				twice = append(twice, i)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("never handled after the restart: %v", missing)
	}
	if len(twice) > 0 {
		t.Errorf("handled more than once although every ack of theirs was applied: %v", twice)
	}
}

// settleWatch records the messages of every settlement that got no answer
// or was refused: the broker may hand them out again.
type settleWatch struct{ lost *sync.Map }

func (w settleWatch) OnSettle(_ context.Context, e queen.SettleEvent) {
	for i, s := range e.Settlements {
		if e.Err != nil || (i < len(e.Messages) && e.Messages[i].Answer == queen.AnswerRefused) {
			w.lost.Store(s.Message.TransactionID, true)
		}
	}
}
