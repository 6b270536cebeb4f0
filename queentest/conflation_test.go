package queentest

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConflationRefusals(t *testing.T) {
	h := newHC(t, Start(t))
	st, _, raw := h.do("GET", "/api/v1/pop/queue/q?conflation=true", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "conflation requires consumerGroup")
	st, _, raw = h.do("GET", "/api/v1/pop/queue/q?conflation=true&consumerGroup=g&autoAck=true", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "cannot be combined with commitOnDelivery (autoAck)")
	st, _, _ = h.do("GET", "/api/v1/pop/queue/q/partition/p?conflation=true", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	// A refused request registered nothing: the group can still choose.
	st, p := h.pop("/api/v1/pop/queue/q", vals("consumerGroup", "g", "conflation", "true"))
	assert.Equal(t, http.StatusOK, st)
	assert.Nil(t, p.ConflationConflict)
}

func TestConflationNewestPerPartitionAndSpanRetiredOnAck(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("prices", "EURUSD", 5)
	h.pushN("prices", "GBPUSD", 3)
	g := vals("consumerGroup", "dash", "subscriptionMode", "all", "conflation", "true")

	p := h.popQ("prices", g)
	require.NotNil(t, p.Conflation)
	assert.True(t, *p.Conflation)
	require.Len(t, p.Messages, 2, "one message per partition (partitions defaults to batch)")
	got := map[string]int64{}
	for _, m := range p.Messages {
		got[m.Partition] = m.Offset
	}
	assert.Equal(t, map[string]int64{"EURUSD": 4, "GBPUSD": 2}, got, "the newest of each")

	// A clean ack retires everything below it.
	for _, a := range h.ackAll(p, "dash") {
		assert.True(t, a.Success)
		assert.True(t, a.LeaseReleased)
	}
	// Empty but conflating: 200 with the echo, not 204.
	st, empty := h.pop("/api/v1/pop/queue/prices", g)
	require.Equal(t, http.StatusOK, st)
	assert.Empty(t, empty.Messages)
	assert.True(t, *empty.Conflation)

	h.pushN("prices", "EURUSD", 2)
	p = h.popQ("prices", g)
	require.Len(t, p.Messages, 1)
	assert.EqualValues(t, 6, p.Messages[0].Offset)
}

func TestConflationPolicyIsFixedByTheFirstPop(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 3)
	// Registered without conflation...
	p := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10"))
	assert.Nil(t, p.Conflation)
	h.ackAll(p, "g")
	h.pushN("q", "p", 3)
	// ...a later conflating request does not change it, and says so.
	p = h.popQ("q", vals("consumerGroup", "g", "conflation", "true", "batch", "10"))
	require.NotNil(t, p.ConflationConflict)
	assert.True(t, *p.ConflationConflict)
	assert.Nil(t, p.Conflation)
	assert.Len(t, p.Messages, 3, "the stored policy (no conflation) wins")

	// And the other way round.
	h.pushN("c", "p", 3)
	p = h.popQ("c", vals("consumerGroup", "g2", "subscriptionMode", "all", "conflation", "true"))
	h.ackAll(p, "g2")
	h.pushN("c", "p", 3)
	p = h.popQ("c", vals("consumerGroup", "g2", "conflation", "false", "batch", "10"))
	assert.True(t, *p.ConflationConflict)
	assert.True(t, *p.Conflation)
	assert.Len(t, p.Messages, 1)
}

func TestConflationAtMost64PerPop(t *testing.T) {
	h := newHC(t, Start(t))
	for i := 0; i < 70; i++ {
		h.pushN("q", "p"+strconv.Itoa(i), 2)
	}
	p := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "conflation", "true", "batch", "500"))
	assert.Len(t, p.Messages, 64)
	assert.Equal(t, 64, p.PartitionsClaimed)
	h.ackAll(p, "g")
	p = h.popQ("q", vals("consumerGroup", "g", "conflation", "true", "partitions", "1"))
	assert.Len(t, p.Messages, 1, "partitions pinned to 1: one message")
}

func TestCommitOnDeliveryMovesTheCursorAtOnce(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 5)
	g := vals("consumerGroup", "dash", "subscriptionMode", "all", "autoAck", "true", "batch", "2")
	p := h.popQ("q", g)
	assert.Equal(t, "", p.LeaseID)
	for _, m := range p.Messages {
		assert.Equal(t, "", m.LeaseID)
	}
	assert.Equal(t, 0, s.LeasedCount("q", "dash"), "no lease")
	// Nothing to ack: the next pop continues.
	p = h.popQ("q", g)
	assert.Equal(t, []int{2, 3}, ns(t, p.Messages))
	p = h.popQ("q", g)
	assert.Equal(t, []int{4}, ns(t, p.Messages))
	h.popEmpty("q", g)
	// Queue mode too.
	h.pushN("r", "p", 2)
	p = h.popQ("r", vals("autoAck", "true", "batch", "1"))
	assert.Equal(t, []int{0}, ns(t, p.Messages))
	p = h.popQ("r", vals("autoAck", "true", "batch", "1"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
}
