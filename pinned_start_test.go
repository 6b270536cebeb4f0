package queen_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

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
// read through a pinned pop shows its fixed start time there instead.
func TestPinnedStartLeavesQueueWideGroups2x(t *testing.T) {
	f := newPinnedFixture(t, queentest.Profile2x)
	f.push("p1", "a-old")
	f.clk.Advance(time.Minute)
	g := func(name string) *queen.QueueBuilder { return f.c.Queue(f.queue).Group(name) }
	assert.Empty(t, f.popAck(g("wide").Partitions(4)))
	assert.Empty(t, f.popAck(g("wide").Partition("p1")))
	assert.Empty(t, f.popAck(g("g").Partition("p1")))
	assert.Empty(t, f.popAck(g("g").Partitions(4)))
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
