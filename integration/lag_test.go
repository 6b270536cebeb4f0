package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// lagOf renders a lag as "PENDING a:N b:N ...", leaving out the empty
// Default partition a 0.15.1 broker creates with every queue.
func lagOf(l queen.GroupLag) string {
	s := fmt.Sprint(l.Pending)
	for _, p := range l.Partitions {
		if p.Partition != "Default" || p.Pending != 0 {
			s += fmt.Sprintf(" %s:%d", p.Partition, p.Pending)
		}
	}
	return s
}

// TestLagAndDrain: a group's lag on a queue is one call, right with a
// partition the group read, one it holds a leased message of and one it
// never read; the wait for it to drain is one call too, bounded by its
// context, and returns once a worker has settled everything.
func TestLagAndDrain(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("lag")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "a", numbered(0, 3, nil)...)
	push(t, c, q, "b", numbered(3, 2, nil)...)
	push(t, c, q, "c", numbered(5, 4, nil)...)
	awaitPushed(t, c, q, 9)

	if l, err := a.Lag(ctx, q, "billing"); err != nil || lagOf(l) != "9 a:3 b:2 c:4" || l.Drained() {
		t.Fatalf("lag of a group that read nothing = %s, %v; want 9 a:3 b:2 c:4", lagOf(l), err)
	}
	pinned := func(p string, n int) *queen.QueueBuilder {
		return c.Queue(q).Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Partition(p).Batch(n)
	}
	readA := popPushed(t, pinned("a", 3))
	if len(readA) != 3 {
		t.Fatalf("pop a: %d messages, want 3", len(readA))
	}
	ackAll(t, c, "billing", readA)
	held := popPushed(t, pinned("b", 1))
	if len(held) != 1 {
		t.Fatalf("pop b: %d messages, want 1", len(held))
	}
	l, err := a.Lag(ctx, q, "billing")
	if err != nil || lagOf(l) != "6 a:0 b:2 c:4" {
		t.Fatalf("lag = %s, %v; want 6 a:0 b:2 (one leased) c:4 (never read)", lagOf(l), err)
	}
	for _, p := range l.Partitions {
		if p.Estimated && p.Partition != "c" && p.Partition != "Default" {
			t.Errorf("partition %s counted from statistics, though the group has a position there", p.Partition)
		}
	}

	short, cancel := context.WithTimeout(ctx, time.Second)
	l, err = a.AwaitDrained(short, q, "billing", queen.DrainOptions{Interval: 100 * time.Millisecond})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || l.Pending != 6 {
		t.Fatalf("AwaitDrained with work left = %s, %v; want the deadline with 6 pending", lagOf(l), err)
	}

	ackAll(t, c, "billing", held)
	worker := make(chan []*queen.Message, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the wait below starts first
		var got []*queen.Message
		qb := c.Queue(q).Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(10)
		for deadline := time.Now().Add(10 * time.Second); len(got) < 5 && time.Now().Before(deadline); {
			msgs, err := qb.Wait(false).Pop(ctx)
			if err != nil || len(msgs) == 0 {
				time.Sleep(25 * time.Millisecond)
				continue
			}
			acks := make([]queen.Settlement, len(msgs))
			for i, m := range msgs {
				acks[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
			}
			if _, err := c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "billing"}); err != nil {
				break
			}
			got = append(got, msgs...)
		}
		worker <- got
	}()
	l, err = a.AwaitDrained(ctx, q, "billing", queen.DrainOptions{Interval: 100 * time.Millisecond})
	rest := <-worker
	if err != nil || !l.Drained() || lagOf(l) != "0 a:0 b:0 c:0" {
		t.Fatalf("AwaitDrained = %s, %v; want drained", lagOf(l), err)
	}
	checkExactlyOnce(t, "the worker", nums(t, rest), 4, 5)
}
