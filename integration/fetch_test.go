package integration

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// TestFetchByOffset: Fetch reads a partition by offset with no group, lease
// or ack: the same records for every caller, and nothing moves.
func TestFetchByOffset(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("fetch")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, q, "customer-42", numbered(0, 5, nil)...)
	ctx := testCtx(t)

	read, err := c.Queue(q).Fetch(ctx, []string{"customer-42"})
	if be.profile == queentest.Profile015 {
		// 0.15.1 has no fetch route: a typed error, not a broker error.
		if !errors.Is(err, queen.ErrNotSupported) {
			t.Fatalf("fetch on %s: %v, want ErrNotSupported", be.version, err)
		}
		return
	}
	if isNotSupported(err) {
		t.Skipf("broker %s cannot fetch by offset: %v", be.version, err)
	}
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	part, ok := read["customer-42"]
	if !ok || part.Err != nil {
		t.Fatalf("fetch result %+v: no records for customer-42", read)
	}
	var offsets []int64
	for i, r := range part.Records {
		offsets = append(offsets, r.Offset)
		var p struct{ N int }
		if err := jsonUnmarshal(r.Payload, &p); err != nil || p.N != i {
			t.Errorf("record at offset %d has payload %s, want n=%d", r.Offset, r.Payload, i)
		}
	}
	if !slices.Equal(offsets, []int64{0, 1, 2, 3, 4}) {
		t.Errorf("offsets %v, want [0 1 2 3 4]", offsets)
	}
	if part.HighWatermark != 5 || part.NextOffset() != 5 {
		t.Errorf("high watermark %d, next offset %d; want 5 and 5", part.HighWatermark, part.NextOffset())
	}

	from3, err := c.Queue(q).Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(3))
	if err != nil {
		t.Fatalf("fetch from 3: %v", err)
	}
	var got []int64
	for _, r := range from3["customer-42"].Records {
		got = append(got, r.Offset)
	}
	if !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("fetch from offset 3 read %v, want [3 4]", got)
	}

	past, err := c.Queue(q).Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(99))
	if err != nil {
		t.Fatalf("fetch from 99: %v", err)
	}
	if e := past["customer-42"].Err; !errors.Is(e, queen.ErrOffsetOutOfRange) {
		t.Errorf("fetch from offset 99 of 5: Err = %v, want ErrOffsetOutOfRange", e)
	}

	// Nothing moved: a group and queue mode still read all five.
	g := drain(t, c, c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(100), "g", 0)
	checkExactlyOnce(t, "a group after the fetches", nums(t, g), 0, 5)
	checkExactlyOnce(t, "queue mode after the fetches", nums(t, drain(t, c, c.Queue(q).Batch(100), "", 0)), 0, 5)
}
