package queen_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
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
		_, err := f.c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "g"})
		require.NoError(f.t, err)
	}
	return ids
}
