package queen

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/queentest"
)

// clusterClient returns a client of every node of c, with opts.
func clusterClient(t *testing.T, c *queentest.Cluster, opts ...Option) *Client {
	t.Helper()
	urls := c.URLs()
	cl, err := New(urls[0], append([]Option{WithURLs(urls[1:]...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	return cl
}

// servedBy returns, for each node, how many requests of route r it
// received since the last reset.
func servedBy(c *queentest.Cluster, r queentest.Route) []int {
	out := make([]int, len(c.Nodes()))
	for i, s := range c.Nodes() {
		out[i] = s.Requests(r)
	}
	return out
}

func resetCounters(c *queentest.Cluster) {
	for _, s := range c.Nodes() {
		s.ResetCounters()
	}
}

// only returns the one node with a nonzero count, or -1.
func only(counts []int) int {
	at := -1
	for i, n := range counts {
		if n > 0 {
			if at >= 0 {
				return -1
			}
			at = i
		}
	}
	return at
}

// roundTrip pushes 3 messages to queue, pops them as group g and acks
// them in one batch, and returns the node that served the pops and acks
// (-1 when they did not meet on one node).
func roundTrip(t *testing.T, cl *Client, c *queentest.Cluster, queue string) int {
	t.Helper()
	ctx := context.Background()
	_, err := cl.Queue(queue).Push(1, 2, 3).Execute(ctx)
	require.NoError(t, err)
	resetCounters(c)
	msgs, err := cl.Queue(queue).Group("g").SubscriptionMode(SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 3, "nothing lost")
	acks := make([]Settlement, len(msgs))
	for i, m := range msgs {
		acks[i] = Settlement{Message: m, Status: StatusCompleted}
	}
	_, err = cl.SettleBatch(ctx, acks, AckOptions{})
	require.NoError(t, err)
	pop, ack := only(servedBy(c, queentest.RoutePop)), only(servedBy(c, queentest.RouteAckBatch))
	if pop != ack {
		return -1
	}
	return pop
}

// ownedQueues returns, for each node of c, perNode queue names (q0, q1,
// ...) whose pops and acks as group g the node owns on the Affinity ring.
func ownedQueues(t *testing.T, c *queentest.Cluster, perNode int) [][]string {
	t.Helper()
	out := make([][]string, len(c.Nodes()))
	found := 0
	for k := 0; found < len(out)*perNode; k++ {
		require.Less(t, k, 1000, "no %d queues per node among q0..q999: %v", perNode, out)
		q := fmt.Sprintf("q%d", k)
		i, err := transport.Owner(c.URLs(), popKey(q, "", "g"))
		require.NoError(t, err)
		if len(out[i]) < perNode {
			out[i] = append(out[i], q)
			found++
		}
	}
	return out
}

// Affinity, the default: one queue and group's pops and acks meet on the
// node that owns their key, every node owning some, and a stopped node's
// queues alone move (to a node that serves both their pops and acks).
func TestAffinityMeetsAndSpreads(t *testing.T) {
	c := queentest.StartCluster(t, 3)
	cl := clusterClient(t, c)
	owned := ownedQueues(t, c, 4)
	for node, qs := range owned {
		for _, q := range qs {
			assert.Equal(t, node, roundTrip(t, cl, c, q), "queue %s: pops and acks on its owner", q)
			assert.Equal(t, node, roundTrip(t, cl, c, q), "queue %s: the same node again", q)
		}
	}

	c.Node(1).Stop()
	for node, qs := range owned {
		for _, q := range qs {
			got := roundTrip(t, cl, c, q)
			require.GreaterOrEqual(t, got, 0, "queue %s: pops and acks on one node", q)
			if node != 1 {
				assert.Equal(t, node, got, "queue %s of a running node stays", q)
			} else {
				assert.NotEqual(t, 1, got, "queue %s moved off the stopped node", q)
			}
		}
	}
}

func TestOtherBalancing(t *testing.T) {
	c := queentest.StartCluster(t, 3)
	ctx := context.Background()

	inOrder := clusterClient(t, c, WithLoadBalancing(InOrder))
	for q := range 6 {
		assert.Equal(t, 0, roundTrip(t, inOrder, c, fmt.Sprintf("o%d", q)), "in order: the first URL")
	}

	rr := clusterClient(t, c, WithLoadBalancing(RoundRobin))
	_, err := rr.Queue("rr").Push(1, 2, 3, 4, 5, 6).Execute(ctx)
	require.NoError(t, err)
	resetCounters(c)
	for range 6 {
		_, err := rr.Queue("rr").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, []int{2, 2, 2}, servedBy(c, queentest.RoutePop), "round robin: each URL in turn")

	for _, b := range []LoadBalancing{0, InOrder + 1} {
		_, err := New(c.URLs()[0], WithLoadBalancing(b))
		assert.True(t, errors.Is(err, ErrInvalidOption), "%s: %v", b, err)
	}
	assert.Equal(t, "affinity round-robin in-order", fmt.Sprint(Affinity, RoundRobin, InOrder))
}

// The keys: a pop's acks and renewals carry its key; a message the
// client did not pop, that of a queue-wide pop of its queue and group.
func TestRoutingKeys(t *testing.T) {
	assert.Equal(t, "orders:*:billing", popKey("orders", "", "billing"))
	assert.Equal(t, "orders:p1:__QUEUE_MODE__", popKey("orders", "p1", ""))
	pinned := &Message{Queue: "orders", Partition: "p1", ConsumerGroup: "billing", route: "orders:p1:billing"}
	assert.Equal(t, "orders:p1:billing", ackKey(pinned, ""))
	assert.Equal(t, "orders:p1:billing", ackKey(pinned, "billing"))
	assert.Equal(t, "orders:*:audit", ackKey(pinned, "audit"), "another group: its own key")
	built := &Message{Queue: "orders", Partition: "p1", ConsumerGroup: "__QUEUE_MODE__"}
	assert.Equal(t, "orders:*:__QUEUE_MODE__", ackKey(built, ""))
	assert.Equal(t, "orders:p1", pushKey("orders", "p1"))
}

// renewals passes each renewal to its channel, dropping those the test
// does not read.
type renewals chan RenewEvent

func (ch renewals) OnRenew(_ context.Context, e RenewEvent) {
	select {
	case ch <- e:
	default:
	}
}

// A loop pinned to a partition, and Renew of a message it popped, send
// their pops, acks and renewals to the one node that owns the pinned key,
// not to the owner of the queue-wide key.
func TestPinnedRenewalsMeetPops(t *testing.T) {
	c := queentest.StartCluster(t, 3)
	seen := make(renewals, 16)
	cl := clusterClient(t, c, WithHooks(seen))
	cl.minRenewMs = 1 // renew every few milliseconds
	urls := c.URLs()
	var queue string
	var node int
	for k := 0; queue == ""; k++ {
		require.Less(t, k, 1000, "no queue among q0..q999 whose pinned and queue-wide keys part")
		q := fmt.Sprintf("q%d", k)
		pinned, err := transport.Owner(urls, popKey(q, "p", "g"))
		require.NoError(t, err)
		wide, err := transport.Owner(urls, popKey(q, "", "g"))
		require.NoError(t, err)
		if pinned != wide {
			queue, node = q, pinned
		}
	}
	ctx := context.Background()
	_, err := cl.Queue(queue).Partition("p").Push(1, 2).Execute(ctx)
	require.NoError(t, err)
	resetCounters(c)

	var handled int
	loop := cl.Queue(queue).Partition("p").Group("g").SubscriptionMode(SubscriptionModeAll).
		Batch(1).Each().Limit(2).RenewLease(true, 5).
		Consume(ctx, func(_ context.Context, m *Message) error {
			handled++
			for e := range seen { // a renewal of m's lease while handling it
				if e.LeaseID == m.LeaseID {
					assert.NoError(t, e.Err, "renewal of %s", m.LeaseID)
					return nil
				}
			}
			return nil
		})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- loop.Execute(lctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // a hang guard, no measurement
		cancel()
		<-done
		t.Fatal("Execute did not return within 30 s")
	}
	require.NoError(t, err)
	require.Equal(t, 2, handled)

	_, err = cl.Queue(queue).Partition("p").Push(3).Execute(ctx)
	require.NoError(t, err)
	msgs, err := cl.Queue(queue).Partition("p").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, err = cl.Renew(ctx, msgs[0])
	require.NoError(t, err)
	_, err = cl.Ack(ctx, msgs[0], true, AckOptions{})
	require.NoError(t, err)

	acks := servedBy(c, queentest.RouteAck)
	for i, n := range servedBy(c, queentest.RouteAckBatch) {
		acks[i] += n
	}
	for r, counts := range map[string][]int{
		"pops": servedBy(c, queentest.RoutePop), "renewals": servedBy(c, queentest.RouteRenew), "acks": acks,
	} {
		assert.Equal(t, node, only(counts), "%s per node %v: all on node %d", r, counts, node)
	}
}
