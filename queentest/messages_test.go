package queentest

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeleteMessageRemovesDeadLetters: on 2.x, DELETE
// /api/v1/messages/{pid}/{txn} deletes the message's dead-letter rows, of
// every group, and leaves the message in its partition's log (upstream
// phase2/admin.rs api_message_delete); without a row it is a 404.
func TestDeleteMessageRemovesDeadLetters(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "p", 2)
	deadLetter(h, "q", "p", "g1", clock)
	deadLetter(h, "q", "p", "g2", clock)
	var list tDLQ
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	require.Len(t, list.Messages, 2)
	pid, txn := list.Messages[0].PartitionID, list.Messages[0].TransactionID
	require.Equal(t, txn, list.Messages[1].TransactionID)

	var out map[string]any
	h.doJSON("DELETE", messagePath(pid, txn), nil, http.StatusOK, &out)
	assert.Equal(t, map[string]any{"success": true, "partitionId": pid, "transactionId": txn, "deleted": 2.0}, out)
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	assert.Empty(t, list.Messages)

	// The message is still in the log: a new group reads it.
	p := h.popQ("q", vals("consumerGroup", "g3", "subscriptionMode", "all", "batch", "10"))
	assert.Equal(t, []int{0, 1}, ns(t, p.Messages))

	// No row left, or no such partition: 404.
	want404 := func(pidText string) {
		t.Helper()
		var miss map[string]any
		h.doJSON("DELETE", messagePath(pidText, txn), nil, http.StatusNotFound, &miss)
		assert.Equal(t, map[string]any{"success": false, "partitionId": pidText, "transactionId": txn,
			"error": "Message not found", "message": "No dead-letter row for this address. Live messages live in immutable segments and cannot be deleted"}, miss)
	}
	want404(pid)
	n, err := strconv.Atoi(pid)
	require.NoError(t, err)
	want404(strconv.Itoa(n + 1))
	want404("not-a-partition")
}

// TestMessageView2x: GET /api/v1/messages/{pid}/{txn} on 2.x is the
// message with its status against the partition's cursor rows, the
// queue's options and the cursors (upstream phase2/reads.rs api_message).
func TestMessageView2x(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "mv", item{"retryLimit": 4, "namespace": "shop"})
	h.pushN("mv", "p", 2)
	p := h.popQ("mv", vals("consumerGroup", "g1", "subscriptionMode", "all", "batch", "1"))
	m := p.Messages[0]
	path := messagePath(m.PartitionID, m.TransactionID)

	var v map[string]any
	h.doJSON("GET", path, nil, http.StatusOK, &v)
	assert.Equal(t, m.ID, v["id"])
	assert.Equal(t, m.TransactionID, v["transactionId"])
	assert.Equal(t, map[string]any{"n": 0.0}, v["data"])
	assert.Equal(t, v["data"], v["payload"])
	assert.Regexp(t, anyUUID, v["partitionId"], "the partition's UUID, not its pid")
	assert.Equal(t, "mv/p", v["queuePath"])
	assert.Equal(t, "shop", v["namespace"])
	assert.Nil(t, v["task"])
	assert.Equal(t, "processing", v["status"])
	assert.Nil(t, v["errorMessage"])
	assert.EqualValues(t, 0, v["retryCount"])
	assert.EqualValues(t, 4, v["queueConfig"].(map[string]any)["retryLimit"])
	assert.Equal(t, map[string]any{"hasQueueMode": false, "busGroupsCount": 1.0, "type": "bus"}, v["mode"])
	require.Len(t, v["consumerGroups"], 1)
	assert.Equal(t, "g1", v["consumerGroups"].([]any)[0].(map[string]any)["name"])

	h.ackAll(p, "g1")
	h.doJSON("GET", path, nil, http.StatusOK, &v)
	assert.Equal(t, "completed", v["status"])

	// Another group dead-letters it: dead_letter wins.
	q := h.popQ("mv", vals("consumerGroup", "g2", "subscriptionMode", "all", "batch", "1"))
	out := h.ack("/api/v1/ack", item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": q.LeaseID,
		"consumerGroup": "g2", "status": "dlq", "error": "bad"})
	require.True(t, out[0].DLQ)
	h.doJSON("GET", path, nil, http.StatusOK, &v)
	assert.Equal(t, "dead_letter", v["status"])
	assert.Equal(t, "bad", v["errorMessage"])

	var miss map[string]any
	h.doJSON("GET", messagePath(m.PartitionID, "nope"), nil, http.StatusNotFound, &miss)
	assert.Equal(t, map[string]any{"error": "Message not found"}, miss)
}
