package integration

import (
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// TestSeek: a group that has read everything moves back to a time and reads
// from there again, then to the end and reads only what comes later.
func TestSeek(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("seek")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "", numbered(0, 3, nil)...)
	time.Sleep(20 * time.Millisecond) // the second push gets later timestamps
	push(t, c, q, "", numbered(3, 2, nil)...)

	g := c.Queue(q).Group("archiver").SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	all := drain(t, c, g, "archiver", 0)
	checkExactlyOnce(t, "first read", nums(t, all), 0, 5)
	var from time.Time
	for _, m := range all {
		if num(t, m) == 3 {
			from = m.CreatedAt
		}
	}
	if from.IsZero() {
		t.Fatal("message 3 has no createdAt; cannot seek to it")
	}

	seek := func(opts queen.SeekConsumerGroupOptions) {
		t.Helper()
		res, err := c.Admin().SeekConsumerGroup(testCtx(t), "archiver", q, opts)
		if isNotSupported(err) {
			t.Skipf("broker %s cannot seek: %v", be.version, err)
		}
		if err != nil {
			t.Fatalf("seek %+v: %v", opts, err)
		}
		if res.PartitionsUpdated < 1 {
			t.Errorf("seek %+v moved %d partition cursors, want 1", opts, res.PartitionsUpdated)
		}
	}

	ts := from.UTC().Format(time.RFC3339Nano)
	seek(queen.SeekConsumerGroupOptions{Timestamp: ts})
	checkExactlyOnce(t, "after a seek to "+ts, nums(t, drain(t, c, g, "archiver", 0)), 3, 2)

	seek(queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00Z"})
	checkExactlyOnce(t, "after a seek to before the first push", nums(t, drain(t, c, g, "archiver", 0)), 0, 5)

	// Half read, then to the end: the rest of the backlog is skipped.
	seek(queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00Z"})
	half := popNow(t, c.Queue(q).Group("archiver").Batch(2))
	ackAll(t, c, "archiver", half)
	seek(queen.SeekConsumerGroupOptions{ToEnd: true})
	if got := popNow(t, g); len(got) != 0 {
		t.Errorf("after a seek to the end, archiver reads %v; want nothing", nums(t, got))
	}
	push(t, c, q, "", numbered(5, 1, nil)...)
	checkExactlyOnce(t, "after the seek to the end and a new push", nums(t, drain(t, c, g, "archiver", 0)), 5, 1)

	// Another group never moved.
	checkExactlyOnce(t, "a group that did not seek", nums(t,
		drain(t, c, c.Queue(q).Group("other").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "other", 0)), 0, 6)
}
