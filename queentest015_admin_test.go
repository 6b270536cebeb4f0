package queen_test

import (
	"errors"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The admin calls against queentest's 0.15.1 profile, which answers as the
// real 0.15.1 broker does (issue 19): one test per quirk of that broker.

// deadLetter015 pushes n messages to queue/partition and dead-letters them
// for group, one second apart (newest failure last).
func deadLetter015(t *testing.T, c *queen.Client, clock *queentest.FakeClock, queue, partition, group string, n int) []*queen.Message {
	t.Helper()
	for i := range n {
		mustPush(t, c, queue, partition, i)
	}
	var out []*queen.Message
	for len(out) < n {
		msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("dead-lettered %d of %d", len(out), n)
		}
		for _, m := range msgs {
			if _, err := c.Transaction().Ack(m, "dlq", queen.AckOptions{ConsumerGroup: group, Error: "boom"}).Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}
		out = append(out, msgs...)
	}
	return out
}

func newBroker015(t *testing.T) (*queentest.Server, *queen.Client, *queentest.FakeClock) {
	t.Helper()
	clock := queentest.NewFakeClock(time.Date(2026, 10, 21, 12, 0, 0, 0, time.UTC))
	srv, c := newBroker(t, queentest.Broker015(), queentest.WithClock(clock))
	return srv, c, clock
}

// The limit that never cuts the list, the offset that empties it and the
// missing total: the client asks once for the whole list and pages it.
func TestQueentest015ListDLQPagesAndCounts(t *testing.T) {
	srv, c, clock := newBroker015(t)
	ctx := t.Context()
	msgs := deadLetter015(t, c, clock, "mail", "p1", "g", 3)
	srv.ResetCounters()

	page, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 3 || len(page.Messages) != 1 || page.Limit != 1 || page.Offset != 0 {
		t.Fatalf("Limit 1: total %d, %d messages, limit %d (want 3, 1, 1)", page.Total, len(page.Messages), page.Limit)
	}
	newest := msgs[2]
	dl := page.Messages[0]
	if dl.ID != "" || dl.MessageID != newest.ID || dl.TransactionID != newest.TransactionID || dl.PartitionID != newest.PartitionID ||
		dl.Offset != -1 || dl.Error != "boom" || dl.ConsumerGroup != "g" || dl.Partition != "p1" || dl.Queue != "mail" {
		t.Fatalf("entry = %+v, want message %s, no row id", dl, newest.ID)
	}
	if !dl.MessageCreatedAt.Equal(newest.CreatedAt.Truncate(time.Millisecond)) || dl.FailedAt.IsZero() {
		t.Fatalf("times: created %v (message %v), failed %v", dl.MessageCreatedAt, newest.CreatedAt, dl.FailedAt)
	}

	// An offset: a real 0.15.1 broker would answer nothing; the client asks
	// without it.
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Limit: 2, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 3 || len(page.Messages) != 2 || page.Messages[0].MessageID != msgs[1].ID || page.Messages[1].MessageID != msgs[0].ID {
		t.Fatalf("Limit 2 Offset 1: %+v", page)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Offset: 5})
	if err != nil || page.Total != 3 || len(page.Messages) != 0 {
		t.Fatalf("offset past the end: %+v, %v", page, err)
	}
	if n := srv.Requests(queentest.RouteDLQ); n != 3 {
		t.Fatalf("%d DLQ requests for 3 calls, want one each", n)
	}
}

// The partition and time filters the 0.15.1 broker does not read.
func TestQueentest015ListDLQFiltersByPartitionAndTime(t *testing.T) {
	_, c, clock := newBroker015(t)
	ctx := t.Context()
	a := deadLetter015(t, c, clock, "mail", "a", "g", 2)
	deadLetter015(t, c, clock, "mail", "b", "g", 1)

	page, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Partition: "a"})
	if err != nil || page.Total != 2 || len(page.Messages) != 2 {
		t.Fatalf("partition a: %+v, %v", page, err)
	}
	all, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{})
	if err != nil || all.Total != 3 {
		t.Fatalf("all: %+v, %v", all, err)
	}
	cut := all.Messages[1].FailedAt // the second newest failure
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{To: cut})
	if err != nil || page.Total != 1 || page.Messages[0].MessageID != a[0].ID {
		t.Fatalf("to %v: %+v, %v", cut, page, err)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{From: cut})
	if err != nil || page.Total != 2 {
		t.Fatalf("from %v: %+v, %v", cut, page, err)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{ConsumerGroup: "other"})
	if err != nil || page.Total != 0 || len(page.Messages) != 0 {
		t.Fatalf("other group: %+v, %v", page, err)
	}
}

// No replay route: ErrNotSupported, before any request once the client
// knows the generation, and on the broker's HTML 404 before.
func TestQueentest015ReplayDLQNotSupported(t *testing.T) {
	srv, c, clock := newBroker015(t)
	ctx := t.Context()
	msgs := deadLetter015(t, c, clock, "mail", "p1", "g", 1)

	// A fresh client does not know the generation: the broker's 404 page.
	fresh, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(ctx)
	dl := queen.DeadLetter{PartitionID: msgs[0].PartitionID, TransactionID: msgs[0].TransactionID}
	_, err = fresh.Admin().ReplayDLQ(ctx, dl)
	var be *queen.BrokerError
	if !errors.Is(err, queen.ErrNotSupported) || errors.As(err, &be) {
		t.Fatalf("replay on a 0.15.1 broker: %v, want ErrNotSupported without the raw page", err)
	}

	page, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("list: %+v, %v", page, err)
	}
	srv.ResetCounters()
	if _, err := c.Admin().ReplayDLQ(ctx, page.Messages[0]); !errors.Is(err, queen.ErrNotSupported) {
		t.Fatalf("replay after a list: %v", err)
	}
	if n := srv.Requests(queentest.RouteDLQ); n != 0 {
		t.Fatalf("%d requests sent for a replay the client knew to be unsupported", n)
	}
	if srv.DLQCount("mail") != 1 {
		t.Fatal("the dead letter went away")
	}
}

// A mistyped group is refused on both generations; on 0.15.1 a group
// whose pops found nothing has no position yet and is refused too.
func TestQueentestSeekRefusesAGroupWithoutPosition(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			_, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			mustPush(t, c, "orders", "p", 1, 2)
			ackAll(t, c, popAll(t, c, "orders", "workers"), "workers")

			for _, o := range []queen.SeekConsumerGroupOptions{{ToEnd: true}, {Timestamp: "2000-01-01T00:00:00Z"}} {
				if _, err := c.Admin().SeekConsumerGroup(ctx, "wrokers", "orders", o); !errors.Is(err, queen.ErrGroupNotFound) {
					t.Fatalf("seek of a typo (%+v): %v", o, err)
				}
				if _, err := c.Admin().SeekPartition(ctx, "wrokers", "orders", "p", o); !errors.Is(err, queen.ErrGroupNotFound) {
					t.Fatalf("partition seek of a typo (%+v): %v", o, err)
				}
			}
			groups, err := c.Admin().ListConsumerGroups(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range groups {
				if g.Name == "wrokers" {
					t.Fatalf("the refused seek created the group: %+v", g)
				}
			}
			res, err := c.Admin().SeekConsumerGroup(ctx, "workers", "orders", queen.SeekConsumerGroupOptions{Timestamp: "2000-01-01T00:00:00Z"})
			if err != nil || res.PartitionsUpdated != 1 {
				t.Fatalf("seek of the real group: %+v, %v", res, err)
			}
			if got := payloads(popAll(t, c, "orders", "workers")); len(got) != 2 {
				t.Fatalf("after the seek: %v", got)
			}

			res, err = c.Admin().SeekConsumerGroup(ctx, "fresh", "orders", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true})
			switch {
			case err != nil:
				t.Fatalf("CreateIfMissing: %v", err)
			case p == queentest.Profile2x && res.PartitionsUpdated != 1:
				t.Fatalf("2.x CreateIfMissing: %+v, want the group created", res)
			case p == queentest.Profile015 && res.PartitionsUpdated != 0:
				t.Fatalf("0.15.1 CreateIfMissing: %+v, want nothing moved (it moves only existing positions)", res)
			}
		})
	}
	// 0.15.1: a group whose only pop found the queue empty.
	_, c := newBroker(t, queentest.Broker015())
	ctx := t.Context()
	if msgs, err := c.Queue("empty").Group("idle").Wait(false).Pop(ctx); err != nil || len(msgs) != 0 {
		t.Fatalf("pop: %v, %v", msgs, err)
	}
	if _, err := c.Admin().SeekConsumerGroup(ctx, "idle", "empty", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("seek of a group with no position yet: %v", err)
	}
	if _, err := c.Admin().GetConsumerGroup(ctx, "idle"); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("detail of a group with no position yet: %v", err)
	}
}

// The queue and group views of 0.15.1 through the client: every field the
// broker sends, and its gaps as documented.
func TestQueentest015AdminViews(t *testing.T) {
	_, c, clock := newBroker015(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "p", 1, 2, 3)
	clock.Advance(10 * time.Minute)
	msgs, err := c.Queue("orders").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v, %v", msgs, err)
	}

	qs, err := c.Admin().ListQueues(ctx)
	if err != nil || len(qs) != 1 {
		t.Fatalf("queues: %+v, %v", qs, err)
	}
	q := qs[0]
	if q.Name != "orders" || q.ID == "" || q.Partitions != 1 || q.CreatedAt.IsZero() ||
		q.Messages.Total != 3 || q.Messages.Processing != 1 || q.Messages.Pending != 3 {
		t.Fatalf("queue = %+v (pending counts the processing one too)", q)
	}
	d, err := c.Admin().GetQueue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PartitionList) != 1 || d.Messages.Total != 3 || d.PartitionList[0].Messages.Total != 3 ||
		d.PartitionList[0].ID != msgs[0].PartitionID || d.PartitionList[0].NewestMessage.IsZero() || d.PartitionList[0].OldestMessage.IsZero() {
		t.Fatalf("detail = %+v", d)
	}
	if _, err := c.Admin().GetQueue(ctx, "nope"); !errors.Is(err, queen.ErrQueueNotFound) {
		t.Fatalf("missing queue: %v", err)
	}

	gs, err := c.Admin().ListConsumerGroups(ctx)
	if err != nil || len(gs) != 1 {
		t.Fatalf("groups: %+v, %v", gs, err)
	}
	g := gs[0]
	if g.Name != "g" || g.Queue != "orders" || g.PartitionCursors != 1 || g.PartitionsWithLag != 1 || g.TotalLag != -1 ||
		g.MaxTimeLag != 10*time.Minute || g.State != queen.GroupLagging || g.Conflation || g.Kind != "" {
		t.Fatalf("group = %+v", g)
	}
	gd, err := c.Admin().GetConsumerGroup(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	ps := gd.Queues["orders"].Partitions
	if len(ps) != 1 || ps[0].Partition != "p" || ps[0].OffsetLag != 3 || ps[0].TimeLag != 10*time.Minute || !ps[0].LeaseActive || ps[0].WorkerID == "" {
		t.Fatalf("group detail = %+v", gd)
	}

	h, err := c.Admin().Health(ctx)
	if err != nil || !h.Healthy || h.Engine != "" || h.Version != "1.0.0" || h.Database != "connected" || h.Server == "" ||
		h.WorkerID == 0 || h.WorkerStatus != "active" || string(h.SharedState) != `{"enabled":false}` || h.Raft != nil {
		t.Fatalf("health = %+v, %v", h, err)
	}
}

// DeleteConsumerGroup reads 0.15.1's answers: no queues list (Queues nil),
// no queueName in the group-wide one, an unknown group deleting nothing,
// and KeepMetadata sent as a deleteMetadata that broker reads.
func TestQueentest015DeleteConsumerGroup(t *testing.T) {
	_, c, _ := newBroker015(t)
	ctx := t.Context()
	for _, part := range []string{"p1", "p2"} {
		mustPush(t, c, "cgq", part, 1)
	}
	mustPush(t, c, "cgq2", "p1", 1)
	for _, q := range []string{"cgq", "cgq", "cgq2"} {
		msgs, err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("pop %s: %d, %v", q, len(msgs), err)
		}
	}
	res, err := c.Admin().DeleteConsumerGroup(ctx, "g", queen.DeleteConsumerGroupOptions{Queue: "cgq", KeepMetadata: true})
	want := queen.DeleteGroupResult{ConsumerGroup: "g", Queue: "cgq", DeletedPartitions: 2}
	if err != nil || res.ConsumerGroup != want.ConsumerGroup || res.Queue != want.Queue || res.DeletedPartitions != 2 || res.MetadataDeleted || res.Queues != nil {
		t.Fatalf("queue delete = %+v, %v; want %+v", res, err, want)
	}
	res, err = c.Admin().DeleteConsumerGroup(ctx, "g", queen.DeleteConsumerGroupOptions{})
	if err != nil || res.ConsumerGroup != "g" || res.Queue != "" || res.DeletedPartitions != 1 || !res.MetadataDeleted || res.Queues != nil {
		t.Fatalf("group delete = %+v, %v", res, err)
	}
	res, err = c.Admin().DeleteConsumerGroup(ctx, "ghost", queen.DeleteConsumerGroupOptions{Queue: "nowhere"})
	if err != nil || res.ConsumerGroup != "ghost" || res.Queue != "nowhere" || res.DeletedPartitions != 0 || !res.MetadataDeleted {
		t.Fatalf("unknown group = %+v, %v", res, err)
	}
}
