package queen

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
)

// leaseCases are acks of a pop of three messages of one partition, and
// whether the partition's lease holds after them on each generation
// (PROTOCOL.md §4.1, §15-16, §19): a completed of some keeps it, of all
// ends it; retry and failed end it; dlq ends it on 2.x and is counted
// like a completed on 0.15.1.
var leaseCases = []struct {
	name          string
	acks          []AckStatus // of messages 0, 1, ... in order
	held2x, held1 bool
}{
	{"completed some", []AckStatus{StatusCompleted}, true, true},
	{"completed all", []AckStatus{StatusCompleted, StatusCompleted, StatusCompleted}, false, false},
	{"completed then retry", []AckStatus{StatusCompleted, StatusRetry, StatusRetry}, false, false},
	{"retry first", []AckStatus{StatusRetry}, false, false},
	{"failed first", []AckStatus{StatusFailed, StatusRetry, StatusRetry}, false, false},
	{"dlq first", []AckStatus{StatusDLQ}, false, true},
	{"dlq then completed", []AckStatus{StatusDLQ, StatusCompleted, StatusCompleted}, false, false},
}

// The loop's test fake keeps a partition's lease as the brokers do; the
// same cases run against queentest's two generations, which imitate them.
func TestFakeBrokerKeepsLeaseAsBrokersDo(t *testing.T) {
	for _, tc := range leaseCases {
		for _, dlqKeeps := range []bool{false, true} {
			want := tc.held2x
			if dlqKeeps {
				want = tc.held1
			}
			t.Run(fmt.Sprintf("fake/%s/dlqKeeps=%v", tc.name, dlqKeeps), func(t *testing.T) {
				f := newFakeBroker(3)
				f.dlqKeeps = dlqKeeps
				f.add("p", 4) // one more than a pop takes: something to claim once released
				res, err := f.pop(context.Background(), 0, true)
				if err != nil || len(res.messages) != 3 {
					t.Fatalf("pop: %v, %d messages", err, len(res.messages))
				}
				acks := make([]Settlement, len(tc.acks))
				for i, s := range tc.acks {
					acks[i] = Settlement{Message: res.messages[i], Status: s}
				}
				if _, err := f.settle(context.Background(), acks); err != nil {
					t.Fatal(err)
				}
				alive, err := f.renew(context.Background(), res.leaseID, 1)
				if err != nil || alive != want {
					t.Fatalf("renewal after %v: alive %v (%v), want %v", tc.acks, alive, err, want)
				}
				again, _ := f.pop(context.Background(), 0, true)
				if claimed := len(again.messages) > 0; claimed == want {
					t.Fatalf("after %v a pop took %d messages of the partition; lease held: %v", tc.acks, len(again.messages), want)
				}
			})
		}
	}
	for _, prof := range []queentest.Profile{queentest.Profile2x, queentest.Profile015} {
		for _, tc := range leaseCases {
			want := tc.held2x
			if prof == queentest.Profile015 {
				want = tc.held1
			}
			t.Run(fmt.Sprintf("queentest/%s/%s", prof, tc.name), func(t *testing.T) {
				srv := queentest.Start(t, queentest.WithProfile(prof))
				c, err := New(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = c.Close(context.Background()) }()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.Queue("q").Partition("p").Push(1, 2, 3).Execute(ctx); err != nil {
					t.Fatal(err)
				}
				msgs, err := c.Queue("q").Batch(3).Wait(false).Pop(ctx)
				if err != nil || len(msgs) != 3 {
					t.Fatalf("pop: %v, %d messages", err, len(msgs))
				}
				acks := make([]Settlement, len(tc.acks))
				for i, s := range tc.acks {
					acks[i] = Settlement{Message: msgs[i], Status: s}
				}
				if _, err := c.SettleBatch(ctx, acks, AckOptions{}); err != nil {
					t.Fatal(err)
				}
				res, err := c.Renew(ctx, msgs[0])
				if err != nil && !errors.Is(err, ErrLeaseLost) {
					t.Fatal(err)
				}
				if alive := len(res) == 1 && res[0].Success; alive != want {
					t.Fatalf("renewal after %v: alive %v, want %v", tc.acks, alive, want)
				}
			})
		}
	}
}
