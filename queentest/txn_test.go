package queentest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tTxn struct {
	TransactionID string           `json:"transactionId"`
	Success       bool             `json:"success"`
	Reason        string           `json:"reason"`
	Error         string           `json:"error"`
	Results       []map[string]any `json:"results"`
}

func (h *hc) txn(body any) tTxn {
	h.t.Helper()
	var out tTxn
	h.doJSON("POST", "/api/v1/transaction", body, http.StatusOK, &out)
	return out
}

func TestTransactionPushesAndAcksCommitTogether(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("in", "p", 1)
	p := h.popQ("in", nil)
	m := p.Messages[0]
	out := h.txn(item{
		"operations": []item{
			{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"},
			{"type": "push", "items": []item{{"queue": "out", "payload": item{"n": 7}, "transactionId": "derived-1"}, {"queue": "out", "payload": item{"n": 8}}}},
			{"type": "push", "queue": "out", "partition": "inline", "payload": item{"n": 9}},
		},
		"requiredLeases": []string{m.LeaseID},
	})
	require.True(t, out.Success, out.Error)
	assert.Regexp(t, uuidRE, out.TransactionID)
	require.Len(t, out.Results, 4)
	assert.Equal(t, "ack", out.Results[0]["type"])
	assert.Equal(t, true, out.Results[0]["success"])
	assert.Contains(t, out.Results[0], "error")
	assert.Nil(t, out.Results[0]["error"])
	assert.Equal(t, false, out.Results[0]["dlq"])
	assert.Equal(t, "push", out.Results[1]["type"])
	assert.Equal(t, "derived-1", out.Results[1]["transactionId"])
	assert.Equal(t, "out", out.Results[1]["queueName"])
	assert.NotEmpty(t, out.Results[1]["messageId"])
	assert.EqualValues(t, 3, out.Results[3]["index"])

	h.popEmpty("in", nil) // the ack committed
	got := h.popQ("out", vals("partitions", "2", "batch", "10"))
	assert.ElementsMatch(t, []int{7, 8, 9}, ns(t, got.Messages))
	assert.Equal(t, 0, s.LeasedCount("in", ""))

	// A transaction push keeps a valid UUID traceId (a plain push does not).
	trace := "0196f0a4-1c2b-7c3d-8e4f-5a6b7c8d9e0f"
	out = h.txn(item{"operations": []item{{"type": "push", "queue": "traced", "payload": 1, "traceId": trace}}})
	require.True(t, out.Success)
	tp := h.popQ("traced", nil)
	require.NotNil(t, tp.Messages[0].TraceID)
	assert.Equal(t, trace, *tp.Messages[0].TraceID)

}

// A transaction push whose transactionId is already stored (by an earlier
// request) rolls the whole transaction back, acks included: 200,
// success:false, reason "duplicate" (upstream planner/txn.rs, QDUP). A repeat
// inside the same transaction is only a follower of its first occurrence.
func TestTransactionPushOfAStoredMessageRollsEverythingBack(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.push(item{"queue": "out", "partition": "p", "payload": 1, "transactionId": "derived-1"})
	h.pushN("in", "p", 1)
	p := h.popQ("in", nil)
	m := p.Messages[0]

	out := h.txn(item{"operations": []item{
		{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID},
		{"type": "push", "items": []item{
			{"queue": "out", "partition": "p", "payload": 2, "transactionId": "fresh"},
			{"queue": "out", "partition": "p", "payload": 3, "transactionId": "derived-1"},
		}},
	}})
	assert.False(t, out.Success)
	assert.Equal(t, "duplicate", out.Reason)
	assert.Contains(t, out.Error, "out/p")
	assert.Contains(t, out.Error, "original offset 0")
	assert.NotNil(t, out.Results)
	assert.Empty(t, out.Results)

	// Nothing happened: the fresh push is not stored, the ack did not settle.
	assert.Equal(t, 1, s.LeasedCount("in", ""))
	got := h.popQ("out", vals("batch", "10"))
	assert.Equal(t, []json.RawMessage{json.RawMessage("1")}, []json.RawMessage{got.Messages[0].Data})
	assert.Len(t, got.Messages, 1)

	// Inside one transaction the second occurrence follows the first.
	out = h.txn(item{"operations": []item{{"type": "push", "items": []item{
		{"queue": "out", "partition": "p", "payload": 4, "transactionId": "twice"},
		{"queue": "out", "partition": "p", "payload": 5, "transactionId": "twice"},
	}}}})
	require.True(t, out.Success, out.Error)
	require.Len(t, out.Results, 2)
	assert.Equal(t, true, out.Results[1]["success"])
	assert.Equal(t, true, out.Results[1]["duplicate"])
	assert.Equal(t, out.Results[0]["messageId"], out.Results[1]["messageId"])
	assert.NotContains(t, out.Results[0], "duplicate")
}

func TestTransactionOneBadAckRollsEverythingBack(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("in", "a", 1)
	h.pushN("in", "b", 1)
	p := h.popQ("in", vals("partitions", "2"))
	require.Len(t, p.Messages, 2)
	good, bad := p.Messages[0], p.Messages[1]
	out := h.txn(item{"operations": []item{
		{"type": "push", "items": []item{{"queue": "out", "payload": 1}}},
		{"type": "ack", "transactionId": good.TransactionID, "partitionId": good.PartitionID, "leaseId": good.LeaseID},
		{"type": "ack", "transactionId": bad.TransactionID, "partitionId": bad.PartitionID, "leaseId": "a-stale-lease"},
	}})
	assert.False(t, out.Success)
	assert.Equal(t, "rejected_ack", out.Reason)
	assert.NotEmpty(t, out.Error)
	assert.NotNil(t, out.Results)
	assert.Empty(t, out.Results)

	// Nothing happened: no push, no ack.
	h.doJSON("GET", "/api/v1/resources/queues/out", nil, http.StatusNotFound, nil)
	assert.Equal(t, 2, s.LeasedCount("in", ""))
	assert.True(t, h.ackMsg(good, "completed", "").Success, "the good ack's lease is intact")
}

func TestTransactionAckIsFencedByItsLease(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("in", "p", 2)
	p := h.popQ("in", vals("batch", "2"))
	m := p.Messages[0]
	// A lease-less ack borrows the single requiredLeases hint...
	out := h.txn(item{
		"operations":     []item{{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID}},
		"requiredLeases": []string{p.LeaseID},
	})
	assert.True(t, out.Success, out.Error)
	// ...and a wrong hint fences it.
	m = p.Messages[1]
	out = h.txn(item{
		"operations":     []item{{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID}},
		"requiredLeases": []string{"someone-else"},
	})
	assert.False(t, out.Success)
	assert.Equal(t, "rejected_ack", out.Reason)
	// A repeat of an ack whose lease settled is refused in a transaction.
	assert.True(t, h.ackMsg(m, "completed", "").Success)
	out = h.txn(item{"operations": []item{{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID}}})
	assert.False(t, out.Success)
}

func TestTransactionDLQAndFailedAcks(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("in", "p", 2)
	p := h.popQ("in", vals("batch", "1"))
	m := p.Messages[0]
	out := h.txn(item{"operations": []item{{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "dlq", "error": "bad"}}})
	require.True(t, out.Success)
	assert.Equal(t, true, out.Results[0]["dlq"])
	assert.Equal(t, 1, s.DLQCount("in"))
}

// TestTransactionRollbacksAndRefusals: what the broker refuses as a body
// (a malformed one, a rider that is not an array, a push item without its
// queue or payload, an operation type that is empty, unknown, kv or timer)
// is a 400 with the transaction envelope; a rollback verdict is a 200
// (upstream 2.2 rsm/facade/real.rs txn_impl). Nothing is stored either way.
func TestTransactionRollbacksAndRefusals(t *testing.T) {
	h := newHC(t, Start(t))
	check := func(want int, cases map[string]string, wantErr map[string]string) {
		t.Helper()
		for name, body := range cases {
			t.Run(name, func(t *testing.T) {
				st, _, raw := h.do("POST", "/api/v1/transaction", body)
				require.Equal(t, want, st, string(raw))
				var out tTxn
				require.NoError(t, json.Unmarshal(raw, &out))
				assert.False(t, out.Success)
				assert.NotEmpty(t, out.TransactionID)
				assert.Contains(t, []string{"bad_request", "rejected_ack"}, out.Reason)
				if e := wantErr[name]; e != "" {
					assert.Contains(t, string(raw), e)
				}
			})
		}
	}
	check(http.StatusOK, map[string]string{
		"no operations":    `{}`,
		"empty operations": `{"operations":[]}`,
		"push without q":   `{"operations":[{"type":"push","payload":1}]}`,
		"bad partitionId":  `{"operations":[{"type":"push","queue":"x","payload":1},{"type":"ack","transactionId":"t","partitionId":"uuid-like"}]}`,
		"unknown pid":      `{"operations":[{"type":"push","queue":"x","payload":1},{"type":"ack","transactionId":"t","partitionId":"999"}]}`,
	}, nil)
	check(http.StatusBadRequest, map[string]string{
		"malformed":             `{"operations":[`,
		"empty body":            ``,
		"operations not array":  `{"operations":{"type":"push","queue":"x","payload":1}}`,
		"kv not array":          `{"operations":[{"type":"push","queue":"x","payload":1}],"kv":{"op":"get"}}`,
		"timers not array":      `{"operations":[{"type":"push","queue":"x","payload":1}],"timers":1}`,
		"item without payload":  `{"operations":[{"type":"push","items":[{"queue":"x"}]}]}`,
		"item without queue":    `{"operations":[{"type":"push","items":[{"payload":1}]}]}`,
		"unknown type":          `{"operations":[{"type":"delete"}]}`,
		"empty type":            `{"operations":[{"queue":"x","payload":1}]}`,
		"kv type":               `{"operations":[{"type":"kv"}]}`,
		"timer type":            `{"operations":[{"type":"timer"}]}`,
		"type after a good one": `{"operations":[{"type":"push","queue":"x","payload":1},{"type":"timers"}]}`,
	}, map[string]string{
		"operations not array": "`operations` must be an array",
		"kv not array":         "`kv` must be an array",
		"timers not array":     "`timers` must be an array",
		"kv type":              "TOP-LEVEL",
	})
	h.doJSON("GET", "/api/v1/resources/queues/x", nil, http.StatusNotFound, nil)

	// A transactionId over 65,535 bytes: the broker's plain 400.
	long := strings.Repeat("t", 65536)
	var e struct{ Error, Code string }
	h.doJSON("POST", "/api/v1/transaction", item{"operations": []item{{"type": "push", "queue": "x", "payload": 1, "transactionId": long}}},
		http.StatusBadRequest, &e)
	assert.Equal(t, "bad_request", e.Code)
	assert.Contains(t, e.Error, "65535-byte limit")
}
