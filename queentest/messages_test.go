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
