package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// readCopies pops and acks (as group, from the start) until it has read
// want replayed copies (transaction id "dlq:...") of queue or 20 s pass,
// and returns the copies in delivery order. Originals it meets are acked
// and left out.
func readCopies(t *testing.T, c *queen.Client, queue, group string, want int) []*queen.Message {
	t.Helper()
	qb := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	var copies []*queen.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(copies) < want && time.Now().Before(deadline) {
		msgs := popNow(t, qb)
		if len(msgs) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ackAll(t, c, group, msgs)
		for _, m := range msgs {
			if strings.HasPrefix(m.TransactionID, "dlq:") {
				copies = append(copies, m)
			}
		}
	}
	if extra := popNow(t, qb); len(extra) > 0 {
		ackAll(t, c, group, extra)
		t.Errorf("group %s: %d more messages after the %d copies", group, len(extra), len(copies))
	}
	return copies
}

// TestDLQReplayAllTwice: 200 dead letters over two partitions, replayed
// twice with ReplayDeadLetters, store 200 copies, each partition's in the
// order of its originals, and leave no letter listed where the broker can
// remove them (both generations can). The copies reach every group: the
// sender that dead-lettered them and an audit group that had read the
// originals.
func TestDLQReplayAllTwice(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("replay-all")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(5 * time.Second), RetryLimit: queen.Ptr(0),
		DeadLetterQueue: queen.Ptr(true), DLQAfterMaxRetries: queen.Ptr(true)})
	push(t, c, q, "c1", numbered(0, 100, nil)...)
	push(t, c, q, "c2", numbered(100, 100, nil)...)
	if got := drain(t, c, c.Queue(q).Group("audit").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "audit", 0); len(got) != 200 {
		t.Fatalf("audit read %d messages, want 200", len(got))
	}
	sender := c.Queue(q).Group("sender").SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	for dead := 0; dead < 200; {
		msgs := popWithin(t, sender, visibleWithin)
		if len(msgs) == 0 {
			t.Fatalf("sender: dead-lettered %d of 200, then popped nothing", dead)
		}
		acks := make([]queen.Settlement, len(msgs))
		for i, m := range msgs {
			acks[i] = queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "endpoint down"}
		}
		if _, err := c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "sender"}); err != nil {
			t.Fatalf("dead-letter %d messages: %v", len(msgs), err)
		}
		dead += len(msgs)
	}
	eventually(t, 10*time.Second, "200 dead letters listed", func() bool {
		page, err := a.ListDLQ(ctx, q, queen.DLQListOptions{Limit: 1})
		if err != nil {
			t.Fatalf("ListDLQ: %v", err)
		}
		return page.Total == 200
	})

	rep, err := a.ReplayDeadLetters(ctx, q, queen.DLQListOptions{})
	if err != nil {
		t.Fatalf("first replay: %v (report: moved %d, kept %d)", err, rep.Moved, rep.Kept)
	}
	if rep.Moved != 200 || rep.Removed != 200 || rep.Kept != 0 || rep.Duplicate != 0 || rep.Gone != 0 {
		t.Errorf("first replay: moved %d, removed %d, kept %d, duplicate %d, gone %d; want 200 moved and removed",
			rep.Moved, rep.Removed, rep.Kept, rep.Duplicate, rep.Gone)
	}
	rep, err = a.ReplayDeadLetters(ctx, q, queen.DLQListOptions{})
	if err != nil || len(rep.Results) != 0 {
		t.Errorf("second replay: %d results (moved %d, kept %d, duplicate %d), %v; want nothing left to replay",
			len(rep.Results), rep.Moved, rep.Kept, rep.Duplicate, err)
	}
	checkDLQ(t, c, q, 0)

	for _, g := range []string{"sender", "audit"} {
		copies := readCopies(t, c, q, g, 200)
		checkExactlyOnce(t, g+" reads the copies", nums(t, copies), 0, 200)
		last := map[string]int{"c1": -1, "c2": 99}
		for _, m := range copies {
			if n := num(t, m); n <= last[m.Partition] {
				t.Fatalf("group %s: copy %d after %d in partition %s: out of order", g, n, last[m.Partition], m.Partition)
			} else {
				last[m.Partition] = n
			}
		}
	}
	// Every copy is one message: a group that starts now reads each once.
	fresh := readCopies(t, c, q, unique("fresh"), 200)
	checkExactlyOnce(t, "a new group reads the copies", nums(t, fresh), 0, 200)
	if be.profile == queentest.Profile015 {
		t.Logf("0.15.1: the originals were deleted with their letters; the copies carry transaction ids like %s", fresh[0].TransactionID)
	}
}
