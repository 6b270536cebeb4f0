package queen_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A group that reads partition by partition (pinned pops) gets the start
// point it asked for on every partition, on either broker profile. A 2.x
// broker registers a group only on a queue-wide (or discovery) pop: a
// pinned pop seeds just its partition, from the start point it carries
// (rsm/consume/pop.rs pop_pinned), so a client that stopped sending it
// after the first pinned pop left the next partition to the 2.x default,
// "new", and the group skipped that partition's backlog. A queue-wide pop
// after pinned ones registered the group as "new" in the same way, and a
// second Client trusted the group view, which lists the cursors of pinned
// pops although the group is not registered.
func TestPinnedPopsKeepTheGroupsStartPoint(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			t.Run("all, partition after partition", func(t *testing.T) {
				f := newPinnedFixture(t, p)
				f.push("p1", "a1", "a2")
				f.push("p2", "b1", "b2")
				g := func(c *queen.Client) *queen.QueueBuilder {
					return c.Queue(f.queue).Group("g").SubscriptionMode(queen.SubscriptionModeAll)
				}
				assert.Equal(t, []string{"a1", "a2"}, f.popAck(g(f.c).Partition("p1")))
				assert.Equal(t, []string{"b1", "b2"}, f.popAck(g(f.c).Partition("p2")), "p2's backlog")
			})
			t.Run("from a time, partition after partition", func(t *testing.T) {
				f := newPinnedFixture(t, p)
				f.push("p1", "a-old")
				f.push("p2", "b-old")
				f.clk.Advance(time.Minute)
				from := f.clk.Now().UTC().Format(time.RFC3339Nano)
				f.push("p1", "a-new")
				f.push("p2", "b-new")
				g := func(c *queen.Client) *queen.QueueBuilder {
					return c.Queue(f.queue).Group("g").SubscriptionFrom(from)
				}
				assert.Equal(t, []string{"a-new"}, f.popAck(g(f.c).Partition("p1")))
				assert.Equal(t, []string{"b-new"}, f.popAck(g(f.c).Partition("p2")), "p2 from the time")
			})
			t.Run("all, pinned then queue-wide", func(t *testing.T) {
				f := newPinnedFixture(t, p)
				f.push("p1", "a1")
				f.push("p2", "b1", "b2")
				g := func(c *queen.Client) *queen.QueueBuilder {
					return c.Queue(f.queue).Group("g").SubscriptionMode(queen.SubscriptionModeAll)
				}
				assert.Equal(t, []string{"a1"}, f.popAck(g(f.c).Partition("p1")))
				assert.Equal(t, []string{"b1", "b2"}, f.popAck(g(f.c).Partitions(4)), "p2's backlog")
			})
			t.Run("all, a second client", func(t *testing.T) {
				f := newPinnedFixture(t, p)
				f.push("p1", "a1")
				f.push("p2", "b1")
				g := func(c *queen.Client) *queen.QueueBuilder {
					return c.Queue(f.queue).Group("g").SubscriptionMode(queen.SubscriptionModeAll)
				}
				assert.Equal(t, []string{"a1"}, f.popAck(g(f.c).Partition("p1")))
				assert.Equal(t, []string{"b1"}, f.popAck(g(f.client()).Partition("p2")), "p2's backlog")
			})
		})
	}
}

type pinnedFixture struct {
	t     *testing.T
	clk   *queentest.FakeClock
	srv   *queentest.Server
	c     *queen.Client
	queue string
}

func newPinnedFixture(t *testing.T, p queentest.Profile) *pinnedFixture {
	clk := queentest.NewFakeClock(time.Date(2026, 10, 22, 8, 0, 0, 0, time.UTC))
	f := &pinnedFixture{t: t, clk: clk, srv: queentest.Start(t, queentest.WithProfile(p), queentest.WithClock(clk)), queue: "pinned"}
	f.c = f.client()
	return f
}

func (f *pinnedFixture) client() *queen.Client {
	c, err := queen.New(f.srv.URL, queen.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func (f *pinnedFixture) push(part string, ids ...string) {
	items := make([]any, len(ids))
	for i, id := range ids {
		items[i] = queen.Item{Payload: map[string]any{"id": id}, TransactionID: id}
	}
	_, err := f.c.Queue(f.queue).Partition(part).Push(items...).Execute(context.Background())
	require.NoError(f.t, err)
	f.clk.Advance(time.Second)
}

// popAck pops once without waiting, completes what came and returns the
// transaction ids in order.
func (f *pinnedFixture) popAck(qb *queen.QueueBuilder) []string {
	ctx := context.Background()
	msgs, err := qb.Batch(10).Wait(false).Pop(ctx)
	require.NoError(f.t, err)
	var ids []string
	acks := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		ids = append(ids, m.TransactionID)
		acks[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
	}
	if len(acks) > 0 {
		_, err := f.c.SettleBatch(ctx, acks, queen.AckOptions{}) // each message's own group
		require.NoError(f.t, err)
	}
	return ids
}

// A group read through pinned pops in mode new on a 2.x broker gets every
// message pushed after its first pop, in the three cases where the broker
// starts a partition at its tail again because it kept the start of a
// pinned pop only in memory (rsm/consume: pop.rs pop_pinned, load.rs seed
// and register, mod.rs reset): (a) the first pinned pop named a partition
// that did not exist yet, (b) the broker restarted, (c) a queue-wide pop
// of the group registered it. Before the client fixed a start time, each
// of these lost the message pushed in between. What was pushed well before
// the group's first pop stays unread.
func TestPinnedNewGroupKeepsItsStart2x(t *testing.T) {
	setup := func(t *testing.T) *pinnedFixture {
		f := newPinnedFixture(t, queentest.Profile2x)
		f.push("p1", "a-old")
		f.clk.Advance(time.Minute) // the cost: up to a second before the first pop may be read
		return f
	}
	g := func(f *pinnedFixture) *queen.QueueBuilder { return f.c.Queue(f.queue).Group("g") }

	t.Run("a: a partition that did not exist yet", func(t *testing.T) {
		f := setup(t)
		assert.Empty(t, f.popAck(g(f).Partition("p2")), "p2 does not exist yet")
		f.push("p2", "b-new")
		assert.Equal(t, []string{"b-new"}, f.popAck(g(f).Partition("p2")))
		assert.Empty(t, f.popAck(g(f).Partition("p1")), "p1's old backlog stays unread")
	})
	t.Run("b: a broker restart", func(t *testing.T) {
		f := setup(t)
		assert.Empty(t, f.popAck(g(f).Partition("p1")))
		f.push("p1", "a-new")
		f.restart()
		assert.Equal(t, []string{"a-new"}, f.popAck(g(f).Partition("p1")))
	})
	t.Run("c: a queue-wide pop registers the group", func(t *testing.T) {
		f := setup(t)
		assert.Empty(t, f.popAck(g(f).Partition("p1")))
		f.push("p1", "a-new")
		assert.Equal(t, []string{"a-new"}, f.popAck(g(f).Partitions(4)))
	})
	t.Run("now is new", func(t *testing.T) {
		f := setup(t)
		now := func() *queen.QueueBuilder { return g(f).SubscriptionFrom("now") }
		assert.Empty(t, f.popAck(now().Partition("p1")))
		f.push("p1", "a-new")
		f.restart()
		assert.Equal(t, []string{"a-new"}, f.popAck(now().Partition("p1")))
	})
}

// A group read only through queue-wide pops is registered by the broker,
// durably: its pops keep "new" and the group view says so. A group first
// read through a pinned pop shows its fixed start time there instead. (The
// view lists a group once something was delivered to it: its first cursor
// row.)
func TestPinnedStartLeavesQueueWideGroups2x(t *testing.T) {
	f := newPinnedFixture(t, queentest.Profile2x)
	f.push("p1", "a-old")
	f.clk.Advance(time.Minute)
	g := func(name string) *queen.QueueBuilder { return f.c.Queue(f.queue).Group(name) }
	assert.Empty(t, f.popAck(g("wide").Partitions(4)))
	assert.Empty(t, f.popAck(g("wide").Partition("p1")))
	assert.Empty(t, f.popAck(g("g").Partition("p1")))
	assert.Empty(t, f.popAck(g("g").Partitions(4)))
	f.push("p1", "a-new")
	assert.Equal(t, []string{"a-new"}, f.popAck(g("wide").Partitions(4)))
	assert.Equal(t, []string{"a-new"}, f.popAck(g("g").Partitions(4)))
	groups, err := f.c.Admin().ListConsumerGroups(context.Background())
	require.NoError(t, err)
	modes := map[string]string{}
	for _, cg := range groups {
		modes[cg.Name] = cg.SubscriptionMode
	}
	assert.Equal(t, "new", modes["wide"])
	assert.Equal(t, "timestamp", modes["g"], "a group first read pinned registers with its fixed time")
}

// restart restarts the broker and waits until it answers again: the
// Client's kept-alive connections were cut, and a pop sent on one is not
// sent again (it may have reached the broker).
func (f *pinnedFixture) restart() {
	f.srv.Restart(0)
	_, err := f.c.Admin().Health(context.Background())
	require.NoError(f.t, err)
}

// No sequence of pops, failed and retry acks, acks left out (lease
// expiry), restarted workers (a new Client, which knows nothing of the
// group) and seeks back in time makes a consumer group skip a message, on
// either broker profile (PROTOCOL.md §16: on 0.15.1 a subscriptionMode=new
// sent for a group whose cursor is back at a partition's start would move
// the cursor to the end). Each seeded run ends with a drain; every message
// the group owes must have been acked completed by then.
func TestNoSequenceSkipsAMessage(t *testing.T) {
	for _, p := range queentest.Profiles() {
		for seed := range 24 {
			t.Run(fmt.Sprintf("%s/seed=%d", p, seed), func(t *testing.T) {
				t.Parallel()
				noSkipRun(t, p, uint64(seed))
			})
		}
	}
}

type noSkip struct {
	t     *testing.T
	rnd   *rand.Rand
	clk   *queentest.FakeClock
	srv   *queentest.Server
	c     *queen.Client
	mode  queen.SubscriptionMode // of the registering pop
	from  string                 // the registering pop's start time, if any
	prof  queentest.Profile
	part  map[string]string // transaction id -> its partition
	pops  int
	owed  map[string]bool      // transaction id -> the group must still complete it
	at    map[string]time.Time // transaction id -> when it was pushed
	seq   int
	steps []string
}

const (
	noSkipQueue = "noskip"
	noSkipGroup = "g"
	noSkipLease = 10 * time.Second
)

func noSkipRun(t *testing.T, p queentest.Profile, seed uint64) {
	ctx := context.Background()
	clk := queentest.NewFakeClock(time.Date(2026, 10, 22, 8, 0, 0, 0, time.UTC))
	s := &noSkip{
		t: t, rnd: rand.New(rand.NewPCG(seed, 9)), clk: clk,
		srv:  queentest.Start(t, queentest.WithProfile(p), queentest.WithClock(clk)),
		owed: map[string]bool{}, at: map[string]time.Time{}, part: map[string]string{}, prof: p,
	}
	s.c = s.client()
	lease, retries, delay := noSkipLease, 1000, time.Duration(0)
	if _, err := s.c.Admin().ConfigureQueue(ctx, noSkipQueue, queen.QueueConfig{LeaseTime: &lease, RetryLimit: &retries, RetryDelay: &delay}); err != nil {
		t.Fatal(err)
	}
	// The group registers after a backlog, with "all" (it owes the
	// backlog), with "new" (it owes only what comes later), or from the
	// time of a second push (it owes that push and what comes later).
	// Later pops name any mode, or none, or that same time: it must not
	// matter once the group exists (as when several programs read with one
	// group). (The registering pop claims a partition: a 0.15.1 broker
	// records a group only then.)
	s.push(1 + s.rnd.IntN(4))
	switch s.rnd.IntN(3) {
	case 0:
		s.mode = queen.SubscriptionModeAll
	case 1:
		s.mode = queen.SubscriptionModeNew
		for id := range s.owed {
			s.owed[id] = false
		}
	default:
		for id := range s.owed {
			s.owed[id] = false
		}
		clk.Advance(time.Second)
		s.from = clk.Now().UTC().Format(time.RFC3339Nano)
		s.push(1 + s.rnd.IntN(3))
	}
	s.pop(1 + s.rnd.IntN(5))
	for range 40 {
		switch r := s.rnd.IntN(20); {
		case r < 6:
			s.push(1 + s.rnd.IntN(3))
		case r < 15:
			s.pop(1 + s.rnd.IntN(5))
		case r < 17:
			s.step("lease expiry")
			clk.Advance(noSkipLease + time.Second)
		case r < 19:
			s.step("new client")
			s.c = s.client()
		default:
			s.seekBack()
		}
		clk.Advance(time.Second)
	}
	s.drain()
	var left []string
	for id, owed := range s.owed {
		if owed {
			left = append(left, id)
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		t.Fatalf("the group skipped %d message(s) %v\nsteps: %v", len(left), left, s.steps)
	}
}

func (s *noSkip) client() *queen.Client {
	c, err := queen.New(s.srv.URL, queen.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// builder names the group with the registering start point on the first
// pop and any mode, or none, or the registering start time, on the later
// ones.
func (s *noSkip) builder() *queen.QueueBuilder {
	b := s.c.Queue(noSkipQueue).Group(noSkipGroup)
	mode, from := s.mode, s.from
	if s.pops++; s.pops > 1 {
		mode, from = []queen.SubscriptionMode{"", queen.SubscriptionModeNew, queen.SubscriptionModeAll, ""}[s.rnd.IntN(4)], ""
		if mode == "" && s.from != "" && s.rnd.IntN(2) == 0 {
			from = s.from
		}
	}
	if mode != "" {
		b = b.SubscriptionMode(mode)
	}
	if from != "" {
		b = b.SubscriptionFrom(from)
	}
	return b
}

func (s *noSkip) step(what string) { s.steps = append(s.steps, what) }

func (s *noSkip) push(n int) {
	part := fmt.Sprintf("p%d", s.rnd.IntN(3))
	var ids []string
	var items []any
	for range n {
		s.seq++
		id := fmt.Sprintf("m%03d", s.seq)
		ids = append(ids, id)
		items = append(items, queen.Item{Payload: map[string]any{"id": id}, TransactionID: id})
	}
	if _, err := s.c.Queue(noSkipQueue).Partition(part).Push(items...).Execute(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	for _, id := range ids {
		s.owed[id] = true
		s.at[id] = s.clk.Now()
		s.part[id] = part
	}
	s.step(fmt.Sprintf("push %v to %s", ids, part))
}

// pop takes up to batch messages and settles them at random: each
// partition's messages in order, completed until one is failed or retried;
// the rest of that partition is given back (retry) or left to its lease.
func (s *noSkip) pop(batch int) {
	ctx := context.Background()
	msgs, err := s.builder().Batch(batch).Partitions(1 + s.rnd.IntN(3)).Wait(false).Pop(ctx)
	if err != nil {
		s.t.Fatalf("pop: %v", err)
	}
	var acks []queen.Settlement
	broken := map[string]string{} // partition -> what happened to its rest
	var got []string
	for _, m := range msgs {
		got = append(got, m.TransactionID)
		switch broken[m.PartitionID] {
		case "retry":
			acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusRetry})
			continue
		case "leave":
			continue
		}
		switch r := s.rnd.IntN(10); {
		case r < 6:
			acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusCompleted})
		case r < 9:
			st := queen.StatusFailed
			if r == 8 {
				st = queen.StatusRetry
			}
			acks = append(acks, queen.Settlement{Message: m, Status: st, Error: "boom"})
			broken[m.PartitionID] = []string{"retry", "leave"}[s.rnd.IntN(2)]
		default:
			broken[m.PartitionID] = "leave" // this one and the rest: left to the lease
		}
	}
	s.step(fmt.Sprintf("pop %d: %v", batch, got))
	s.settle(acks)
}

func (s *noSkip) settle(acks []queen.Settlement) {
	if len(acks) == 0 {
		return
	}
	res, err := s.c.SettleBatch(context.Background(), acks, queen.AckOptions{ConsumerGroup: noSkipGroup})
	if len(res) != len(acks) {
		s.t.Fatalf("settle: %d results for %d acks (%v)", len(res), len(acks), err)
	}
	var said []string
	for i, r := range res {
		said = append(said, fmt.Sprintf("%s=%s:%v", acks[i].Message.TransactionID, acks[i].Status, r.Success))
	}
	s.step(fmt.Sprintf("ack %v", said))
	for i, r := range res {
		if r.Success && acks[i].Status == queen.StatusCompleted {
			s.owed[acks[i].Message.TransactionID] = false
		}
		if r.DLQ {
			s.t.Fatalf("%s dead-lettered (retry limit 1000)", acks[i].Message.TransactionID)
		}
	}
}

// seekBack moves the group to the time of a message pushed earlier: every
// message pushed at or after that time is owed again, and none before it
// (a seek forward skips them on purpose). On 0.15.1 a partition with
// nothing before that time has its cursor back at its start, where the
// group's stored start time applies again (002d_pop_unified_v4.sql): there
// a group started from a time is owed only what is at or after that time.
func (s *noSkip) seekBack() {
	if len(s.at) == 0 {
		return
	}
	ids := make([]string, 0, len(s.at))
	for id := range s.at {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	to := s.at[ids[s.rnd.IntN(len(ids))]]
	// CreateIfMissing: a group that had nothing delivered yet has no
	// position a 2.x broker lists (it writes a cursor row at the first
	// delivery), although it is registered.
	if _, err := s.c.Admin().SeekConsumerGroup(context.Background(), noSkipGroup, noSkipQueue,
		queen.SeekConsumerGroupOptions{Timestamp: to.Format(time.RFC3339Nano), CreateIfMissing: true}); err != nil {
		s.t.Fatalf("seek: %v", err)
	}
	var start time.Time
	if s.from != "" && s.prof == queentest.Profile015 {
		start, _ = time.Parse(time.RFC3339Nano, s.from)
	}
	earlier := map[string]bool{} // partition -> it has a message before the seek's time
	for id, at := range s.at {
		if at.Before(to) {
			earlier[s.part[id]] = true
		}
	}
	for id, at := range s.at {
		s.owed[id] = !at.Before(to) && (earlier[s.part[id]] || !at.Before(start))
	}
	s.step("seek to " + to.Format(time.TimeOnly))
}

// drain pops and completes everything, letting leases run out, until the
// broker has nothing more for the group.
func (s *noSkip) drain() {
	s.step("drain")
	empty := 0
	for range 200 {
		msgs, err := s.builder().Batch(50).Partitions(3).Wait(false).Pop(context.Background())
		if err != nil {
			s.t.Fatalf("drain pop: %v", err)
		}
		if len(msgs) == 0 {
			if empty++; empty == 3 {
				return
			}
			s.clk.Advance(noSkipLease + time.Second)
			continue
		}
		empty = 0
		acks := make([]queen.Settlement, len(msgs))
		for i, m := range msgs {
			acks[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
		}
		s.settle(acks)
	}
	s.t.Fatal("drain did not end")
}
