package queentest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The nodes share one broker state: pushed through one, popped through
// another, acked through a third; each counts its own requests.
func TestClusterSharesOneState(t *testing.T) {
	c := StartCluster(t, 3)
	require.Len(t, c.URLs(), 3)
	a, b, d := newHC(t, c.Node(0)), newHC(t, c.Node(1)), newHC(t, c.Node(2))
	a.pushN("orders", "p1", 3)
	got := b.popQ("orders", vals("consumerGroup", "billing", "subscriptionMode", "all", "batch", "10", "wait", "false"))
	assert.Equal(t, []int{0, 1, 2}, ns(t, got.Messages))
	for _, r := range d.ackAll(got, "billing") {
		assert.True(t, r.Success, "ack through another node")
	}
	b.popEmpty("orders", vals("consumerGroup", "billing", "subscriptionMode", "all", "wait", "false"))
	for i, want := range []map[Route]int{{RoutePush: 1}, {RoutePop: 2}, {RouteAckBatch: 1}} {
		for r, n := range want {
			assert.Equal(t, n, c.Node(i).Requests(r), "node %d, %s", i, r)
		}
	}
	assert.Equal(t, 2, c.Requests(RoutePop))
	assert.Zero(t, c.Node(0).Requests(RoutePop))
}

// Faults are per node.
func TestClusterFaultsPerNode(t *testing.T) {
	c := StartCluster(t, 2)
	c.Node(0).FailNext(RoutePush, 1, http.StatusServiceUnavailable, 0)
	st, _, _ := newHC(t, c.Node(1)).do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": item{}}}})
	assert.Equal(t, http.StatusCreated, st, "node 1 has no fault")
	st, _, _ = newHC(t, c.Node(0)).do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": item{}}}})
	assert.Equal(t, http.StatusServiceUnavailable, st)
}

// A stopped node refuses connections and ends its parked pops; the others
// serve the same state; Resume brings it back with what happened meanwhile.
func TestClusterNodeStopAndResume(t *testing.T) {
	c := StartCluster(t, 2)
	down, up := c.Node(0), newHC(t, c.Node(1))

	parked := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET",
			down.URL+"/api/v1/pop/queue/q?consumerGroup=g&wait=true&timeout=30000", nil)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		parked <- err
	}()
	require.Eventually(t, func() bool { return down.Requests(RoutePop) == 1 }, 5*time.Second, 5*time.Millisecond)
	down.Stop()
	select {
	case err := <-parked:
		assert.Error(t, err, "the parked pop's connection was closed")
	case <-time.After(5 * time.Second):
		t.Fatal("Stop left a parked pop running")
	}
	_, err := http.Get(down.URL + "/health")
	require.Error(t, err, "a stopped node refuses connections")
	down.Stop() // again: nothing

	up.pushN("q", "", 2)
	require.NoError(t, down.Resume())
	require.NoError(t, down.Resume()) // again: nothing
	got := newHC(t, down).popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10", "wait", "false"))
	assert.Equal(t, []int{0, 1}, ns(t, got.Messages), "back with the state the other node changed")

	down.Close()
	assert.Error(t, down.Resume(), "a closed node does not resume")
}

func TestClusterRefusesBadSizes(t *testing.T) {
	_, err := ListenCluster(0)
	assert.Error(t, err)
	_, err = ListenCluster(2, WithAddr("127.0.0.1:1"))
	assert.ErrorContains(t, err, "WithAddr")
}

// On 2.x the consume engine's memory is the cluster's: a node's Restart
// (a leader change) drops the start a pinned pop through another node
// gave; Stop and Resume (a follower lost) keep it.
func TestClusterRestartIsALeaderChange2x(t *testing.T) {
	clock := NewFakeClock(t0)
	c := StartCluster(t, 2, WithClock(clock))
	a, b := newHC(t, c.Node(0)), newHC(t, c.Node(1))
	a.pushN("q", "p", 1) // before the groups' first pops
	clock.Advance(time.Second)
	for _, g := range []string{"kept", "lost"} {
		st, _ := a.pop("/api/v1/pop/queue/q/partition/p", vals("consumerGroup", g, "subscriptionMode", "new"))
		require.Equal(t, http.StatusNoContent, st)
	}
	clock.Advance(time.Second)
	a.pushN("q", "p", 1) // after them: for both groups

	c.Node(0).Stop()
	require.NoError(t, c.Node(0).Resume())
	_, p := b.pop("/api/v1/pop/queue/q/partition/p", vals("consumerGroup", "kept", "subscriptionMode", "new"))
	require.NotNil(t, p, "a node's Stop keeps the engine's memory")
	assert.Equal(t, []int{0}, ns(t, p.Messages))

	c.Node(0).Restart(0)
	waitListening(t, c.Node(0))
	st, _ := b.pop("/api/v1/pop/queue/q/partition/p", vals("consumerGroup", "lost", "subscriptionMode", "new"))
	assert.Equal(t, http.StatusNoContent, st, "a node's Restart drops the start the other node's pop gave")
}
