package queentest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoCursorRowOnANeverPoppedPartition: a group's registration writes no
// cursor rows; a partition gets one when the group is first delivered
// something there (or seeks it). Without one, a lease-less ack is refused
// as stale (a leased one as an invalid lease), and the group views and lag
// figures leave the partition out (upstream rsm/consume/ack.rs ack_target
// has_row, rsm/consume/pop.rs touch, phase2/reads.rs cursor_lags).
func TestNoCursorRowOnANeverPoppedPartition(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "a", 2)
	clock.Advance(time.Second)
	h.pushN("q", "b", 2)
	p := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10"))
	require.Equal(t, "a", p.Partition, "one partition a pop, the oldest first")
	h.ackAll(p, "g")

	// b's messages, through queue mode (another cursor).
	_, qm := h.pop("/api/v1/pop/queue/q/partition/b", nil)
	require.NotNil(t, qm)
	b0 := qm.Messages[0]
	leaseless := item{"transactionId": b0.TransactionID, "partitionId": b0.PartitionID, "consumerGroup": "g"}
	out := h.ack("/api/v1/ack", leaseless)
	assert.False(t, out[0].Success, "the group has no cursor on b")
	assert.Equal(t, errStaleAck, *out[0].Error)
	leased := item{"transactionId": b0.TransactionID, "partitionId": b0.PartitionID, "consumerGroup": "g", "leaseId": qm.LeaseID}
	out = h.ack("/api/v1/ack", leased)
	assert.False(t, out[0].Success)
	assert.Equal(t, errInvalidLease, *out[0].Error)

	var detail map[string]struct {
		Partitions []struct {
			Partition string `json:"partition"`
		} `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusOK, &detail)
	require.Len(t, detail["q"].Partitions, 1)
	assert.Equal(t, "a", detail["q"].Partitions[0].Partition)
	var rows []tGroupRow
	h.doJSON("GET", "/api/v1/consumer-groups", nil, http.StatusOK, &rows)
	for _, r := range rows {
		if r.Name == "g" {
			assert.Equal(t, 1, r.Members)
			assert.Equal(t, 0, r.TotalLag, "b's two messages are nobody's lag yet")
		}
	}
	clock.Advance(2 * time.Hour)
	var lagging []map[string]any
	h.doJSON("GET", "/api/v1/consumer-groups/lagging?minLagSeconds=60", nil, http.StatusOK, &lagging)
	for _, l := range lagging {
		assert.NotEqual(t, "g", l["consumer_group"], "g lags nowhere it has a row")
	}

	// A seek writes a row on every partition of the queue, b included.
	h.doJSON("POST", "/api/v1/consumer-groups/g/queues/q/seek", item{"timestamp": "2000-01-01T00:00:00Z"}, http.StatusOK, nil)
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusOK, &detail)
	assert.Len(t, detail["q"].Partitions, 2)
	out = h.ack("/api/v1/ack", leaseless)
	assert.True(t, out[0].Success, "b has a row now: %+v", out[0])
}

// TestRepeatedCompletedAckIsANoopWhileRecognised: a repeated completed ack
// of a consumed message is a no-op while the broker recognises it: while
// its transactionId row lives (the dedup window, at least 15 minutes) or
// while it is among the last 65,536 messages the group consumed there;
// past both it is stale (upstream CHANGELOG 2.2.0).
func TestRepeatedCompletedAckIsANoopWhileRecognised(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	assert.EqualValues(t, 65536, s.b.recent)
	s.b.recent = 8 // stands for the broker's 65,536
	h := newHC(t, s)
	configure(h, "q", item{"dedupWindowSeconds": 60})
	h.pushN("q", "p", 1)
	p := h.popQ("q", nil)
	h.ackAll(p, "")
	again := item{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID}
	out := h.ack("/api/v1/ack", again)
	assert.True(t, out[0].Success && out[0].Noop)
	clock.Advance(16 * time.Minute) // past the row window (60 s, raised to 15 min)
	out = h.ack("/api/v1/ack", again)
	assert.True(t, out[0].Success && out[0].Noop, "still among the last 65,536 consumed")

	h.pushN("q", "p", 7)
	h.doJSON("POST", "/api/v1/consumer-groups/__QUEUE_MODE__/queues/q/seek", item{"toEnd": true}, http.StatusOK, nil)
	out = h.ack("/api/v1/ack", again)
	assert.True(t, out[0].Success && out[0].Noop, "7 consumed since")
	h.pushN("q", "p", 1)
	h.doJSON("POST", "/api/v1/consumer-groups/__QUEUE_MODE__/queues/q/seek", item{"toEnd": true}, http.StatusOK, nil)
	out = h.ack("/api/v1/ack", again)
	assert.False(t, out[0].Success, "65,536 consumed since, and past its row window")
	assert.Equal(t, errStaleAck, *out[0].Error)
}
