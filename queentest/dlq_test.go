package queentest

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tDLQ struct {
	Messages []struct {
		ID            string `json:"id"`
		Queue         string `json:"queue"`
		Partition     string `json:"partition"`
		PartitionID   string `json:"partitionId"`
		ConsumerGroup string `json:"consumerGroup"`
		Offset        int64  `json:"offset"`
		MessageID     string `json:"messageId"`
		TransactionID string `json:"transactionId"`
		Data          any    `json:"data"`
		Payload       any    `json:"payload"`
		ErrorMessage  string `json:"errorMessage"`
		RetryCount    int    `json:"retryCount"`
		FailedAt      string `json:"failedAt"`
		CreatedAt     string `json:"createdAt"`
	} `json:"messages"`
	Total      int `json:"total"`
	Pagination struct {
		Limit  int `json:"limit"`
		Offset int `json:"offset"`
	} `json:"pagination"`
}

// deadLetter pops one message of queue/partition for group and dead-letters it.
func deadLetter(h *hc, queue, part, group string, at *FakeClock) {
	h.t.Helper()
	q := vals("batch", "1")
	if group != "" {
		q.Set("consumerGroup", group)
		q.Set("subscriptionMode", "all")
	}
	_, p := h.pop("/api/v1/pop/queue/"+queue+"/partition/"+part, q)
	require.NotNil(h.t, p)
	require.True(h.t, h.ackMsg(p.Messages[0], "dlq", group).DLQ)
	at.Advance(time.Second)
}

func TestDLQListFiltersAndPages(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "a", 3)
	h.pushN("q", "b", 1)
	h.pushN("r", "a", 1)
	deadLetter(h, "q", "a", "", clock)  // t0
	deadLetter(h, "q", "a", "", clock)  // t0+1s
	deadLetter(h, "q", "b", "g", clock) // t0+2s
	deadLetter(h, "r", "a", "", clock)  // t0+3s

	var all tDLQ
	h.doJSON("GET", "/api/v1/dlq", nil, http.StatusOK, &all)
	assert.Equal(t, 4, all.Total)
	assert.Equal(t, 100, all.Pagination.Limit)
	require.Len(t, all.Messages, 4)
	assert.Equal(t, "r", all.Messages[0].Queue, "newest failure first")
	m := all.Messages[3]
	assert.Equal(t, "q", m.Queue)
	assert.Equal(t, "a", m.Partition)
	assert.EqualValues(t, 0, m.Offset)
	assert.Equal(t, map[string]any{"n": float64(0)}, m.Data)
	assert.Equal(t, m.Data, m.Payload)
	assert.Equal(t, "__QUEUE_MODE__", m.ConsumerGroup)
	assert.Regexp(t, uuidRE, m.ID)
	assert.Regexp(t, uuidRE, m.MessageID)
	assert.Equal(t, "2026-11-30T12:00:00.000000Z", m.FailedAt)

	get := func(q url.Values) tDLQ {
		var out tDLQ
		h.doJSON("GET", "/api/v1/dlq?"+q.Encode(), nil, http.StatusOK, &out)
		return out
	}
	assert.Equal(t, 3, get(vals("queue", "q")).Total)
	assert.Equal(t, 1, get(vals("queue", "q", "consumerGroup", "g")).Total)
	// partition, from and to are not read (upstream reads.rs api_dlq).
	assert.Equal(t, 3, get(vals("queue", "q", "partition", "a")).Total)
	assert.Equal(t, 4, get(vals("from", t0.Add(1500*time.Millisecond).Format(time.RFC3339Nano))).Total)
	assert.Equal(t, 4, get(vals("to", t0.Add(1500*time.Millisecond).Format(time.RFC3339Nano))).Total)
	page := get(vals("limit", "2", "offset", "1"))
	assert.Equal(t, 4, page.Total)
	assert.Equal(t, 2, page.Pagination.Limit)
	assert.Equal(t, 1, page.Pagination.Offset)
	require.Len(t, page.Messages, 2)
	assert.Equal(t, all.Messages[1].ID, page.Messages[0].ID)
}

func TestDLQReplay(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "a", 1)
	deadLetter(h, "q", "a", "", clock)
	var list tDLQ
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	id := list.Messages[0].ID

	var out map[string]any
	h.doJSON("POST", "/api/v1/dlq/"+id+"/replay", nil, http.StatusOK, &out)
	assert.Equal(t, true, out["success"])
	assert.Equal(t, "moved", out["result"])
	assert.Equal(t, true, out["dlqRowRemoved"])
	replayed := out["replayedAs"].(map[string]any)
	assert.Equal(t, "dlq:"+id, replayed["transaction_id"])
	assert.Equal(t, 0, s.DLQCount("q"))

	p := h.popQ("q", nil)
	assert.Equal(t, "dlq:"+id, p.Messages[0].TransactionID)
	assert.Equal(t, []int{0}, ns(t, p.Messages))

	var gone map[string]any
	h.doJSON("POST", "/api/v1/dlq/"+id+"/replay", nil, http.StatusNotFound, &gone)
	assert.Equal(t, "gone", gone["result"])

	// To another queue, and by the message's address.
	h.pushN("q", "b", 1)
	deadLetter(h, "q", "b", "", clock)
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	row := list.Messages[0]
	h.doJSON("POST", "/api/v1/messages/"+row.PartitionID+"/"+url.PathEscape(row.TransactionID)+"/retry", item{"queue": "elsewhere"}, http.StatusOK, &out)
	assert.Equal(t, "elsewhere", out["queue"])
	h.popQ("elsewhere", nil)
	st, _, _ := h.do("POST", "/api/v1/dlq/"+id+"/replay", item{"queue": " "})
	assert.Equal(t, http.StatusBadRequest, st)
}

func TestDLQPurge(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "a", 2)
	deadLetter(h, "q", "a", "", clock)
	deadLetter(h, "q", "a", "", clock)
	st, _, _ := h.do("DELETE", "/api/v1/dlq", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	var out map[string]any
	h.doJSON("DELETE", "/api/v1/dlq?queue=q", nil, http.StatusOK, &out)
	assert.EqualValues(t, 2, out["deleted"])
	assert.Equal(t, 0, s.DLQCount("q"))
}

// TestDLQReplayDuplicateAnswersTheZeroUUID: replaying a dead letter whose
// copy ("dlq:<id>") is already stored within the dedup window stores
// nothing, keeps the row and answers result duplicate with the zero UUID
// as replayedAs.message_id (upstream phase2/admin.rs api_dlq_move).
func TestDLQReplayDuplicateAnswersTheZeroUUID(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "a", 1)
	deadLetter(h, "q", "a", "", clock)
	var list tDLQ
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	id := list.Messages[0].ID
	copied := h.push(item{"queue": "q", "partition": "a", "payload": 1, "transactionId": "dlq:" + id})[0]

	var out map[string]any
	h.doJSON("POST", "/api/v1/dlq/"+id+"/replay", nil, http.StatusOK, &out)
	assert.Equal(t, "duplicate", out["result"])
	assert.Equal(t, false, out["dlqRowRemoved"])
	replayed := out["replayedAs"].(map[string]any)
	assert.Equal(t, zeroUUID, replayed["message_id"])
	assert.Equal(t, "duplicate", replayed["status"])
	assert.EqualValues(t, *copied.Offset, replayed["offset"], "the copy's offset")
	assert.Equal(t, 1, s.DLQCount("q"), "the row stays")
}
