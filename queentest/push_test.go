package queentest

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestPushCreatesQueueAnswers201InThe2xShape(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)

	st, _, raw := h.do("POST", "/api/v1/push", item{"items": []item{
		{"queue": "orders", "partition": "p1", "payload": item{"a": 1}},
		{"queue": "orders", "payload": "text", "transactionId": "client-tx"},
		{"queue": "orders", "partition": "p1", "payload": 42},
	}})
	require.Equal(t, http.StatusCreated, st, string(raw))

	// Exact 2.x key names: snake_case ids, camelCase queueName.
	var generic []map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	for _, k := range []string{"index", "message_id", "transaction_id", "queueName", "status", "offset"} {
		assert.Contains(t, generic[0], k)
	}
	assert.NotContains(t, generic[0], "messageId")
	assert.NotContains(t, generic[0], "transactionId")

	var out []tPushResult
	require.NoError(t, json.Unmarshal(raw, &out))
	for i, r := range out {
		assert.Equal(t, i, r.Index)
		assert.Equal(t, "queued", r.Status)
		assert.Equal(t, "orders", r.QueueName)
		assert.Regexp(t, uuidRE, r.MessageID)
	}
	assert.Equal(t, out[0].MessageID, out[0].TransactionID, "a missing transactionId is the message id")
	assert.Equal(t, "client-tx", out[1].TransactionID)
	// Offsets count per partition: p1 gets 0 and 1, Default gets 0.
	assert.EqualValues(t, 0, *out[0].Offset)
	assert.EqualValues(t, 0, *out[1].Offset)
	assert.EqualValues(t, 1, *out[2].Offset)

	// The queue exists with the implicit 2.x defaults.
	var q struct {
		Name    string         `json:"name"`
		Options map[string]any `json:"options"`
	}
	h.doJSON("GET", "/api/v1/resources/queues/orders", nil, http.StatusOK, &q)
	assert.Equal(t, "orders", q.Name)
	assert.EqualValues(t, 60, q.Options["leaseTime"])
	assert.EqualValues(t, 3, q.Options["retryLimit"])
	assert.EqualValues(t, 1000, q.Options["retryDelay"])
	assert.Equal(t, true, q.Options["deadLetterQueue"])

	// Payloads of any JSON type come back verbatim, in order.
	p := h.popQ("orders", vals("batch", "10", "partitions", "2"))
	var got []string
	for _, m := range p.Messages {
		got = append(got, string(m.Data))
	}
	assert.ElementsMatch(t, []string{`{"a":1}`, `42`, `"text"`}, got)
}

func TestPushEmptyItemsIs201EmptyArray(t *testing.T) {
	h := newHC(t, Start(t))
	st, _, raw := h.do("POST", "/api/v1/push", `{"items":[]}`)
	assert.Equal(t, http.StatusCreated, st)
	assert.JSONEq(t, `[]`, string(raw))
}

func TestPushDedupByQueuePartitionTransactionID(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	first := h.push(item{"queue": "q", "partition": "a", "payload": 1, "transactionId": "tx-1"})[0]

	// Same request twice, then across requests: duplicate with the original ids.
	out := h.push(
		item{"queue": "q", "partition": "a", "payload": 2, "transactionId": "tx-2"},
		item{"queue": "q", "partition": "a", "payload": 3, "transactionId": "tx-2"},
		item{"queue": "q", "partition": "a", "payload": 4, "transactionId": "tx-1"},
		// Same transactionId in another partition is another message.
		item{"queue": "q", "partition": "b", "payload": 5, "transactionId": "tx-1"},
	)
	assert.Equal(t, "queued", out[0].Status)
	assert.Equal(t, "duplicate", out[1].Status)
	assert.Equal(t, out[0].MessageID, out[1].MessageID)
	assert.Equal(t, *out[0].Offset, *out[1].Offset)
	assert.Equal(t, "duplicate", out[2].Status)
	assert.Equal(t, first.MessageID, out[2].MessageID)
	assert.EqualValues(t, 0, *out[2].Offset)
	assert.Equal(t, "queued", out[3].Status)

	// Only three messages were stored.
	p := h.popQ("q", vals("batch", "10", "partitions", "5"))
	assert.ElementsMatch(t, []string{"1", "2", "5"}, func() []string {
		var s []string
		for _, m := range p.Messages {
			s = append(s, string(m.Data))
		}
		return s
	}())
}

func TestPushBadRequestsAre400AndStoreNothing(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	cases := map[string]string{
		"malformed JSON":   `{"items":[`,
		"empty body":       ``,
		"no items":         `{}`,
		"missing payload":  `{"items":[{"queue":"bad"}]}`,
		"missing queue":    `{"items":[{"payload":1}]}`,
		"queue not string": `{"items":[{"queue":7,"payload":1}]}`,
		// One bad item fails the whole request, the good one included.
		"one bad item": `{"items":[{"queue":"bad","payload":1},{"queue":"bad"}]}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			st, _, raw := h.do("POST", "/api/v1/push", body)
			require.Equal(t, http.StatusBadRequest, st, string(raw))
			var e struct{ Error, Code string }
			require.NoError(t, json.Unmarshal(raw, &e))
			assert.NotEmpty(t, e.Error)
			assert.NotEmpty(t, e.Code)
		})
	}
	st, _, raw := h.do("POST", "/api/v1/push", item{"items": []item{{"queue": strings.Repeat("q", 300), "partition": strings.Repeat("p", 300), "payload": 1}}})
	assert.Equal(t, http.StatusRequestEntityTooLarge, st)
	assert.Contains(t, string(raw), "name_too_long")

	h.doJSON("GET", "/api/v1/resources/queues/bad", nil, http.StatusNotFound, nil)
	var list struct{ Queues []any }
	h.doJSON("GET", "/api/v1/resources/queues", nil, http.StatusOK, &list)
	assert.Empty(t, list.Queues)
}

// TestPushDedupWindow: a repeated transactionId is a duplicate only while
// the first copy is within the queue's dedupWindowSeconds (default 3600);
// after that, or with a window of 0, it is stored again. A repeat inside
// one request always follows the earlier item (upstream rsm/dedup.rs probe,
// rsm/planner/push.rs, rsm/facade/real.rs push_impl).
func TestPushDedupWindow(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	push := func(queue string, txns ...string) []tPushResult {
		t.Helper()
		items := make([]item, len(txns))
		for i, txn := range txns {
			items[i] = item{"queue": queue, "payload": i, "transactionId": txn}
		}
		return h.push(items...)
	}

	configure(h, "w", item{"dedupWindowSeconds": 60})
	first := push("w", "t1")[0]
	require.Equal(t, "queued", first.Status)
	clock.Advance(59 * time.Second)
	dup := push("w", "t1")[0]
	assert.Equal(t, "duplicate", dup.Status, "inside the window")
	assert.Equal(t, first.MessageID, dup.MessageID)
	assert.EqualValues(t, 0, *dup.Offset)
	clock.Advance(2 * time.Second)
	again := push("w", "t1")[0]
	assert.Equal(t, "queued", again.Status, "the window has passed: stored again")
	assert.EqualValues(t, 1, *again.Offset)
	assert.NotEqual(t, first.MessageID, again.MessageID)
	assert.Equal(t, again.MessageID, push("w", "t1")[0].MessageID, "the new copy opens a new window")

	// A transaction repeating t1 rolls back inside the window, commits after.
	var out txnAnswer
	h.doJSON("POST", "/api/v1/transaction", item{"operations": []item{
		{"type": "push", "items": []item{{"queue": "w", "payload": 1, "transactionId": "t1"}}},
	}}, http.StatusOK, &out)
	assert.Equal(t, "duplicate", out.Reason, "inside the window a transaction pushing t1 rolls back: %+v", out)
	clock.Advance(61 * time.Second)
	h.doJSON("POST", "/api/v1/transaction", item{"operations": []item{
		{"type": "push", "items": []item{{"queue": "w", "payload": 1, "transactionId": "t1"}}},
	}}, http.StatusOK, &out)
	assert.True(t, out.Success, "%+v", out)

	configure(h, "off", item{"dedupWindowSeconds": 0})
	assert.Equal(t, "queued", push("off", "t1")[0].Status)
	assert.Equal(t, "queued", push("off", "t1")[0].Status, "no window: every push is stored")
	same := push("off", "t2", "t2")
	assert.Equal(t, "queued", same[0].Status)
	assert.Equal(t, "duplicate", same[1].Status, "a repeat inside one request follows its first item")
	assert.Equal(t, same[0].MessageID, same[1].MessageID)
	assert.Equal(t, *same[0].Offset, *same[1].Offset)

	// An implicit queue has the default window of an hour.
	push("d", "t1")
	clock.Advance(time.Hour - time.Second)
	assert.Equal(t, "duplicate", push("d", "t1")[0].Status)
	clock.Advance(2 * time.Second)
	assert.Equal(t, "queued", push("d", "t1")[0].Status)

}

// TestPushTransactionIDLimit: a transactionId over 65,535 bytes fails the
// whole push with 400 bad_body, naming the item (upstream push_impl).
func TestPushTransactionIDLimit(t *testing.T) {
	h := newHC(t, Start(t))
	var e map[string]string
	h.doJSON("POST", "/api/v1/push", item{"items": []item{
		{"queue": "q", "payload": 1},
		{"queue": "q", "payload": 2, "transactionId": strings.Repeat("t", 65536)},
	}}, http.StatusBadRequest, &e)
	assert.Equal(t, "bad_body", e["code"])
	assert.Contains(t, e["error"], "transactionId of item 1 exceeds the 65535-byte limit")
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusNotFound, nil)
	h.push(item{"queue": "q", "payload": 1, "transactionId": strings.Repeat("t", 65535)})
}

// TestPushRefusedGroupAnswersError: a (queue, partition) group the broker
// refuses for good (planned larger than QUEEN_RAFT_ENTRY_MAX_BYTES) is
// answered status `error` inside the 201, with no offset and nothing
// stored, while the request's other groups are stored; a transaction
// carrying it rolls back with reason too_large (upstream push_impl,
// rsm/planner/push.rs).
func TestPushRefusedGroupAnswersError(t *testing.T) {
	h := newHC(t, Start(t, WithEntryMaxBytes(1024)))
	big := strings.Repeat("x", 2000)
	out := h.push(
		item{"queue": "q", "partition": "small", "payload": 1},
		item{"queue": "q", "partition": "big", "payload": big, "transactionId": "t-big"},
		item{"queue": "q", "partition": "big", "payload": big, "transactionId": "t-big"},
		item{"queue": "q", "partition": "small", "payload": 2},
	)
	assert.Equal(t, []string{"queued", "error", "error", "queued"}, []string{out[0].Status, out[1].Status, out[2].Status, out[3].Status})
	assert.Nil(t, out[1].Offset)
	assert.Equal(t, "t-big", out[1].TransactionID)
	assert.Regexp(t, uuidRE, out[1].MessageID)
	var q struct {
		Partitions []struct {
			Name string `json:"name"`
		} `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusOK, &q)
	require.Len(t, q.Partitions, 1, "nothing of the refused group was created")
	assert.Equal(t, "small", q.Partitions[0].Name)

	var tx txnAnswer
	h.doJSON("POST", "/api/v1/transaction", item{"operations": []item{{"type": "push", "queue": "q", "partition": "big", "payload": big}}},
		http.StatusOK, &tx)
	assert.False(t, tx.Success)
	assert.Equal(t, "too_large", tx.Reason)
}
