package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// redeliveryWithin bounds the wait for a message that comes back after a
// failed or retry ack (at once: neither broker applies retryDelay) or an
// expired lease. It guards against a hang, it measures nothing: the longest
// delay these tests arrange is a lease of 2 s, and the waits end as soon as
// the message is back.
const redeliveryWithin = 20 * time.Second

// checkAttempt checks a message's delivery attempt, when the broker reports
// it (0.15.1 does not).
func checkAttempt(t *testing.T, m *queen.Message, want int) {
	t.Helper()
	if m.DeliveryAttempt != 0 && m.DeliveryAttempt != want {
		t.Errorf("message %d: deliveryAttempt = %d, want %d", num(t, m), m.DeliveryAttempt, want)
	}
}

// popOne pops within redeliveryWithin and fails unless it gets exactly
// message n.
func popOne(t *testing.T, qb *queen.QueueBuilder, n int, what string) *queen.Message {
	t.Helper()
	msgs := popWithin(t, qb, redeliveryWithin)
	if len(msgs) != 1 {
		t.Fatalf("%s: got %d messages %v, want message %d alone", what, len(msgs), nums(t, msgs), n)
	}
	if got := num(t, msgs[0]); got != n {
		t.Fatalf("%s: got message %d, want %d", what, got, n)
	}
	return msgs[0]
}

// TestFailedThenRedeliveredThenDeadLettered: a failed ack brings the message
// back, up to retryLimit times; after the last retry it is dead-lettered and
// the partition moves on.
func TestFailedThenRedeliveredThenDeadLettered(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("poison")
	const retryLimit = 2
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(retryLimit), RetryDelay: queen.Ptr(100 * time.Millisecond),
		DeadLetterQueue: queen.Ptr(true),
	})
	push(t, c, q, "", numbered(0, 2, nil)...)
	qb := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(1)

	for attempt := 1; attempt <= retryLimit+1; attempt++ {
		m := popOne(t, qb, 0, "delivery of the poison message")
		checkAttempt(t, m, attempt)
		res, err := c.Ack(testCtx(t), m, false, queen.AckOptions{ConsumerGroup: "g", Error: "boom"})
		if err != nil {
			t.Fatalf("attempt %d: failed ack: %v", attempt, err)
		}
		if last := attempt == retryLimit+1; res.DLQ != last && be.kind != kindURL {
			// 0.15.1 does not say; 2.x and queentest do.
			t.Errorf("attempt %d: ack result dlq = %v, want %v", attempt, res.DLQ, last)
		}
	}
	// Dead-lettered: the next message of the partition comes instead.
	next := popOne(t, qb, 1, "after the last retry")
	checkAttempt(t, next, 1)
	ackAll(t, c, "g", []*queen.Message{next})
	if again := popNow(t, qb); len(again) != 0 {
		t.Errorf("after the dead-letter, pop got %v, want nothing", nums(t, again))
	}
	checkDLQ(t, c, q, 1)
}

// TestRetrySpendsNothing: a retry ack gives the message back at once
// without spending its retry budget.
func TestRetrySpendsNothing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("retry")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(1), RetryDelay: queen.Ptr(100 * time.Millisecond),
		DeadLetterQueue: queen.Ptr(true),
	})
	push(t, c, q, "", numbered(0, 2, nil)...)
	qb := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(1)

	attempt := 0
	for range 3 {
		attempt++
		m := popOne(t, qb, 0, "after a retry ack")
		checkAttempt(t, m, attempt)
		if _, err := c.Settle(testCtx(t), m, queen.StatusRetry, queen.AckOptions{ConsumerGroup: "g"}); err != nil {
			t.Fatalf("retry ack: %v", err)
		}
	}
	// Three retries later the whole budget (one failure) is still there: the
	// first failure brings it back, the second dead-letters it.
	for fail := 1; fail <= 2; fail++ {
		attempt++
		m := popOne(t, qb, 0, "after three retries")
		checkAttempt(t, m, attempt)
		if _, err := c.Ack(testCtx(t), m, false, queen.AckOptions{ConsumerGroup: "g", Error: "boom"}); err != nil {
			t.Fatalf("failed ack %d: %v", fail, err)
		}
	}
	next := popOne(t, qb, 1, "after the budget is spent")
	ackAll(t, c, "g", []*queen.Message{next})
	checkDLQ(t, c, q, 1)
}

// TestDeadLetterAtOnce: a dlq ack files the message to the dead-letter
// queue at once, whatever its retry budget.
func TestDeadLetterAtOnce(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("dlq")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(5), DeadLetterQueue: queen.Ptr(true),
	})
	push(t, c, q, "", numbered(0, 2, nil)...)
	qb := c.Queue(q).Group("mailer").SubscriptionMode(queen.SubscriptionModeAll).Batch(1)

	m := popOne(t, qb, 0, "first delivery")
	res, err := c.Settle(testCtx(t), m, queen.StatusDLQ, queen.AckOptions{ConsumerGroup: "mailer", Error: "no such address"})
	if err != nil {
		t.Fatalf("dlq ack: %v", err)
	}
	if !res.Success {
		t.Errorf("dlq ack refused: %s", res.Error)
	}
	next := popOne(t, qb, 1, "after the dlq ack")
	ackAll(t, c, "mailer", []*queen.Message{next})
	if again := popNow(t, qb); len(again) != 0 {
		t.Errorf("the dead-lettered message came back: %v", nums(t, again))
	}
	checkDLQ(t, c, q, 1)
}

// TestExpiredLeaseIsRedelivered: a message whose lease runs out goes to the
// next worker, one delivery attempt more, without spending its retry
// budget; the old lease can no longer ack it.
func TestExpiredLeaseIsRedelivered(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("lease")
	newQueue(t, c, q, queen.QueueConfig{
		// 2 s: the check that the lease is live, right after the pop, has
		// that margin on a slow machine.
		LeaseTime: queen.Ptr(2 * time.Second), RetryLimit: queen.Ptr(1), DeadLetterQueue: queen.Ptr(true),
	})
	push(t, c, q, "", numbered(0, 1, nil)...)
	crashed, next := newClient(t), newClient(t)

	first := popOne(t, crashed.Queue(q).Batch(1), 0, "first delivery")
	checkAttempt(t, first, 1)
	if got := popNow(t, next.Queue(q).Batch(1)); len(got) != 0 {
		t.Fatalf("a second worker got %v while the lease is live", nums(t, got))
	}
	if be.srv != nil {
		if n := be.srv.LeasedCount(q, ""); n != 1 {
			t.Errorf("queentest: %d messages leased, want 1", n)
		}
	}

	// Two expiries with retryLimit 1: were an expiry charged, the message
	// would be dead-lettered by the second.
	second := popOne(t, next.Queue(q).Batch(1), 0, "after the first lease expired")
	checkAttempt(t, second, 2)
	if second.TransactionID != first.TransactionID {
		t.Errorf("redelivered transaction %s, want %s", second.TransactionID, first.TransactionID)
	}
	if second.LeaseID == first.LeaseID {
		t.Errorf("redelivery kept lease %s; want a new lease", first.LeaseID)
	}
	res, err := crashed.Ack(testCtx(t), first, true, queen.AckOptions{})
	var ackErr *queen.AckError
	if !errors.As(err, &ackErr) || res.Success {
		t.Errorf("ack under the expired lease: result %+v, err %v; want a refusal (*AckError)", res, err)
	}

	third := popOne(t, next.Queue(q).Batch(1), 0, "after the second lease expired")
	checkAttempt(t, third, 3)
	ackAll(t, next, "", []*queen.Message{third})
	if got := popNow(t, next.Queue(q).Batch(1)); len(got) != 0 {
		t.Errorf("after the ack, pop got %v, want nothing", nums(t, got))
	}
	checkDLQ(t, c, q, 0)
}

// TestRenewKeepsTheLease: renewing keeps a message leased well past
// leaseTime; nobody else gets it, and the late ack succeeds.
func TestRenewKeepsTheLease(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("renew")
	// Margins, not measurements: a 2 s lease, renewed every 300 ms by 2 s:
	// a renewal may come 1.7 s late before another worker could take the
	// message; the renewals go on for two and a half lease times.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(2 * time.Second)})
	push(t, c, q, "", numbered(0, 1, nil)...)
	slow, other := newClient(t), newClient(t)

	m := popOne(t, slow.Queue(q).Batch(1), 0, "first delivery")
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		time.Sleep(300 * time.Millisecond)
		res, err := slow.RenewFor(testCtx(t), 2*time.Second, m)
		if err != nil || len(res) != 1 || !res[0].Success {
			t.Fatalf("renew after %v: %+v, %v", time.Since(start).Round(time.Millisecond), res, err)
		}
		if got := popNow(t, other.Queue(q).Batch(1)); len(got) != 0 {
			t.Fatalf("after %v with renewals, another worker got %v", time.Since(start).Round(time.Millisecond), nums(t, got))
		}
	}
	if res, err := slow.Ack(testCtx(t), m, true, queen.AckOptions{}); err != nil || !res.Success {
		t.Fatalf("ack after %v under a renewed lease: %+v, %v", time.Since(start).Round(time.Millisecond), res, err)
	}
	if got := popNow(t, other.Queue(q).Batch(1)); len(got) != 0 {
		t.Errorf("after the ack, pop got %v, want nothing", nums(t, got))
	}
}

// checkDLQ checks that the queue's dead-letter queue holds want messages:
// through queentest's own count on the in-process broker (and through the
// client's DLQ listing, which must agree), through the listing elsewhere.
func checkDLQ(t *testing.T, c *queen.Client, queue string, want int) {
	t.Helper()
	if be.srv != nil {
		if got := be.srv.DLQCount(queue); got != want {
			t.Errorf("queentest: dead-letter queue of %s holds %d messages, want %d", queue, got, want)
		}
	}
	page, err := c.Admin().ListDLQ(testCtx(t), queue, queen.DLQListOptions{Limit: 100})
	if isNotSupported(err) {
		t.Logf("dead-letter rows of %s not listed: broker %s has no DLQ listing (%v)", queue, be.version, err)
		return
	}
	if err != nil {
		t.Fatalf("list the dead-letter queue of %s: %v", queue, err)
	}
	if len(page.Messages) != want {
		t.Errorf("ListDLQ(%s) = %d messages, want %d", queue, len(page.Messages), want)
	}
}
