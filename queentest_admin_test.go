package queen_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// Behaviour of the calls of issue 6 against the in-memory broker.

func newBroker(t *testing.T, opts ...queentest.Option) (*queentest.Server, *queen.Client) {
	t.Helper()
	srv := queentest.Start(t, opts...)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return srv, c
}

func mustPush(t *testing.T, c *queen.Client, queue, partition string, payloads ...any) []queen.PushResult {
	t.Helper()
	res, err := c.Queue(queue).Partition(partition).Push(payloads...).Execute(t.Context())
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

func popAll(t *testing.T, c *queen.Client, queue, group string) []*queen.Message {
	t.Helper()
	msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100).Wait(false).Pop(t.Context())
	if err != nil {
		t.Fatalf("pop: %v", err)
	}
	return msgs
}

func payloads(msgs []*queen.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Raw)
	}
	return out
}

func ackAll(t *testing.T, c *queen.Client, msgs []*queen.Message, group string) {
	t.Helper()
	s := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		s[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
	}
	if _, err := c.SettleBatch(t.Context(), s, queen.AckOptions{ConsumerGroup: group}); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func TestQueentestSeekThenPop(t *testing.T) {
	t0 := time.Date(2026, 10, 21, 12, 0, 0, 0, time.UTC)
	clock := queentest.NewFakeClock(t0)
	_, c := newBroker(t, queentest.WithClock(clock))
	ctx := t.Context()

	mustPush(t, c, "events", "p", 1)
	clock.Advance(time.Hour)
	mustPush(t, c, "events", "p", 2, 3)

	first := popAll(t, c, "events", "archiver")
	if got := payloads(first); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("first pop = %v", got)
	}
	ackAll(t, c, first, "archiver")
	if got := popAll(t, c, "events", "archiver"); len(got) != 0 {
		t.Fatalf("after ack: %v", payloads(got))
	}

	// Back to half an hour after the first push: messages 2 and 3 again.
	res, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: t0.Add(30 * time.Minute).Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsUpdated != 1 || res.ToEnd {
		t.Fatalf("seek = %+v", res)
	}
	again := popAll(t, c, "events", "archiver")
	if got := payloads(again); !slices.Equal(got, []string{"2", "3"}) {
		t.Fatalf("after seek to a time: %v", got)
	}

	// To the end: the leased backlog is skipped (the seek drops the lease),
	// and only what is pushed later comes.
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "events", queen.SeekConsumerGroupOptions{ToEnd: true}); err != nil {
		t.Fatal(err)
	}
	if got := popAll(t, c, "events", "archiver"); len(got) != 0 {
		t.Fatalf("after seek to end: %v", payloads(got))
	}
	mustPush(t, c, "events", "p", 4)
	if got := payloads(popAll(t, c, "events", "archiver")); !slices.Equal(got, []string{"4"}) {
		t.Fatalf("after a new push: %v", got)
	}

	// Per partition.
	if _, err := c.Admin().SeekPartition(ctx, "archiver", "events", "p", queen.SeekConsumerGroupOptions{Timestamp: "2000-01-01T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	if got := payloads(popAll(t, c, "events", "archiver")); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("after partition seek to the start: %v", got)
	}
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "missing", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("seek of a queue the group does not read: %v", err)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "missing", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true}); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("seek of a missing queue: %v", err)
	}
}

func TestQueentestTransactionAllOrNothing(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "tasks", "p", map[string]int{"n": 1})
	msgs := popAll(t, c, "tasks", "workers")
	if len(msgs) != 1 {
		t.Fatalf("popped %d", len(msgs))
	}
	msg := msgs[0]

	// An ack under a lease that is not the live one rolls the push back.
	stale := *msg
	stale.LeaseID = "01a22ab9-0000-7000-8000-000000000000"
	res, err := c.Transaction().
		Queue("results").Partition("p").Push(map[string]string{"done": "1"}).
		Ack(&stale, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).
		Commit(ctx)
	var te *queen.TransactionError
	if !errors.As(err, &te) || res == nil || res.Committed {
		t.Fatalf("bad ack: err = %v, res = %+v; want a rollback", err, res)
	}
	read, err := c.Queue("results").Fetch(ctx, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(read["p"].Records); n != 0 || read["p"].HighWatermark != 0 {
		t.Fatalf("rolled back push left %d records (hw %d)", n, read["p"].HighWatermark)
	}

	// The same with the real lease commits both.
	res, err = c.Transaction().
		Queue("results").Partition("p").Push(map[string]string{"done": "1"}).
		Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).
		Commit(ctx)
	if err != nil || !res.Committed {
		t.Fatalf("commit: %v, %+v", err, res)
	}
	if len(res.Results) != 2 || res.Results[0].Type != queen.TransactionPushOp || res.Results[1].Type != queen.TransactionAckOp {
		t.Fatalf("results = %+v", res.Results)
	}
	read, err = c.Queue("results").Fetch(ctx, []string{"p"})
	if err != nil || len(read["p"].Records) != 1 || string(read["p"].Records[0].Payload) != `{"done":"1"}` {
		t.Fatalf("results after commit: %+v, %v", read["p"], err)
	}
	if got := popAll(t, c, "tasks", "workers"); len(got) != 0 {
		t.Fatalf("acked task came back: %v", payloads(got))
	}

	// The same transaction again: its ack's lease is settled, so it rolls
	// back, and the push is not stored twice.
	_, err = c.Transaction().Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).Commit(ctx)
	if !errors.Is(err, queen.ErrRolledBack) {
		t.Fatalf("second ack of a settled lease: %v", err)
	}
}

func TestQueentestFetch(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "customer-42", map[string]int{"total": 10}, map[string]int{"total": 20}, "third")

	read, err := c.Queue("orders").Fetch(ctx, []string{"customer-42", "empty"})
	if err != nil {
		t.Fatal(err)
	}
	pr := read["customer-42"]
	if pr.Err != nil || pr.HighWatermark != 3 || pr.LogStartOffset != 0 || len(pr.Records) != 3 {
		t.Fatalf("read = %+v", pr)
	}
	for i, r := range pr.Records {
		if r.Offset != int64(i) || r.TransactionID == "" || r.Timestamp.IsZero() {
			t.Fatalf("record %d = %+v", i, r)
		}
	}
	if string(pr.Records[2].Payload) != `"third"` {
		t.Fatalf("payload = %s", pr.Records[2].Payload)
	}
	if e := read["empty"]; e.Err != nil || len(e.Records) != 0 || e.HighWatermark != 0 {
		t.Fatalf("empty partition = %+v", e)
	}

	// A position of its own: continue from NextOffset; nothing moved for
	// anybody else.
	more, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(pr.Records[1].Offset))
	if err != nil || len(more["customer-42"].Records) != 2 || more["customer-42"].NextOffset() != 3 {
		t.Fatalf("from 1: %+v, %v", more["customer-42"], err)
	}
	if got := popAll(t, c, "orders", "billing"); len(got) != 3 {
		t.Fatalf("a fetch moved a cursor: the group got %d", len(got))
	}

	far, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(9))
	if err != nil || !errors.Is(far["customer-42"].Err, queen.ErrOffsetOutOfRange) {
		t.Fatalf("from 9: %v, %v", far["customer-42"].Err, err)
	}
	missing, err := c.Queue("nope").Fetch(ctx, []string{"p"})
	if err != nil || !errors.Is(missing["p"].Err, queen.ErrUnknownPartition) {
		t.Fatalf("unknown queue: %v, %v", missing["p"].Err, err)
	}

	// A page budget of one byte reads one record per fetch; the iterator
	// still reads to the end.
	small, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchMaxBytes(1))
	if err != nil || len(small["customer-42"].Records) != 1 {
		t.Fatalf("max bytes 1: %+v, %v", small["customer-42"], err)
	}
	var offsets []int64
	for rec, err := range c.Queue("orders").ReadPartition(ctx, "customer-42", 1) {
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, rec.Offset)
	}
	if !slices.Equal(offsets, []int64{1, 2}) {
		t.Fatalf("ReadPartition from 1 = %v", offsets)
	}
}

func TestQueentestFetchWaitsForAPush(t *testing.T) {
	srv, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "live", "p", 0)
	done := make(chan queen.FetchResult, 1)
	go func() {
		read, err := c.Queue("live").Fetch(ctx, []string{"p"}, queen.FetchFrom(1), queen.FetchWait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- read
	}()
	if err := srv.AwaitRequests(ctx, queentest.RouteFetch, 1); err != nil { // the fetch has reached the broker
		t.Fatal(err)
	}
	mustPush(t, c, "live", "p", 1)
	select {
	case read := <-done:
		if recs := read["p"].Records; len(recs) != 1 || recs[0].Offset != 1 {
			t.Fatalf("long poll got %+v", read["p"])
		}
	case <-time.After(20 * time.Second): // the margin tells a wake-up from the 30 s wait
		t.Fatal("the fetch did not wake up on the push")
	}
}

func TestQueentestDLQAfterDlqAck(t *testing.T) {
	srv, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "emails", "p1", map[string]string{"to": "nobody@example.com"}, map[string]string{"to": "ok@example.com"})
	msgs := popAll(t, c, "emails", "mailer")
	if len(msgs) != 2 {
		t.Fatalf("popped %d", len(msgs))
	}
	opts := queen.AckOptions{ConsumerGroup: "mailer", Error: "mailbox does not exist"}
	if _, err := c.Transaction().Ack(msgs[0], "dlq", opts).Ack(msgs[1], "completed", opts).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.DLQCount("emails"); n != 1 {
		t.Fatalf("DLQCount = %d", n)
	}

	page, err := c.Admin().ListDLQ(ctx, "emails", queen.DLQListOptions{ConsumerGroup: "mailer"})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 1 || len(page.Messages) != 1 {
		t.Fatalf("page = %+v", page)
	}
	dl := page.Messages[0]
	if dl.TransactionID != msgs[0].TransactionID || dl.Partition != "p1" || dl.ConsumerGroup != "mailer" ||
		string(dl.Payload) != `{"to":"nobody@example.com"}` || dl.Error != "mailbox does not exist" || dl.ID == "" || dl.FailedAt.IsZero() {
		t.Fatalf("dead letter = %+v", dl)
	}
	for name, o := range map[string]queen.DLQListOptions{
		"other group":     {ConsumerGroup: "other"},
		"other partition": {Partition: "p2"},
		"before":          {To: dl.FailedAt.Add(-time.Minute)},
		"after":           {From: dl.FailedAt.Add(time.Minute)},
	} {
		if p, err := c.Admin().ListDLQ(ctx, "emails", o); err != nil || len(p.Messages) != 0 {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
	}

	rr, err := c.Admin().ReplayDLQ(ctx, dl)
	if err != nil || !rr.Moved {
		t.Fatalf("replay: %+v, %v", rr, err)
	}
	if srv.DLQCount("emails") != 0 {
		t.Fatalf("row still in the DLQ")
	}
	back := popAll(t, c, "emails", "mailer")
	if len(back) != 1 || string(back[0].Raw) != `{"to":"nobody@example.com"}` || back[0].TransactionID != rr.TransactionID {
		t.Fatalf("replayed message = %v (txn %v), result %+v", payloads(back), back, rr)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().ReplayDLQ(ctx, dl); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("second replay: %v", err)
	}
}

func TestQueentestGroupsQueuesHealth(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "a", 1, 2)
	mustPush(t, c, "orders", "b", 3)
	msgs := popAll(t, c, "orders", "billing")
	ackAll(t, c, msgs[:1], "billing")

	groups, err := c.Admin().ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(groups, func(g queen.ConsumerGroup) bool { return g.Name == "billing" })
	if i < 0 || groups[i].Queue != "orders" || groups[i].SubscriptionMode != "all" || groups[i].TotalLag == 0 {
		t.Fatalf("groups = %+v", groups)
	}
	d, err := c.Admin().GetConsumerGroup(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if parts := d.Queues["orders"].Partitions; len(parts) == 0 {
		t.Fatalf("detail = %+v", d)
	}
	del, err := c.Admin().DeleteConsumerGroup(ctx, "billing", queen.DeleteConsumerGroupOptions{Queue: "orders"})
	if err != nil || del.DeletedPartitions == 0 || !del.MetadataDeleted {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().GetConsumerGroup(ctx, "billing"); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("deleted group: %v", err)
	}

	info, err := c.Admin().ConfigureQueue(ctx, "orders", queen.QueueConfig{RetryLimit: queen.Ptr(7)})
	if err != nil || info.Config.RetryLimit == nil || *info.Config.RetryLimit != 7 {
		t.Fatalf("configure: %+v, %v", info, err)
	}
	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Name != "orders" || qs[0].Partitions != 2 || qs[0].Messages.Total != 3 || *qs[0].Config.RetryLimit != 7 {
		t.Fatalf("queues = %+v", qs)
	}
	q, err := c.Admin().GetQueue(ctx, "orders")
	if err != nil || len(q.PartitionList) != 2 || q.PartitionList[0].Name != "a" || q.Messages.Total != 3 {
		t.Fatalf("queue = %+v, %v", q, err)
	}
	if del, err := c.Admin().DeleteQueue(ctx, "orders"); err != nil || !del.Deleted {
		t.Fatalf("delete queue: %+v, %v", del, err)
	}
	if _, err := c.Admin().GetQueue(ctx, "orders"); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("deleted queue: %v", err)
	}

	h, err := c.Admin().Health(ctx)
	if err != nil || !h.Healthy {
		t.Fatalf("health = %+v, %v", h, err)
	}
}

// The 2.x configure options beyond 0.15.1's are sent, kept by the broker and
// read back by GetQueue; a merge leaves them alone.
func TestQueentestConfigure2xOptions(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	info, err := c.Admin().ConfigureQueue(ctx, "lake", queen.QueueConfig{
		MinPopWaitTime: queen.Ptr(250 * time.Millisecond), DedupWindow: queen.Ptr(10 * time.Minute),
		RetentionSinkHold: queen.Ptr("s3-main"), RetentionSinkHoldMax: queen.Ptr(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin().ConfigureQueue(ctx, "lake", queen.QueueConfig{RetryLimit: queen.Ptr(2)}); err != nil {
		t.Fatal(err)
	}
	q, err := c.Admin().GetQueue(ctx, "lake")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []queen.QueueConfig{info.Config, q.Config} {
		if cfg.MinPopWaitTime == nil || *cfg.MinPopWaitTime != 250*time.Millisecond || cfg.DedupWindow == nil || *cfg.DedupWindow != 10*time.Minute ||
			cfg.RetentionSinkHold == nil || *cfg.RetentionSinkHold != "s3-main" ||
			cfg.RetentionSinkHoldMax == nil || *cfg.RetentionSinkHoldMax != time.Hour {
			t.Fatalf("config = %+v", cfg)
		}
	}
}
