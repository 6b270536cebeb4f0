package queen_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

type settleRec struct {
	mu     sync.Mutex
	events []queen.SettleEvent
}

func (r *settleRec) OnSettle(_ context.Context, e queen.SettleEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// The broker answers dlq per item, and the client reports what it says:
// in [dlq #0, failed #1] on a queue without a dead-letter queue whose
// budget is spent, only #0 was dead-lettered (#1 was dropped); with budget
// left, #1 comes back. AckResult.DLQ and the settle hook's answer follow
// the broker's per-item dlq, whatever status was sent.
func TestSettleBatchReportsDeadLettersPerItem(t *testing.T) {
	srv := queentest.Start(t)
	rec := &settleRec{}
	c, err := queen.New(srv.URL, queen.WithHooks(rec), queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })

	for _, tc := range []struct {
		queue string
		cfg   queen.QueueConfig
	}{
		{"nodlq", queen.QueueConfig{RetryLimit: queen.Ptr(0), DeadLetterQueue: queen.Ptr(false), DLQAfterMaxRetries: queen.Ptr(false)}},
		{"budget", queen.QueueConfig{RetryLimit: queen.Ptr(3)}},
	} {
		if _, err := c.Queue(tc.queue).Config(tc.cfg).Create().Execute(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustPush(t, c, tc.queue, "p", 0, 1, 2)
		msgs, err := c.Queue(tc.queue).Batch(3).Wait(false).Pop(t.Context())
		if err != nil || len(msgs) != 3 {
			t.Fatalf("%s: pop %d, %v", tc.queue, len(msgs), err)
		}
		res, err := c.SettleBatch(t.Context(), []queen.Settlement{
			{Message: msgs[0], Status: queen.StatusDLQ, Error: "poison"},
			{Message: msgs[1], Status: queen.StatusFailed, Error: "boom"},
		}, queen.AckOptions{})
		if err != nil {
			var ae *queen.AckError
			errors.As(err, &ae)
			t.Fatalf("%s: %v (%+v)", tc.queue, err, ae)
		}
		if !res[0].DLQ || res[1].DLQ {
			t.Errorf("%s: DLQ = %v, %v; want true, false", tc.queue, res[0].DLQ, res[1].DLQ)
		}
		rec.mu.Lock()
		e := rec.events[len(rec.events)-1]
		rec.mu.Unlock()
		if got := []queen.SettleAnswer{e.Messages[0].Answer, e.Messages[1].Answer}; got[0] != queen.AnswerDeadLettered || got[1] != queen.AnswerLeaseReleased {
			t.Errorf("%s: hook answers %v; want [%s %s]", tc.queue, got, queen.AnswerDeadLettered, queen.AnswerLeaseReleased)
		}
	}
}

// Replaying a dead letter whose copy is already stored changes nothing: the
// result is a duplicate, the row stays, and MessageID is empty (the 2.x
// broker names the zero UUID, no message).
func TestReplayDLQDuplicateReportsNoMessageID(t *testing.T) {
	_, c := newBroker(t)
	mustPush(t, c, "mail", "p", map[string]int{"n": 1})
	msgs, err := c.Queue("mail").Batch(1).Wait(false).Pop(t.Context())
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %d, %v", len(msgs), err)
	}
	if _, err := c.Settle(t.Context(), msgs[0], queen.StatusDLQ, queen.AckOptions{Error: "poison"}); err != nil {
		t.Fatal(err)
	}
	page, err := c.Admin().ListDLQ(t.Context(), "mail", queen.DLQListOptions{})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("dlq: %+v, %v", page, err)
	}
	dl := page.Messages[0]
	copied := mustPush(t, c, "mail", "p", queen.Item{Payload: 1, TransactionID: "dlq:" + dl.ID})
	res, err := c.Admin().ReplayDLQ(t.Context(), dl)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved || res.Result != "duplicate" || res.MessageID != "" || res.Offset != copied[0].Offset {
		t.Fatalf("replay = %+v; want a duplicate with no message id at offset %d", res, copied[0].Offset)
	}
	if page, _ := c.Admin().ListDLQ(t.Context(), "mail", queen.DLQListOptions{}); len(page.Messages) != 1 {
		t.Fatalf("the row went: %+v", page)
	}
}
