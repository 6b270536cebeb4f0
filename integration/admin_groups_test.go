package integration

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// groupRow returns the ListConsumerGroups row of (group, queue), if any.
func groupRow(t *testing.T, c *queen.Client, group, queue string) (queen.ConsumerGroup, bool) {
	t.Helper()
	rows, err := c.Admin().ListConsumerGroups(testCtx(t))
	if err != nil {
		t.Fatalf("ListConsumerGroups: %v", err)
	}
	i := slices.IndexFunc(rows, func(g queen.ConsumerGroup) bool { return g.Name == group && g.Queue == queue })
	if i < 0 {
		return queen.ConsumerGroup{}, false
	}
	return rows[i], true
}

// TestAdminConsumerGroupViews: a group that read part of two partitions is
// listed on its queue with its cursors, and its detail shows each
// partition's consumed and unread counts and lease.
func TestAdminConsumerGroupViews(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("groups")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(5 * time.Minute)})
	push(t, c, q, "p1", numbered(0, 3, nil)...)
	push(t, c, q, "p2", numbered(3, 2, nil)...)

	// A wildcard pop registers the group (a pinned one does not, on 2.x);
	// it reads one message of either partition, which is acked, and the
	// other partition gets one message leased and not acked.
	g := c.Queue(q).Group("readers").SubscriptionMode(queen.SubscriptionModeAll).Batch(1)
	got := popPushed(t, g)
	if len(got) != 1 {
		t.Fatalf("pop: %d messages, want 1", len(got))
	}
	ackAll(t, c, "readers", got)
	read, held := got[0].Partition, "p1"
	if read == "p1" {
		held = "p2"
	}
	if got := popPushed(t, c.Queue(q).Group("readers").Partition(held).Batch(1)); len(got) != 1 {
		t.Fatalf("pop %s: %d messages, want 1", held, len(got))
	}
	size := map[string]int64{"p1": 3, "p2": 2}

	row, ok := groupRow(t, c, "readers", q)
	if !ok {
		t.Fatalf("ListConsumerGroups has no row for readers on %s", q)
	}
	if row.PartitionCursors != 2 {
		t.Errorf("readers on %s: PartitionCursors = %d, want 2", q, row.PartitionCursors)
	}
	if row.PartitionsWithLag != 2 {
		t.Errorf("readers on %s: PartitionsWithLag = %d, want 2 (both have unread messages)", q, row.PartitionsWithLag)
	}
	if be.profile == queentest.Profile015 {
		if row.TotalLag != -1 {
			t.Errorf("readers on %s (0.15.1): TotalLag = %d, want -1 (not counted)", q, row.TotalLag)
		}
	} else if row.TotalLag != 4 {
		t.Errorf("readers on %s: TotalLag = %d, want 4", q, row.TotalLag)
	}
	if row.State != queen.GroupStable {
		t.Errorf("readers on %s: State = %q, want Stable", q, row.State)
	}

	d, err := a.GetConsumerGroup(ctx, "readers")
	if err != nil {
		t.Fatalf("GetConsumerGroup(readers): %v", err)
	}
	st, ok := d.Queues[q]
	if !ok {
		t.Fatalf("GetConsumerGroup(readers) has no queue %s", q)
	}
	if d.Name != "readers" {
		t.Errorf("GetConsumerGroup.Name = %q", d.Name)
	}
	byName := map[string]queen.GroupPartitionState{}
	for _, p := range st.Partitions {
		byName[p.Partition] = p
	}
	pr, ph := byName[read], byName[held]
	if len(st.Partitions) != 2 || pr.Partition == "" || ph.Partition == "" {
		t.Fatalf("GetConsumerGroup(readers) on %s: partitions %+v, want p1 and p2", q, st.Partitions)
	}
	if pr.TotalConsumed != 1 || pr.OffsetLag != size[read]-1 || pr.LeaseActive {
		t.Errorf("%s (one acked) = consumed %d, lag %d, lease %v; want 1, %d, false", read, pr.TotalConsumed, pr.OffsetLag, pr.LeaseActive, size[read]-1)
	}
	if pr.LastConsumedAt.IsZero() && be.profile == queentest.Profile015 {
		// (A 2.x broker does not send it.)
		t.Errorf("%s: LastConsumedAt is zero after an ack", read)
	}
	if ph.TotalConsumed != 0 || ph.OffsetLag != size[held] || !ph.LeaseActive {
		t.Errorf("%s (one leased) = consumed %d, lag %d, lease %v; want 0, %d, true", held, ph.TotalConsumed, ph.OffsetLag, ph.LeaseActive, size[held])
	}

	// A group that never popped anywhere.
	_, err = a.GetConsumerGroup(ctx, unique("nobody"))
	if !errors.Is(err, queen.ErrGroupNotFound) {
		t.Errorf("GetConsumerGroup(unknown) = %v, want ErrGroupNotFound", err)
	}
	if _, err := a.GetConsumerGroup(ctx, ""); !errors.Is(err, queen.ErrEmptyGroup) {
		t.Errorf("GetConsumerGroup(\"\") = %v, want ErrEmptyGroup", err)
	}
}

// TestAdminConsumerGroupSubscription: the list reports how a group
// started: mode new with its time on both generations.
func TestAdminConsumerGroupSubscription(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("groups-sub")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	push(t, c, q, "", numbered(0, 2, nil)...)
	// A new-mode group reads only what comes after it registered.
	if got := popNow(t, c.Queue(q).Group("late").SubscriptionMode(queen.SubscriptionModeNew).Batch(10)); len(got) != 0 {
		t.Fatalf("a new-mode group popped %v of the backlog", nums(t, got))
	}
	push(t, c, q, "", numbered(2, 1, nil)...)
	got := popWithin(t, c.Queue(q).Group("late").Batch(10), 5*time.Second)
	checkExactlyOnce(t, "new-mode group after a later push", nums(t, got), 2, 1)
	ackAll(t, c, "late", got)

	row, ok := groupRow(t, c, "late", q)
	if !ok {
		t.Fatalf("ListConsumerGroups has no row for late on %s", q)
	}
	if row.SubscriptionMode != "new" {
		t.Errorf("late on %s: SubscriptionMode = %q, want new", q, row.SubscriptionMode)
	}
	if row.SubscriptionCreatedAt.IsZero() {
		t.Errorf("late on %s: SubscriptionCreatedAt is zero", q)
	}
}

// TestAdminDeleteConsumerGroup: deleting a group on one queue removes its
// positions there (and its registration), so it reads the queue from the
// start again; deleting an unknown group is not an error.
func TestAdminDeleteConsumerGroup(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q, other := unique("groups-del"), unique("groups-keep")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	newQueue(t, c, other, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	push(t, c, q, "p1", numbered(0, 2, nil)...)
	push(t, c, q, "p2", numbered(2, 1, nil)...)
	push(t, c, other, "", numbered(10, 1, nil)...)
	g := c.Queue(q).Group("gone").SubscriptionMode(queen.SubscriptionModeAll).Batch(10)
	checkExactlyOnce(t, "first read", nums(t, drain(t, c, g, "gone", 0)), 0, 3)
	checkExactlyOnce(t, "first read of the other queue",
		nums(t, drain(t, c, c.Queue(other).Group("gone").SubscriptionMode(queen.SubscriptionModeAll).Batch(10), "gone", 0)), 10, 1)

	res, err := a.DeleteConsumerGroup(ctx, "gone", queen.DeleteConsumerGroupOptions{Queue: q})
	if err != nil {
		t.Fatalf("DeleteConsumerGroup(gone, %s): %v", q, err)
	}
	if res.ConsumerGroup != "gone" || res.Queue != q {
		t.Errorf("DeleteConsumerGroup = %+v, want group gone on %s", res, q)
	}
	if res.DeletedPartitions != 2 {
		t.Errorf("DeleteConsumerGroup(gone, %s).DeletedPartitions = %d, want 2", q, res.DeletedPartitions)
	}
	if !res.MetadataDeleted {
		t.Errorf("DeleteConsumerGroup(gone, %s).MetadataDeleted = false, want true (the default)", q)
	}
	if _, ok := groupRow(t, c, "gone", q); ok {
		t.Errorf("ListConsumerGroups still lists gone on %s after its deletion", q)
	}
	if _, ok := groupRow(t, c, "gone", other); !ok {
		t.Errorf("ListConsumerGroups lost gone on %s, which was not deleted", other)
	}
	// Registered anew, the group reads the whole queue again; the other
	// queue's position is kept.
	checkExactlyOnce(t, "after the deletion", nums(t, drain(t, c, g, "gone", 0)), 0, 3)
	if left := popNow(t, c.Queue(other).Group("gone").Batch(10)); len(left) != 0 {
		t.Errorf("gone rereads %v on %s, whose position was not deleted", nums(t, left), other)
	}

	res, err = a.DeleteConsumerGroup(ctx, unique("never"), queen.DeleteConsumerGroupOptions{})
	if err != nil {
		t.Fatalf("DeleteConsumerGroup(unknown): %v", err)
	}
	if res.DeletedPartitions != 0 {
		t.Errorf("DeleteConsumerGroup(unknown).DeletedPartitions = %d, want 0", res.DeletedPartitions)
	}

	// Every queue at once.
	res, err = a.DeleteConsumerGroup(ctx, "gone", queen.DeleteConsumerGroupOptions{})
	if err != nil {
		t.Fatalf("DeleteConsumerGroup(gone, all queues): %v", err)
	}
	if res.Queue != "" {
		t.Errorf("DeleteConsumerGroup(gone, all queues).Queue = %q, want empty", res.Queue)
	}
	if res.DeletedPartitions < 3 {
		t.Errorf("DeleteConsumerGroup(gone, all queues).DeletedPartitions = %d, want at least 3 (2 on %s, 1 on %s)", res.DeletedPartitions, q, other)
	}
	if _, ok := groupRow(t, c, "gone", other); ok {
		t.Errorf("ListConsumerGroups still lists gone on %s after deleting it everywhere", other)
	}
}

// TestAdminSeekPartition: a group moved to the end of one partition skips
// its backlog there and keeps it on the others; a seek of one partition to
// a time either rereads from then (2.x) or is reported as not supported
// (0.15.1 seeks such a partition to its end).
func TestAdminSeekPartition(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("seek-part")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	push(t, c, q, "p1", numbered(0, 1, nil)...)
	push(t, c, q, "p2", numbered(1, 1, nil)...)
	g := c.Queue(q).Group("sp").SubscriptionMode(queen.SubscriptionModeAll).Batch(10)
	// One message each, so that the group has a position on both.
	checkExactlyOnce(t, "first read", nums(t, drain(t, c, g, "sp", 0)), 0, 2)
	push(t, c, q, "p1", numbered(10, 2, nil)...)
	push(t, c, q, "p2", numbered(20, 2, nil)...)

	res, err := a.SeekPartition(ctx, "sp", q, "p1", queen.SeekConsumerGroupOptions{ToEnd: true})
	if isNotSupported(err) {
		t.Skipf("broker %s cannot seek a partition: %v", be.version, err)
	}
	if err != nil {
		t.Fatalf("SeekPartition(p1, ToEnd): %v", err)
	}
	if res.Partition != "p1" || res.ConsumerGroup != "sp" || res.Queue != q || !res.ToEnd {
		t.Errorf("SeekPartition(p1, ToEnd) = %+v, want sp on %s/p1 to the end", res, q)
	}
	if res.PartitionsUpdated != 1 {
		t.Errorf("SeekPartition(p1, ToEnd).PartitionsUpdated = %d, want 1", res.PartitionsUpdated)
	}
	checkExactlyOnce(t, "after p1 was moved to its end", nums(t, drain(t, c, g, "sp", 0)), 20, 2)

	if _, err := a.SeekPartition(ctx, "sp", q, "", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrEmptyPartition) {
		t.Errorf("SeekPartition with no partition = %v, want ErrEmptyPartition", err)
	}
	if _, err := a.SeekPartition(ctx, unique("nobody"), q, "p1", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Errorf("SeekPartition of an unknown group = %v, want ErrGroupNotFound", err)
	}

	// To a time before everything: 2.x rereads p2 from the start; on
	// 0.15.1 (which would move p2 to its end) the client refuses it before
	// sending, and p2's message stays to be read.
	push(t, c, q, "p2", numbered(30, 1, nil)...)
	res, err = a.SeekPartition(ctx, "sp", q, "p2", queen.SeekConsumerGroupOptions{Timestamp: "2026-01-01T00:00:00Z"})
	if be.profile == queentest.Profile015 {
		if !errors.Is(err, queen.ErrNotSupported) {
			t.Fatalf("0.15.1 SeekPartition(p2, time) = %+v, %v; want ErrNotSupported", res, err)
		}
		if left := nums(t, drain(t, c, g, "sp", 0)); !slices.Equal(left, []int{30}) {
			t.Errorf("after a refused 0.15.1 SeekPartition(p2, time), sp reads %v; want [30] (p2 not moved)", left)
		}
		return
	}
	if err != nil {
		t.Fatalf("SeekPartition(p2, time): %v", err)
	}
	if res.ToEnd || res.Timestamp.IsZero() {
		t.Errorf("SeekPartition(p2, time) = %+v, want a time seek", res)
	}
	reread := nums(t, drain(t, c, g, "sp", 0))
	slices.Sort(reread)
	if want := []int{1, 20, 21, 30}; !slices.Equal(reread, want) {
		t.Errorf("after p2 was moved to 2026-01-01, sp reads %v; want %v (all of p2, nothing of p1)", reread, want)
	}
}
