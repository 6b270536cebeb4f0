package integration

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// TestQueueModeSharesMessages: without a consumer group each message goes
// to exactly one worker, and a partition leased to one worker is not handed
// to another.
func TestQueueModeSharesMessages(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("shared")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const parts, per = 3, 10
	for p := range parts {
		push(t, c, q, fmt.Sprintf("p%d", p), numbered(p*per, per, nil)...)
	}

	t.Run("a leased partition is not handed out twice", func(t *testing.T) {
		worker1 := newClient(t)
		worker2 := newClient(t)
		held := popWait(t, worker1.Queue(q).Batch(per).Partitions(1), shortWaitMs)
		if len(held) == 0 {
			t.Fatal("first worker got nothing")
		}
		for _, m := range held {
			if m.Partition != held[0].Partition {
				t.Fatalf("Partitions(1) pop spans partitions %s and %s", held[0].Partition, m.Partition)
			}
		}
		// While worker 1 holds its lease, worker 2 gets only other partitions.
		var others []*queen.Message
		for range 2 * parts {
			msgs := popNow(t, worker2.Queue(q).Batch(per).Partitions(1))
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				if m.Partition == held[0].Partition {
					t.Errorf("worker 2 got message %d of partition %s, leased to worker 1", num(t, m), m.Partition)
				}
			}
			others = append(others, msgs...)
			ackAll(t, worker2, "", msgs)
		}
		ackAll(t, worker1, "", held)
		checkExactlyOnce(t, "queue mode, two workers", nums(t, append(held, others...)), 0, parts*per)
	})

	t.Run("concurrent workers each get their own messages", func(t *testing.T) {
		q := unique("shared-conc")
		newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
		for p := range parts {
			push(t, c, q, fmt.Sprintf("p%d", p), numbered(p*per, per, nil)...)
		}
		ctx := testCtx(t)
		var (
			mu      sync.Mutex
			byWork  = map[int][]int{}
			handled int
			wg      sync.WaitGroup
		)
		for w := range 3 {
			worker := newClient(t)
			wg.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					done := handled == parts*per
					mu.Unlock()
					if done {
						return
					}
					msgs, err := worker.Queue(q).Batch(4).Wait(false).Pop(ctx)
					if err != nil {
						t.Errorf("worker %d: pop: %v", w, err)
						return
					}
					if len(msgs) == 0 {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					acks := make([]queen.Settlement, len(msgs))
					for i, m := range msgs {
						acks[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
					}
					if _, err := worker.SettleBatch(ctx, acks, queen.AckOptions{}); err != nil {
						t.Errorf("worker %d: ack: %v", w, err)
						return
					}
					mu.Lock()
					for _, m := range msgs {
						n, _ := m.Data["n"].(float64)
						byWork[w] = append(byWork[w], int(n))
					}
					handled += len(msgs)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		var all []int
		for w, got := range byWork {
			t.Logf("worker %d handled %d messages", w, len(got))
			all = append(all, got...)
		}
		checkExactlyOnce(t, "queue mode, three concurrent workers", all, 0, parts*per)
	})
}

// TestEveryGroupGetsEveryMessage: three consumer groups on one queue each
// read every message, in partition order, whatever the others did.
func TestEveryGroupGetsEveryMessage(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("fanout")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "a", numbered(0, 10, nil)...)
	push(t, c, q, "b", numbered(10, 10, nil)...)

	for _, g := range []string{"billing", "emails", "analytics"} {
		got := drain(t, c, c.Queue(q).Group(g).SubscriptionMode(queen.SubscriptionModeAll).Batch(7), g, 0)
		checkExactlyOnce(t, "group "+g, nums(t, got), 0, 20)
		checkPartitionOrder(t, "group "+g, got)
	}
	// Queue mode is one more independent reader.
	got := drain(t, c, c.Queue(q).Batch(7), "", 0)
	checkExactlyOnce(t, "queue mode after three groups", nums(t, got), 0, 20)
}

// checkPartitionOrder fails the test when the numbers of one partition's
// messages do not increase in delivery order.
func checkPartitionOrder(t *testing.T, what string, msgs []*queen.Message) {
	t.Helper()
	last := map[string]int{}
	for _, m := range msgs {
		n := num(t, m)
		if prev, ok := last[m.Partition]; ok && n <= prev {
			t.Errorf("%s: partition %s delivered %d after %d", what, m.Partition, n, prev)
		}
		last[m.Partition] = n
	}
}

// TestSubscriptionModes: where a new group starts. "all" reads the backlog,
// "new" (and the default) only what is pushed after its first pop, and
// SubscriptionFrom a time the messages stored at or after it.
func TestSubscriptionModes(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("subscribe")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "", numbered(0, 5, nil)...)

	// "new" and default groups register with their first pop, before the
	// second push: they see none of the backlog.
	groupNew := c.Queue(q).Group("g-new").SubscriptionMode(queen.SubscriptionModeNew).Batch(100)
	groupDefault := c.Queue(q).Group("g-default").Batch(100)
	if got := popNow(t, groupNew); len(got) != 0 {
		t.Errorf("subscriptionMode new: first pop got the backlog %v, want nothing", nums(t, got))
	}
	if got := popNow(t, groupDefault); len(got) != 0 {
		t.Errorf("default subscription: first pop got the backlog %v, want nothing", nums(t, got))
	}
	time.Sleep(20 * time.Millisecond) // the second push gets later timestamps
	push(t, c, q, "", numbered(5, 3, nil)...)

	all := drain(t, c, c.Queue(q).Group("g-all").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "g-all", 0)
	checkExactlyOnce(t, "subscriptionMode all", nums(t, all), 0, 8)
	checkExactlyOnce(t, "subscriptionMode new", nums(t, drain(t, c, groupNew, "g-new", 0)), 5, 3)
	checkExactlyOnce(t, "default subscription", nums(t, drain(t, c, groupDefault, "g-default", 0)), 5, 3)

	// The broker's own timestamp of message 5 is the boundary.
	var from time.Time
	for _, m := range all {
		if num(t, m) == 5 {
			from = m.CreatedAt
		}
	}
	if from.IsZero() {
		t.Fatal("message 5 has no createdAt; cannot test SubscriptionFrom")
	}
	ts := from.UTC().Format(time.RFC3339Nano)
	fromGroup := c.Queue(q).Group("g-from").SubscriptionFrom(ts).Batch(100)
	checkExactlyOnce(t, "SubscriptionFrom("+ts+")", nums(t, drain(t, c, fromGroup, "g-from", 0)), 5, 3)

	early := c.Queue(q).Group("g-early").SubscriptionFrom("2026-10-22T00:00:00Z").Batch(100)
	checkExactlyOnce(t, "SubscriptionFrom(before the first push)", nums(t, drain(t, c, early, "g-early", 0)), 0, 8)
}

// TestConflation: a conflating group gets only the newest message of each
// partition, and its ack retires the older ones; another group still gets
// everything.
func TestConflation(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("prices")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "A-1",
		map[string]any{"sku": "A-1", "price": 10},
		map[string]any{"sku": "A-1", "price": 11},
		map[string]any{"sku": "A-1", "price": 12})
	push(t, c, q, "B-2",
		map[string]any{"sku": "B-2", "price": 5},
		map[string]any{"sku": "B-2", "price": 6})

	awaitPushed(t, c, q, 5) // the conflating pop below must see both partitions whole
	repricer := c.Queue(q).Group("repricer").SubscriptionMode(queen.SubscriptionModeAll).Conflation(true)
	got, err := repricer.Wait(false).Pop(testCtx(t))
	if be.profile == queentest.Profile015 {
		// 0.15.1 ignores conflation: the client must say so, not hand out
		// the backlog.
		if !errors.Is(err, queen.ErrConflationUnsupported) {
			t.Fatalf("conflating pop on %s: %v (%d messages), want ErrConflationUnsupported", be.version, err, len(got))
		}
		return
	}
	if errors.Is(err, queen.ErrConflationUnsupported) {
		t.Skipf("broker %s does not conflate: %v", be.version, err)
	}
	if err != nil {
		t.Fatalf("conflating pop: %v", err)
	}
	prices := func(msgs []*queen.Message) map[string]float64 {
		out := map[string]float64{}
		for _, m := range msgs {
			if _, dup := out[m.Partition]; dup {
				t.Errorf("conflating pop gave two messages of partition %s", m.Partition)
			}
			out[m.Partition], _ = m.Data["price"].(float64)
		}
		return out
	}
	if p := prices(got); len(p) != 2 || p["A-1"] != 12 || p["B-2"] != 6 {
		t.Fatalf("conflating pop = %v, want the newest of each partition: map[A-1:12 B-2:6]", p)
	}
	ackAll(t, c, "repricer", got)
	if again := popNow(t, repricer); len(again) != 0 {
		t.Errorf("after acking the newest, the group got %d older messages; want none", len(again))
	}

	push(t, c, q, "A-1", map[string]any{"sku": "A-1", "price": 13})
	if p := prices(popPushed(t, repricer)); len(p) != 1 || p["A-1"] != 13 {
		t.Errorf("after a new price, conflating pop = %v, want map[A-1:13]", p)
	}

	// Conflation belongs to the group: another group reads every price.
	audit := drain(t, c, c.Queue(q).Group("audit").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "audit", 0)
	if len(audit) != 6 {
		t.Errorf("non-conflating group got %d messages, want all 6", len(audit))
	}
}

// TestCommitOnDelivery: the cursor moves as messages are handed out; there
// is no lease and nothing to ack.
func TestCommitOnDelivery(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("metrics")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "", numbered(0, 5, nil)...)

	live := c.Queue(q).Group("live-chart").SubscriptionMode(queen.SubscriptionModeAll).CommitOnDelivery(true).Batch(100)
	got := popPushed(t, live)
	checkExactlyOnce(t, "commit on delivery", nums(t, got), 0, 5)
	for _, m := range got {
		if m.LeaseID != "" {
			t.Errorf("message %d has lease %q; a commit-on-delivery pop leases nothing", num(t, m), m.LeaseID)
		}
	}
	if len(got) > 0 {
		if _, err := c.Renew(testCtx(t), got[0]); !errors.Is(err, queen.ErrNotAckable) {
			t.Errorf("Renew of a committed-on-delivery message: err = %v, want ErrNotAckable", err)
		}
	}
	if again := popNow(t, live); len(again) != 0 {
		t.Errorf("second pop got %v: the cursor did not move on delivery", nums(t, again))
	}
	if be.srv != nil {
		if n := be.srv.LeasedCount(q, "live-chart"); n != 0 {
			t.Errorf("queentest: %d messages leased after a commit-on-delivery pop, want 0", n)
		}
	}
	// At most once per group, not per queue.
	other := drain(t, c, c.Queue(q).Group("other").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "other", 0)
	checkExactlyOnce(t, "another group", nums(t, other), 0, 5)
}

// TestPinnedGroupStartPoint: a group that reads partition by partition
// (pinned pops) starts every partition where it asked ("all", or a time),
// and so does a queue-wide pop after pinned ones, and a second client of
// the group. A 2.x broker registers a group only on a queue-wide pop: a
// pinned pop seeds just its own partition, from the start point it
// carries; a 0.15.1 broker's pinned pop writes the subscription of its
// partition only.
func TestPinnedGroupStartPoint(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("pinned-start")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "p1", numbered(0, 2, nil)...)
	push(t, c, q, "p2", numbered(2, 2, nil)...)
	time.Sleep(20 * time.Millisecond) // the second pushes get later timestamps
	push(t, c, q, "p1", numbered(4, 2, nil)...)
	push(t, c, q, "p2", numbered(6, 2, nil)...)

	// The broker's own timestamp of the second pushes is the boundary of
	// the SubscriptionFrom group.
	var from time.Time
	for _, part := range []string{"p1", "p2"} {
		probe := c.Queue(q).Partition(part).Group("probe").SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
		for _, m := range drain(t, c, probe, "probe", 0) {
			if n := num(t, m); (n == 4 || n == 6) && (from.IsZero() || m.CreatedAt.Before(from)) {
				from = m.CreatedAt
			}
		}
	}
	if from.IsZero() {
		t.Fatal("the second pushes have no createdAt; cannot test SubscriptionFrom")
	}
	ts := from.UTC().Format(time.RFC3339Nano)
	p1, p2 := []int{0, 1, 4, 5}, []int{2, 3, 6, 7}
	check := func(what string, got []*queen.Message, want []int) {
		t.Helper()
		if g := nums(t, got); !slices.Equal(g, want) {
			t.Errorf("%s: got %v, want %v", what, g, want)
		}
	}

	all := func(c *queen.Client, group string) *queen.QueueBuilder {
		return c.Queue(q).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	}
	check("all: pinned p1", drain(t, c, all(c, "g-all").Partition("p1"), "g-all", 0), p1)
	check("all: pinned p2 after p1", drain(t, c, all(c, "g-all").Partition("p2"), "g-all", 0), p2)

	fromGroup := func(part string) *queen.QueueBuilder {
		return c.Queue(q).Partition(part).Group("g-from").SubscriptionFrom(ts).Batch(100)
	}
	check("from "+ts+": pinned p1", drain(t, c, fromGroup("p1"), "g-from", 0), []int{4, 5})
	check("from "+ts+": pinned p2 after p1", drain(t, c, fromGroup("p2"), "g-from", 0), []int{6, 7})

	check("all, then queue-wide: pinned p1", drain(t, c, all(c, "g-wide").Partition("p1"), "g-wide", 0), p1)
	check("all, then queue-wide: the rest", drain(t, c, all(c, "g-wide").Partitions(4), "g-wide", 0), p2)

	c2 := newClient(t)
	check("all, two clients: pinned p1", drain(t, c, all(c, "g-two").Partition("p1"), "g-two", 0), p1)
	check("all, two clients: pinned p2 by the second", drain(t, c2, all(c2, "g-two").Partition("p2"), "g-two", 0), p2)
}
