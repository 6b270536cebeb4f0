package queentest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAckReplyShape(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 1)
	p := h.popQ("q", nil)
	m := p.Messages[0]
	st, _, raw := h.do("POST", "/api/v1/ack", item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
	require.Equal(t, http.StatusOK, st)
	var generic []map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	require.Len(t, generic, 1)
	for _, k := range []string{"index", "transactionId", "success", "error", "leaseReleased", "dlq", "noop"} {
		assert.Contains(t, generic[0], k)
	}
	assert.Nil(t, generic[0]["error"])
	assert.Equal(t, true, generic[0]["success"])
	assert.Equal(t, true, generic[0]["leaseReleased"])

	st, _, raw = h.do("POST", "/api/v1/ack", `{"transactionId":`)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "bad_body")
}

func TestAckCompletedImplicitPrefixAndPartialKeepsLease(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 5)
	p := h.popQ("q", vals("batch", "4"))
	require.Len(t, p.Messages, 4)
	assert.Equal(t, 4, s.LeasedCount("q", ""))

	// Acking #2 completes #1 and #2 implicitly; the lease stays for #3, #4.
	a := h.ackMsg(p.Messages[1], "completed", "")
	assert.True(t, a.Success)
	assert.False(t, a.LeaseReleased, "a partial ack keeps the lease")
	assert.Equal(t, 2, s.LeasedCount("q", ""))
	h.popEmpty("q", nil)

	// Acking the last one settles the batch.
	a = h.ackMsg(p.Messages[3], "completed", "")
	assert.True(t, a.LeaseReleased)
	assert.Equal(t, 0, s.LeasedCount("q", ""))
	p2 := h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{4}, ns(t, p2.Messages), "everything up to #4 was committed")
	// A lease-less ack of something already committed is a noop success.
	out := h.ack("/api/v1/ack", item{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID})
	assert.True(t, out[0].Success)
	assert.True(t, out[0].Noop)
	// Under the released lease, only the batch the settling ack released
	// counts as a repeat; #1 was committed by an earlier, partial ack.
	a = h.ackMsg(p.Messages[0], "completed", "")
	assert.False(t, a.Success)
}

// TestAckFailedSpendsRetryAndRedeliversAtOnce: after a failed ack with
// budget left, the partition can be claimed again at once, whatever the
// queue's retryDelay (upstream rsm/consume/ack.rs releases the lease,
// rsm/consume/pop.rs claim_one has no retry hold).
func TestAckFailedSpendsRetryAndRedeliversAtOnce(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "q", item{"retryLimit": 3, "retryDelay": 5000})
	h.pushN("q", "p", 4)
	p := h.popQ("q", vals("batch", "4"))

	// [completed #0, failed #1]: #1 and everything after it come back.
	out := h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{
		{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID, "status": "completed"},
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": p.LeaseID, "status": "failed", "error": "boom"},
	}})
	require.Len(t, out, 2)
	assert.True(t, out[0].Success)
	assert.True(t, out[1].Success)
	assert.True(t, out[1].LeaseReleased)
	assert.False(t, out[1].DLQ)

	p2 := h.popQ("q", vals("batch", "10")) // retryDelay 5000 is not applied
	assert.Equal(t, []int{1, 2, 3}, ns(t, p2.Messages))
	// The redelivery starts past the completed #0, so it counts as a first
	// claim from there (TestDeliveryAttemptIsCountedPerClaim).
	assert.Equal(t, 1, p2.Messages[0].DeliveryAttempt)
	assert.NotEqual(t, p.LeaseID, p2.LeaseID)
}

func TestAckFailedPastRetryLimitGoesToDLQ(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	configure(h, "q", item{"retryLimit": 1, "retryDelay": 0, "deadLetterQueue": true})
	h.pushN("q", "p", 2)

	// retryLimit 1 = two deliveries, then the DLQ.
	for attempt := 1; attempt <= 2; attempt++ {
		p := h.popQ("q", vals("batch", "1"))
		assert.Equal(t, attempt, p.Messages[0].DeliveryAttempt)
		a := h.ackMsg(p.Messages[0], "failed", "")
		assert.Equal(t, attempt == 2, a.DLQ, "attempt %d", attempt)
	}
	assert.Equal(t, 1, s.DLQCount("q"))
	p := h.popQ("q", vals("batch", "1"))
	assert.Equal(t, []int{1}, ns(t, p.Messages), "the poison was moved past")
	assert.Equal(t, 1, p.Messages[0].DeliveryAttempt)

	var list struct {
		Messages []struct {
			TransactionID string  `json:"transactionId"`
			ErrorMessage  *string `json:"errorMessage"`
			RetryCount    int     `json:"retryCount"`
			Queue         string  `json:"queue"`
			ConsumerGroup string  `json:"consumerGroup"`
		} `json:"messages"`
		Total int `json:"total"`
	}
	h.doJSON("GET", "/api/v1/dlq?queue=q", nil, http.StatusOK, &list)
	require.Equal(t, 1, list.Total)
	assert.Equal(t, "Retries exhausted", *list.Messages[0].ErrorMessage)
	assert.Equal(t, 1, list.Messages[0].RetryCount)
	assert.Equal(t, "__QUEUE_MODE__", list.Messages[0].ConsumerGroup)
}

func TestAckFailedPastRetryLimitIsDroppedWithoutDLQ(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	configure(h, "q", item{"retryLimit": 0, "retryDelay": 0, "deadLetterQueue": false, "dlqAfterMaxRetries": false})
	h.pushN("q", "p", 2)
	p := h.popQ("q", vals("batch", "1"))
	a := h.ackMsg(p.Messages[0], "failed", "")
	assert.True(t, a.Success)
	assert.False(t, a.DLQ)
	assert.Equal(t, 0, s.DLQCount("q"))
	p = h.popQ("q", vals("batch", "1"))
	assert.Equal(t, []int{1}, ns(t, p.Messages), "dropped: the cursor moved past it")
}

func TestImplicitQueueDeadLettersAfterDefaultRetryLimit(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("never-configured", "p", 1)
	for attempt := 1; attempt <= 4; attempt++ {
		p := h.popQ("never-configured", nil)
		assert.Equal(t, attempt, p.Messages[0].DeliveryAttempt)
		a := h.ackMsg(p.Messages[0], "failed", "")
		assert.Equal(t, attempt == 4, a.DLQ, "retryLimit 3 by default: the 4th failure dead-letters")
	}
	assert.Equal(t, 1, s.DLQCount("never-configured"), "the implicit queue has its DLQ on")
	h.popEmpty("never-configured", nil)
}

func TestAckRetryReleasesWithoutSpending(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	configure(h, "q", item{"retryLimit": 1})
	h.pushN("q", "p", 3)
	p := h.popQ("q", vals("batch", "3"))
	// [completed #0, retry #1, retry #2] under one lease, in one batch.
	out := h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{
		{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID, "status": "completed"},
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": p.LeaseID, "status": "retry"},
		{"transactionId": p.Messages[2].TransactionID, "partitionId": p.Messages[2].PartitionID, "leaseId": p.LeaseID, "status": "retry"},
	}})
	for _, a := range out {
		assert.True(t, a.Success)
	}
	// No retryDelay and no budget: retry as often as we like. The first
	// redelivery starts past #0 (attempt 1); each retry of the claim's first
	// message then redelivers from the same start.
	for i := 0; i < 5; i++ {
		p = h.popQ("q", vals("batch", "10"))
		assert.Equal(t, []int{1, 2}, ns(t, p.Messages))
		assert.Equal(t, i+1, p.Messages[0].DeliveryAttempt)
		h.ackMsg(p.Messages[0], "retry", "")
	}
	assert.Equal(t, 0, s.DLQCount("q"))
}

func TestAckDLQAtOnce(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	p := h.popQ("q", vals("batch", "2"))
	body := item{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID, "status": "dlq", "error": "permanent"}
	a := h.ack("/api/v1/ack", body)[0]
	assert.True(t, a.Success)
	assert.True(t, a.DLQ)
	assert.True(t, a.LeaseReleased)
	assert.Equal(t, 1, s.DLQCount("q"))
	p = h.popQ("q", nil)
	assert.Equal(t, []int{1}, ns(t, p.Messages))
	var list struct {
		Messages []struct {
			ErrorMessage string `json:"errorMessage"`
		}
	}
	h.doJSON("GET", "/api/v1/dlq", nil, http.StatusOK, &list)
	assert.Equal(t, "permanent", list.Messages[0].ErrorMessage)
}

func TestAckStaleOrForeignLeaseRefusedPerItem(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "a", 1)
	h.pushN("q", "b", 1)
	p := h.popQ("q", vals("partitions", "2", "batch", "2"))
	require.Len(t, p.Messages, 2)
	out := h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{
		{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": "not-the-lease", "status": "completed"},
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": p.LeaseID, "status": "completed"},
		{"transactionId": "x", "partitionId": "not-a-number", "status": "completed"},
	}})
	require.Len(t, out, 3)
	assert.False(t, out[0].Success)
	require.NotNil(t, out[0].Error)
	assert.Equal(t, "invalid or expired lease", *out[0].Error)
	assert.True(t, out[1].Success, "one refused item does not fail the others")
	assert.False(t, out[2].Success)
	assert.Equal(t, "partitionId is not a partition id", *out[2].Error)

	// An expired lease is refused too, with its lease id.
	clock.Advance(61 * time.Second)
	a := h.ackMsg(p.Messages[0], "completed", "")
	assert.False(t, a.Success)
	assert.Equal(t, "invalid or expired lease", *a.Error)
}

func TestRepeatOfAnAckAfterReleaseIsAnsweredAsTheFirstTime(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 3)
	p := h.popQ("q", vals("batch", "2"))
	first := h.ackAll(p, "")
	again := h.ackAll(p, "")
	require.Len(t, again, 2)
	for i := range again {
		assert.True(t, again[i].Success, "the lost-reply retry is answered as the first")
		assert.Equal(t, first[i].LeaseReleased, again[i].LeaseReleased)
	}
	// But the released lease cannot ack anything else: in the same repeat,
	// an item of no batch it held is refused as under any lease that is not
	// the live one (2.x render_ack: the presented lease is invalid).
	next := h.popQ("q", nil)
	a := h.ack("/api/v1/ack", item{"transactionId": next.Messages[0].TransactionID, "partitionId": next.Messages[0].PartitionID, "leaseId": p.LeaseID})
	assert.False(t, a[0].Success)
	assert.Equal(t, "invalid or expired lease", *a[0].Error)
	a = h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.PartitionID, "leaseId": p.LeaseID},
		{"transactionId": next.Messages[0].TransactionID, "partitionId": p.PartitionID, "leaseId": p.LeaseID},
	}})
	assert.True(t, a[0].Success)
	assert.False(t, a[1].Success)
	assert.Equal(t, "invalid or expired lease", *a[1].Error)
}

func TestLeaseLessAckIsAcceptedAfterExpiry(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "p", 2)
	p := h.popQ("q", vals("batch", "2", "leaseSeconds", "5"))
	clock.Advance(10 * time.Second)
	// No leaseId: no lease check, and the cursor moves.
	out := h.ack("/api/v1/ack", item{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "status": "completed"})
	assert.True(t, out[0].Success)
	h.popEmpty("q", nil)
}

func TestBothBodyShapesOnBothAckRoutes(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 4)
	p := h.popQ("q", vals("batch", "4"))
	one := func(m tMessage) item {
		return item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"}
	}
	assert.True(t, h.ack("/api/v1/ack/batch", one(p.Messages[0]))[0].Success, "single shape on the batch route")
	out := h.ack("/api/v1/ack", item{"acknowledgments": []item{one(p.Messages[1]), one(p.Messages[2])}})
	require.Len(t, out, 2, "batch shape on the single route")
	assert.True(t, out[0].Success && out[1].Success)
	assert.Equal(t, 1, out[1].Index)
	out = h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{one(p.Messages[3])}})
	assert.True(t, out[0].LeaseReleased)
}

func TestOnePartitionsFailureDoesNotBlockTheOthers(t *testing.T) {
	h := newHC(t, Start(t))
	configure(h, "q", item{"retryDelay": 0})
	h.pushN("q", "a", 2)
	h.pushN("q", "b", 2)
	p := h.popQ("q", vals("partitions", "2", "batch", "10"))
	var a, b []tMessage
	for _, m := range p.Messages {
		if m.Partition == "a" {
			a = append(a, m)
		} else {
			b = append(b, m)
		}
	}
	require.Len(t, a, 2)
	assert.True(t, h.ackMsg(a[0], "failed", "").Success)
	for _, m := range b {
		assert.True(t, h.ackMsg(m, "completed", "").Success, "B settles under the shared lease id")
	}
	again := h.popQ("q", vals("partitions", "2", "batch", "10"))
	for _, m := range again.Messages {
		assert.Equal(t, "a", m.Partition)
	}
	assert.Len(t, again.Messages, 2)
}

func TestAckWithGroupDoesNotTouchQueueMode(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 1)
	qm := h.popQ("q", nil)
	g := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all"))
	// The queue-mode lease id is foreign to group g's cursor.
	out := h.ackMsg(qm.Messages[0], "completed", "g")
	assert.False(t, out.Success)
	assert.True(t, h.ackMsg(g.Messages[0], "completed", "g").Success)
	assert.True(t, h.ackMsg(qm.Messages[0], "completed", "").Success)
}

func TestAckBadRequestsChangeNothing(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	p := h.popQ("q", vals("batch", "2"))
	for _, body := range []string{``, `[`, `{"acknowledgments":{}}`, `{"transactionId":5}`} {
		st, _, raw := h.do("POST", "/api/v1/ack/batch", body)
		assert.Equal(t, http.StatusBadRequest, st, body)
		assert.Contains(t, string(raw), `"code":"bad_body"`)
	}
	// An ack of an unknown message is refused per item and moves nothing.
	out := h.ack("/api/v1/ack", item{"transactionId": "nope", "partitionId": p.PartitionID, "leaseId": p.LeaseID})
	assert.False(t, out[0].Success)
	out = h.ack("/api/v1/ack", item{"transactionId": "nope", "partitionId": "424242"})
	assert.Equal(t, "no partition 424242", *out[0].Error)
	assert.Equal(t, 2, s.LeasedCount("q", ""))
	assert.Len(t, h.ackAll(p, ""), 2)
	assert.Equal(t, 0, s.LeasedCount("q", ""))
}

// After its lease expired, a batch still bounds a lease-less ack until the
// next pop claims again (2.x rsm/consume/ack.rs: has_lease is the lease on
// the cursor row, live or not): a message past the expired batch is not
// acked, and a lease-less `failed` settles the batch like a leased one.
func TestLeaseLessAckAfterExpiryIsBoundByTheExpiredBatch(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	configure(h, "q", item{"retryLimit": 0, "retryDelay": 0})
	h.pushN("q", "p", 3)
	p := h.popQ("q", vals("batch", "2", "leaseSeconds", "5"))
	require.Len(t, p.Messages, 2)
	clock.Advance(10 * time.Second)

	// #2's transactionId, read without touching any cursor.
	var fetch struct {
		Entries []struct {
			Records []struct {
				TransactionID string `json:"transactionId"`
			} `json:"records"`
		} `json:"entries"`
	}
	h.doJSON("POST", "/api/v1/fetch", item{"entries": []item{{"queue": "q", "partition": "p", "offset": 2}}}, http.StatusOK, &fetch)
	third := fetch.Entries[0].Records[0].TransactionID

	out := h.ack("/api/v1/ack", item{"transactionId": third, "partitionId": p.PartitionID, "status": "completed"})
	assert.False(t, out[0].Success, "#2 was never in the batch")

	// A lease-less failed ack of #0 spends the (zero) budget: dead-lettered.
	out = h.ack("/api/v1/ack", item{"transactionId": p.Messages[0].TransactionID, "partitionId": p.PartitionID, "status": "failed"})
	assert.True(t, out[0].Success)
	assert.True(t, out[0].DLQ)
	assert.True(t, out[0].LeaseReleased)
	assert.Equal(t, 1, s.DLQCount("q"))
	p2 := h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{1, 2}, ns(t, p2.Messages))
}

// TestAckFailedThenRetriesInOneBatch: PROTOCOL.md §4.1 for a batch ack
// [failed #0, retry #1, retry #2] under one lease: the failed charges the
// batch's budget once, the retries spend none, the partition is released;
// once the failed dead-letters, the retried messages after it are still
// given back, at once.
func TestAckFailedThenRetriesInOneBatch(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	configure(h, "q", item{"retryLimit": 2, "retryDelay": 1000, "deadLetterQueue": true})
	h.pushN("q", "p", 3)
	settle := func(p *tPop) []tAck {
		var acks []item
		for i, m := range p.Messages {
			st := "retry"
			if i == 0 {
				st = "failed"
			}
			acks = append(acks, item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": st})
		}
		out := h.ack("/api/v1/ack/batch", item{"acknowledgments": acks})
		require.Len(t, out, len(acks))
		for i, a := range out {
			assert.Truef(t, a.Success, "item %d", i)
			assert.Truef(t, a.LeaseReleased, "item %d: the partition is released", i)
		}
		return out
	}
	for round := range 2 { // the budget of 2 is spent once a round
		p := h.popQ("q", vals("batch", "10"))
		require.Equal(t, []int{0, 1, 2}, ns(t, p.Messages), "round %d", round)
		out := settle(p)
		assert.Falsef(t, out[0].DLQ, "round %d: budget left", round)
	}
	p := h.popQ("q", vals("batch", "10"))
	require.Equal(t, []int{0, 1, 2}, ns(t, p.Messages))
	out := settle(p)
	assert.True(t, out[0].DLQ, "the third failure dead-letters")
	assert.False(t, out[1].DLQ)
	p = h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{1, 2}, ns(t, p.Messages), "the retried rest comes back at once")
	assert.Equal(t, 1, s.DLQCount("q"))
}

// TestAckBatchDLQIsPerItem: in a batch ack, dlq:true marks only the items
// whose message this ack filed: a `failed` dropped by a queue without a
// dead-letter queue, or released for redelivery while budget remains,
// answers dlq:false (upstream rsm/facade/real.rs render_ack).
func TestAckBatchDLQIsPerItem(t *testing.T) {
	h := newHC(t, Start(t))
	batch := func(queue string, p *tPop, statuses ...string) []tAck {
		t.Helper()
		var acks []item
		for i, st := range statuses {
			m := p.Messages[i]
			acks = append(acks, item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": st})
		}
		return h.ack("/api/v1/ack/batch", item{"acknowledgments": acks})
	}
	dlqRows := func(queue string) int {
		t.Helper()
		var list tDLQ
		h.doJSON("GET", "/api/v1/dlq?queue="+queue, nil, http.StatusOK, &list)
		return len(list.Messages)
	}

	// No dead-letter queue, budget spent: #0 is filed (a dlq ack always
	// files), #1 is dropped.
	configure(h, "nodlq", item{"retryLimit": 0, "deadLetterQueue": false, "dlqAfterMaxRetries": false})
	h.pushN("nodlq", "p", 3)
	out := batch("nodlq", h.popQ("nodlq", vals("batch", "3")), "dlq", "failed")
	require.Len(t, out, 2)
	assert.True(t, out[0].Success && out[1].Success)
	assert.True(t, out[0].DLQ, "#0 was filed")
	assert.False(t, out[1].DLQ, "#1 was dropped, not filed")
	assert.Equal(t, 1, dlqRows("nodlq"))
	assert.Equal(t, []int{2}, ns(t, h.popQ("nodlq", vals("batch", "3")).Messages))

	// Budget left: #1 is released for redelivery.
	configure(h, "budget", item{"retryLimit": 3})
	h.pushN("budget", "p", 3)
	out = batch("budget", h.popQ("budget", vals("batch", "3")), "dlq", "failed")
	assert.True(t, out[0].DLQ)
	assert.False(t, out[1].DLQ, "#1 comes back, it was not filed")
	assert.Equal(t, 1, dlqRows("budget"))
}
