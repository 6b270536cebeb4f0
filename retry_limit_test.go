package queen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The broker counts RetryLimit per partition and group across the leases
// that did not finish, not per message (QueueConfig.RetryLimit, Fail): with
// RetryLimit 2 and Batch(10), messages 1, 4 and 7 of one partition failing
// once each dead-letter message 7 at its first failure, retryCount 2. The
// same failures given back with Retry() dead-letter nothing.
func TestRetryLimitCountsAcrossUnfinishedLeases(t *testing.T) {
	for _, outcome := range []string{"fail", "retry"} {
		t.Run(outcome, func(t *testing.T) {
			e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) {
				q.RetryLimit, q.RetryDelay, q.DeadLetterQueue = 2, 0, true
			}))
			for i := 1; i <= 10; i++ {
				e.push("q", "p", map[string]int{"n": i})
			}
			var mu sync.Mutex
			failed := map[int]bool{}
			var completed []int
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cb := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Each().IdleMillis(300).
				Consume(ctx, func(_ context.Context, m *queen.Message) error {
					n := int(m.Data["n"].(float64))
					mu.Lock()
					defer mu.Unlock()
					if (n == 1 || n == 4 || n == 7) && !failed[n] {
						failed[n] = true
						return fmt.Errorf("message %d fails once", n)
					}
					completed = append(completed, n)
					return nil
				})
			if outcome == "retry" {
				cb.OnError(func(context.Context, *queen.Message, error) queen.Outcome { return queen.Retry() })
			}
			if err := cb.Execute(ctx); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			page, err := e.c.Admin().ListDLQ(ctx, "q", queen.DLQListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if outcome == "retry" {
				if len(page.Messages) != 0 || len(completed) != 10 {
					t.Fatalf("with Retry(): %d dead letters, completed %v; want none and all 10", len(page.Messages), completed)
				}
				return
			}
			if len(page.Messages) != 1 {
				t.Fatalf("dead letters = %+v, want message 7 alone", page.Messages)
			}
			dl := page.Messages[0]
			var body struct{ N int }
			if err := json.Unmarshal(dl.Payload, &body); err != nil || body.N != 7 || dl.RetryCount != 2 {
				t.Fatalf("dead letter = n %d (%v), retryCount %d; want n 7 with retryCount 2", body.N, err, dl.RetryCount)
			}
			want := []int{1, 2, 3, 4, 5, 6, 8, 9, 10}
			if fmt.Sprint(completed) != fmt.Sprint(want) {
				t.Fatalf("completed %v, want %v (7 dead-lettered at its first failure)", completed, want)
			}
		})
	}
}
