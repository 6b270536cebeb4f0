package queentest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tRenew struct {
	LeaseID        string  `json:"leaseId"`
	Success        bool    `json:"success"`
	Renewed        int     `json:"renewed"`
	NewExpiresAt   *string `json:"newExpiresAt"`
	ExpiresAt      *string `json:"expiresAt"`
	LeaseExpiresAt *string `json:"lease_expires_at"`
}

func TestLeaseExpiryRedeliversWithNewLeaseAndNextAttempt(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	configure(h, "q", item{"leaseTime": 30, "retryLimit": 1, "retryDelay": 0})
	h.pushN("q", "p", 2)
	p := h.popQ("q", vals("batch", "2"))
	assert.Equal(t, 2, s.LeasedCount("q", ""))

	clock.Advance(30 * time.Second)
	h.popEmpty("q", nil) // still live at exactly leaseTime
	clock.Advance(time.Second)
	assert.Equal(t, 0, s.LeasedCount("q", ""))
	p2 := h.popQ("q", vals("batch", "2"))
	assert.NotEqual(t, p.LeaseID, p2.LeaseID)
	assert.Equal(t, []int{0, 1}, ns(t, p2.Messages))
	assert.Equal(t, 2, p2.Messages[0].DeliveryAttempt)
	assert.Equal(t, 2, p2.Messages[1].DeliveryAttempt)

	// The old lease id is dead.
	assert.False(t, h.ackMsg(p.Messages[0], "completed", "").Success)

	// Expiry spent no retry: with retryLimit 1 the first failure after two
	// expiries still redelivers instead of dead-lettering.
	clock.Advance(31 * time.Second)
	p3 := h.popQ("q", vals("batch", "2"))
	assert.Equal(t, 3, p3.Messages[0].DeliveryAttempt)
	a := h.ackMsg(p3.Messages[0], "failed", "")
	assert.False(t, a.DLQ)
	assert.Equal(t, 0, s.DLQCount("q"))
	p4 := h.popQ("q", vals("batch", "2"))
	assert.Equal(t, 4, p4.Messages[0].DeliveryAttempt)
}

func TestLeaseSecondsOverridesTheQueueLease(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "p", 1)
	h.popQ("q", vals("leaseSeconds", "2"))
	clock.Advance(3 * time.Second)
	p := h.popQ("q", nil)
	assert.Equal(t, 2, p.Messages[0].DeliveryAttempt)
}

func TestRenewExtendsEveryPartitionOfTheLease(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "a", 1)
	h.pushN("q", "b", 1)
	p := h.popQ("q", vals("partitions", "2", "leaseSeconds", "10"))
	require.Equal(t, 2, p.PartitionsClaimed)

	clock.Advance(8 * time.Second)
	var r tRenew
	raw := h.doJSON("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 30}, http.StatusOK, &r)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	for _, k := range []string{"leaseId", "success", "renewed", "newExpiresAt", "expiresAt", "lease_expires_at"} {
		assert.Contains(t, generic, k)
	}
	assert.True(t, r.Success)
	assert.Equal(t, 2, r.Renewed, "both partitions of the pop")
	assert.Equal(t, p.LeaseID, r.LeaseID)
	want := isoMillis(t0.Add(38 * time.Second))
	assert.Equal(t, want, *r.NewExpiresAt)
	assert.Equal(t, want, *r.ExpiresAt)
	assert.Equal(t, want, *r.LeaseExpiresAt)

	clock.Advance(20 * time.Second) // t0+28s: past the first lease, inside the renewal
	h.popEmpty("q", vals("partitions", "2"))
	assert.Equal(t, 2, s.LeasedCount("q", ""))

	// Never shortens: renewing by 1 s keeps t0+38s.
	h.doJSON("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 1}, http.StatusOK, &r)
	assert.Equal(t, want, *r.NewExpiresAt)

	// An empty body is fine (60 s by default).
	st, _, _ := h.do("POST", "/api/v1/lease/"+p.LeaseID+"/extend", nil)
	assert.Equal(t, http.StatusOK, st)

	// After expiry it cannot be renewed.
	clock.Advance(2 * time.Minute)
	r = tRenew{}
	h.doJSON("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 30}, http.StatusOK, &r)
	assert.False(t, r.Success)
	assert.Equal(t, 0, r.Renewed)
	assert.Nil(t, r.NewExpiresAt)
	assert.Nil(t, r.ExpiresAt)
	assert.Nil(t, r.LeaseExpiresAt)
}

func TestRenewUnknownOrReleasedLease(t *testing.T) {
	h := newHC(t, Start(t))
	var r tRenew
	h.doJSON("POST", "/api/v1/lease/nope/extend", item{"seconds": 10}, http.StatusOK, &r)
	assert.False(t, r.Success)
	h.pushN("q", "p", 1)
	p := h.popQ("q", nil)
	h.ackAll(p, "")
	h.doJSON("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 10}, http.StatusOK, &r)
	assert.False(t, r.Success, "a released lease cannot be renewed")
}

func TestFakeClockWakesParkedPopForDelayedMessage(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	configure(h, "q", item{"delayedProcessing": 60})
	h.pushN("q", "p", 1)
	h.popEmpty("q", nil)
	done := make(chan *tPop, 1)
	go func() {
		_, got := h.pop("/api/v1/pop/queue/q", vals("wait", "true", "timeout", "60000"))
		done <- got
	}()
	for s.Requests(RoutePop) < 2 { // the long poll has reached the broker
		time.Sleep(time.Millisecond)
	}
	clock.Advance(time.Minute)
	// The margin is what the test tells apart: a pop the move did not wake
	// would answer empty after its 60 s.
	select {
	case got := <-done:
		require.NotNil(t, got)
		assert.Equal(t, 1, got.Messages[0].DeliveryAttempt)
	case <-time.After(30 * time.Second):
		t.Fatal("moving the FakeClock did not wake the parked pop")
	}
}

func TestWallClockLongPollSeesDelayedMessages(t *testing.T) {
	h := newHC(t, Start(t))
	configure(h, "q", item{"delayedProcessing": 1})
	start := time.Now()
	h.pushN("q", "p", 1)
	h.popEmpty("q", nil)
	// A 30 s long poll for a message due after 1 s: visible during the
	// poll, not at its end (at least the delay: a timer, no load breaks it).
	_, p := h.pop("/api/v1/pop/queue/q", vals("wait", "true", "timeout", "30000"))
	require.NotNil(t, p, "the delayed message becomes visible during the long poll")
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
}

func TestDelayedProcessingHidesMessagesUntilDue(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "q", item{"delayedProcessing": 10})
	h.pushN("q", "p", 1)
	clock.Advance(5 * time.Second)
	h.pushN("q", "p", 1)
	h.popEmpty("q", nil)
	clock.Advance(5 * time.Second)
	p := h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{0}, ns(t, p.Messages), "only the first is due")
	h.ackAll(p, "")
	clock.Advance(5 * time.Second)
	p = h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{0}, ns(t, p.Messages))
	assert.EqualValues(t, 1, p.Messages[0].Offset)
}

func TestWithDefaultQueueConfigAppliesToImplicitQueues(t *testing.T) {
	cfg := DefaultQueueConfig()
	cfg.RetryLimit = 0
	cfg.DeadLetterQueue, cfg.DLQAfterMaxRetries = false, false
	cfg.LeaseTime = 0 // means the default 60 s
	cfg.RetryDelay = 0
	s := Start(t, WithDefaultQueueConfig(cfg))
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	var q struct{ Options map[string]any }
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusOK, &q)
	assert.EqualValues(t, 0, q.Options["retryLimit"])
	assert.EqualValues(t, 60, q.Options["leaseTime"])
	assert.Equal(t, false, q.Options["deadLetterQueue"])
	p := h.popQ("q", vals("batch", "1"))
	h.ackMsg(p.Messages[0], "failed", "")
	assert.Equal(t, 0, s.DLQCount("q"), "dropped at once: retryLimit 0, no DLQ")
	p = h.popQ("q", vals("batch", "1"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
}

// deliveryAttempt is counted per claim, as the 2.x broker does
// (rsm/consume/pop.rs claim_one): a claim starting where the previous claim
// of the cursor started is a redelivery (+1), a claim starting anywhere else
// is attempt 1, and every message of a claim carries the claim's attempt. A
// partial ack moves the start marker to the first unacked message; an ack
// that settles the batch clears it.
func TestDeliveryAttemptIsCountedPerClaim(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "q", item{"leaseTime": 10, "retryDelay": 0})
	h.pushN("q", "p", 6)

	// #0 alone, expired, then #0..#2 in one claim from the same start.
	p := h.popQ("q", vals("batch", "1"))
	assert.Equal(t, 1, p.Messages[0].DeliveryAttempt)
	clock.Advance(11 * time.Second)
	p = h.popQ("q", vals("batch", "3"))
	require.Len(t, p.Messages, 3)
	for _, m := range p.Messages {
		assert.Equal(t, 2, m.DeliveryAttempt, "every message of the claim carries its attempt")
	}

	// A partial ack moves the marker: expiry then redelivers #1.. as attempt 3.
	assert.True(t, h.ackMsg(p.Messages[0], "completed", "").Success)
	clock.Advance(11 * time.Second)
	p = h.popQ("q", vals("batch", "3"))
	assert.Equal(t, []int{1, 2, 3}, ns(t, p.Messages))
	assert.Equal(t, 3, p.Messages[0].DeliveryAttempt)
	assert.Equal(t, 3, p.Messages[2].DeliveryAttempt)

	// [completed #1, failed #2]: the redelivery starts elsewhere, attempt 1.
	out := h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{
		{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID, "status": "completed"},
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": p.LeaseID, "status": "failed"},
	}})
	require.True(t, out[0].Success && out[1].Success)
	p = h.popQ("q", vals("batch", "2"))
	assert.Equal(t, []int{2, 3}, ns(t, p.Messages))
	assert.Equal(t, 1, p.Messages[0].DeliveryAttempt)

	// A retry of the claim's first message comes back from the same start.
	assert.True(t, h.ackMsg(p.Messages[0], "retry", "").Success)
	p = h.popQ("q", vals("batch", "2"))
	assert.Equal(t, []int{2, 3}, ns(t, p.Messages))
	assert.Equal(t, 2, p.Messages[1].DeliveryAttempt)

	// Settling the batch clears the marker; the next claim is attempt 1.
	h.ackAll(p, "")
	p = h.popQ("q", vals("batch", "2"))
	assert.Equal(t, []int{4, 5}, ns(t, p.Messages))
	assert.Equal(t, 1, p.Messages[0].DeliveryAttempt)
}

// A renew body the broker cannot read means the default 60 s, never a 400
// (2.x handlers/data.rs handle_lease_extend).
func TestRenewUnreadableBodyMeansSixtySeconds(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "p", 1)
	p := h.popQ("q", vals("leaseSeconds", "5"))
	want := isoMillis(t0.Add(60 * time.Second))
	for _, body := range []string{`{`, `{"seconds":"ten"}`, `[1]`, `{"seconds":null}`} {
		st, _, raw := h.do("POST", "/api/v1/lease/"+p.LeaseID+"/extend", body)
		require.Equal(t, http.StatusOK, st, body)
		var r tRenew
		require.NoError(t, json.Unmarshal(raw, &r), body)
		assert.True(t, r.Success, body)
		require.NotNil(t, r.NewExpiresAt, body)
		assert.Equal(t, want, *r.NewExpiresAt, body)
	}
}
