package queentest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subRows counts the 0.15.1 subscription rows of group.
func subRows(h *h15, group string) int {
	h.srv.b.mu.Lock()
	defer h.srv.b.mu.Unlock()
	n := 0
	for k := range h.srv.b.subs {
		if k.group == group {
			n++
		}
	}
	return n
}

// The 0.15.1 consumer-group delete answers as delete_consumer_group_v1
// (and its queue twin) do, as seen on a real 0.15.1 broker.
func TestBroker015DeleteGroup(t *testing.T) {
	h := start015(t)
	h.push15("dq1", "p1", 1)
	h.push15("dq1", "p2", 2)
	h.push15("dq2", "p1", 3)
	for _, q := range []string{"dq1", "dq1", "dq2"} {
		p := h.pop15(q, vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10"))
		require.Len(t, p.Messages, 1)
	}
	h.pop15("dq1", vals("consumerGroup", "g2", "subscriptionMode", "new", "batch", "10"))
	h.pop15("dq2", vals("consumerGroup", "g2", "subscriptionMode", "new", "batch", "10"))
	require.Equal(t, 2, subRows(h, "g2"))

	// The queue form: queueName is added; a deleteMetadata other than
	// "true" or "1" means false.
	r := h.obj("DELETE", "/api/v1/consumer-groups/g/queues/dq1?deleteMetadata=yes", nil)
	assert.Equal(t, []string{"consumerGroup", "deletedPartitions", "metadataDeleted", "queueName", "success"}, keys(r))
	assert.Equal(t, map[string]any{"success": true, "consumerGroup": "g", "queueName": "dq1",
		"deletedPartitions": float64(2), "metadataDeleted": false}, r)
	r = h.obj("DELETE", "/api/v1/consumer-groups/g2/queues/dq1?deleteMetadata=TRUE", nil)
	assert.Equal(t, false, r["metadataDeleted"])
	assert.Equal(t, float64(2), r["deletedPartitions"], "a pop of mode new leaves a cursor on each partition it looked at")
	require.Equal(t, 2, subRows(h, "g2"), "deleteMetadata=TRUE keeps the rows")
	r = h.obj("DELETE", "/api/v1/consumer-groups/g2/queues/dq1?deleteMetadata=1", nil)
	assert.Equal(t, true, r["metadataDeleted"])
	require.Equal(t, 1, subRows(h, "g2"), "the queue form deletes that queue's rows only")

	// The group-wide form: no queueName, no queues list; absent
	// deleteMetadata means true.
	r = h.obj("DELETE", "/api/v1/consumer-groups/g", nil)
	assert.Equal(t, map[string]any{"success": true, "consumerGroup": "g", "deletedPartitions": float64(1),
		"metadataDeleted": true}, r)
	r = h.obj("DELETE", "/api/v1/consumer-groups/g2?deleteMetadata=false", nil)
	assert.Equal(t, false, r["metadataDeleted"])
	assert.Equal(t, float64(1), r["deletedPartitions"])
	require.Equal(t, 1, subRows(h, "g2"))
	h.obj("DELETE", "/api/v1/consumer-groups/g2", nil)
	require.Equal(t, 0, subRows(h, "g2"))

	// An unknown group or queue: 200, nothing deleted.
	r = h.obj("DELETE", "/api/v1/consumer-groups/ghost/queues/nowhere", nil)
	assert.Equal(t, map[string]any{"success": true, "consumerGroup": "ghost", "queueName": "nowhere",
		"deletedPartitions": float64(0), "metadataDeleted": true}, r)
	r = h.obj("DELETE", "/api/v1/consumer-groups/ghost?deleteMetadata=false", nil)
	assert.Equal(t, map[string]any{"success": true, "consumerGroup": "ghost", "deletedPartitions": float64(0),
		"metadataDeleted": false}, r)
}
