package integration

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// TestTransactionAllOrNothing: acks and pushes of a transaction are applied
// together; when one ack is refused the push of the same transaction is
// rolled back too.
func TestTransactionAllOrNothing(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	orders, invoices := unique("tx-orders"), unique("tx-invoices")
	newQueue(t, c, orders, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	newQueue(t, c, invoices, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, orders, "", numbered(0, 2, nil)...)
	billing := c.Queue(orders).Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(1)
	opts := queen.AckOptions{ConsumerGroup: "billing"}

	first := popOne(t, billing, 0, "first order")
	res, err := c.Transaction().
		Ack(first, queen.StatusCompleted, opts).
		Queue(invoices).Push(map[string]any{"n": 100}).
		Commit(testCtx(t))
	if err != nil || !res.Committed {
		t.Fatalf("transaction ack + push: %+v, %v", res, err)
	}

	second := popOne(t, billing, 1, "second order, after the first was acked in the transaction")

	// The first order is already settled: acking it again is refused, and
	// the invoice pushed with it must not appear.
	res, err = c.Transaction().
		Queue(invoices).Push(map[string]any{"n": 999}).
		Ack(first, queen.StatusCompleted, opts).
		Commit(testCtx(t))
	var txErr *queen.TransactionError
	if !errors.Is(err, queen.ErrRolledBack) || !errors.As(err, &txErr) {
		t.Fatalf("transaction with a stale ack: result %+v, err %v; want a rollback (*TransactionError)", res, err)
	}
	if res == nil || res.Committed {
		t.Errorf("rolled back transaction reports %+v, want Committed false", res)
	}

	// The second order's lease was not touched by the rollback.
	if res, err := c.Transaction().
		Ack(second, queen.StatusCompleted, opts).
		Queue(invoices).Push(map[string]any{"n": 101}).
		Commit(testCtx(t)); err != nil || !res.Committed {
		t.Fatalf("transaction after the rollback: %+v, %v", res, err)
	}

	got := nums(t, drain(t, c, c.Queue(invoices).Batch(100), "", 0))
	if !slices.Equal(got, []int{100, 101}) {
		t.Errorf("invoices %v, want [100 101]: the rolled back push must not be stored", got)
	}
	if rest := popNow(t, billing); len(rest) != 0 {
		t.Errorf("billing still reads %v; both orders were acked in transactions", nums(t, rest))
	}
}
