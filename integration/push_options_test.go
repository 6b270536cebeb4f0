package integration

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// TestPushTransactionIDs: the transaction ids given are the messages'
// ids; pushing one again to the same partition is a duplicate that stores
// nothing and names the original message, while another partition stores
// it.
func TestPushTransactionIDs(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q := unique("txids")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	ids := []string{"order-" + uuid.NewString(), "", "order-" + uuid.NewString()}
	res, err := c.Queue(q).Partition("a").Push(numbered(0, 3, nil)...).TransactionIDs(ids...).Execute(ctx)
	if err != nil {
		t.Fatalf("push with ids: %v", err)
	}
	if len(res) != 3 {
		t.Fatalf("push with ids: %d results, want 3", len(res))
	}
	for i, r := range res {
		if r.Status != queen.PushQueued || r.Index != i || r.Queue != q {
			t.Errorf("result %d = %+v, want queued, index %d, queue %s", i, r, i, q)
		}
		if ids[i] != "" && r.TransactionID != ids[i] {
			t.Errorf("result %d transaction id = %q, want %q", i, r.TransactionID, ids[i])
		}
		if r.TransactionID == "" || r.MessageID == "" {
			t.Errorf("result %d has no transaction or message id: %+v", i, r)
		}
	}
	if res[1].TransactionID == res[0].TransactionID || res[1].TransactionID == res[2].TransactionID {
		t.Errorf("the client's transaction id %q repeats a given one", res[1].TransactionID)
	}

	dup, err := c.Queue(q).Partition("a").Push(map[string]any{"n": 99}).TransactionID(ids[0]).Execute(ctx)
	if err != nil {
		t.Fatalf("push of a repeated id: %v", err)
	}
	if len(dup) != 1 || dup[0].Status != queen.PushDuplicate || !dup[0].Stored() {
		t.Fatalf("push of a repeated id = %+v, want one duplicate", dup)
	}
	if dup[0].MessageID != res[0].MessageID {
		t.Errorf("duplicate names message %q, want the original %q", dup[0].MessageID, res[0].MessageID)
	}
	if dup[0].TransactionID != ids[0] {
		t.Errorf("duplicate transaction id = %q, want %q", dup[0].TransactionID, ids[0])
	}
	other, err := c.Queue(q).Partition("b").Push(map[string]any{"n": 100}).TransactionID(ids[0]).Execute(ctx)
	if err != nil {
		t.Fatalf("push of the id to another partition: %v", err)
	}
	if len(other) != 1 || other[0].Status != queen.PushQueued {
		t.Errorf("push of the id to another partition = %+v, want queued", other)
	}

	got := drain(t, c, c.Queue(q).Partition("a").Batch(10), "", 0)
	checkExactlyOnce(t, "partition a", nums(t, got), 0, 3)
	for _, m := range got {
		i := num(t, m)
		if m.TransactionID != res[i].TransactionID {
			t.Errorf("message %d popped with transaction id %q, pushed with %q", i, m.TransactionID, res[i].TransactionID)
		}
	}
	checkExactlyOnce(t, "partition b", nums(t, drain(t, c, c.Queue(q).Partition("b").Batch(10), "", 0)), 100, 1)
}

// TestPushTraceID: a push's trace id reaches the popped messages on a
// broker that keeps it (0.15.1), and is dropped on a plain push on 2.x; a
// trace id that is not a UUID is refused before any request.
func TestPushTraceID(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q := unique("trace")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	trace, own := uuid.NewString(), uuid.NewString()
	_, err := c.Queue(q).Push(map[string]any{"n": 0}, queen.Item{Payload: map[string]any{"n": 1}, TraceID: own}).TraceID(trace).Execute(ctx)
	if err != nil {
		t.Fatalf("push with trace id: %v", err)
	}
	got := drain(t, c, c.Queue(q).Batch(10), "", 0)
	checkExactlyOnce(t, "traced messages", nums(t, got), 0, 2)
	want := map[int]string{0: trace, 1: own}
	for _, m := range got {
		w := want[num(t, m)]
		if be.profile != queentest.Profile015 {
			w = "" // 2.x drops trace ids on a plain push
		}
		if m.TraceID != w {
			t.Errorf("message %d trace id = %q, want %q (profile %s)", num(t, m), m.TraceID, w, be.profile)
		}
	}

	if _, err := c.Queue(q).Push(map[string]any{"n": 2}).TraceID("not-a-uuid").Execute(ctx); !errors.Is(err, queen.ErrInvalidTraceID) {
		t.Errorf("push with trace id not-a-uuid = %v, want ErrInvalidTraceID", err)
	}
	if left := popNow(t, c.Queue(q).Batch(10)); len(left) != 0 {
		t.Errorf("the refused push stored %v", nums(t, left))
	}
}

// TestDiscoveryPop: a pop by namespace (and task) reads the queues
// configured with them, and no other.
func TestDiscoveryPop(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ns := unique("ns")
	qa, qb, qc := unique("disc-a"), unique("disc-b"), unique("disc-c")
	newQueue(t, c, qa, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute), Namespace: ns, Task: "resize"})
	newQueue(t, c, qb, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute), Namespace: ns, Task: "crop"})
	newQueue(t, c, qc, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	push(t, c, qa, "", numbered(0, 2, nil)...)
	push(t, c, qb, "", numbered(10, 1, nil)...)
	push(t, c, qc, "", numbered(20, 1, nil)...)

	awaitPushed(t, c, qa, 2) // a group of its own: the namespace pops below are queue mode
	task := c.Namespace(ns).Task("resize").Batch(10)
	got, err := task.Wait(false).Pop(testCtx(t))
	if isNotSupported(err) {
		// 0.15.1 registers no GET /api/v1/pop route.
		t.Skipf("broker %s has no discovery pop: %v", be.version, err)
	}
	if err != nil {
		t.Fatalf("namespace+task pop: %v", err)
	}
	ackAll(t, c, "", got)
	got = append(got, drain(t, c, task, "", 0)...)
	checkExactlyOnce(t, "namespace+task pop", nums(t, got), 0, 2)
	for _, m := range got {
		// A 2.x broker names no queue in a discovery pop's messages.
		if m.Queue != qa && m.Queue != "" {
			t.Errorf("namespace+task pop message %d names queue %q, want %s", num(t, m), m.Queue, qa)
		}
	}
	got = drain(t, c, c.Namespace(ns).Batch(10), "", 0)
	checkExactlyOnce(t, "namespace pop", nums(t, got), 10, 1)
	if len(got) == 1 && got[0].Queue != qb && got[0].Queue != "" {
		t.Errorf("namespace pop message names queue %q, want %s", got[0].Queue, qb)
	}
	// The queue outside the namespace kept its message.
	checkExactlyOnce(t, "the queue outside the namespace", nums(t, popPushed(t, c.Queue(qc).Batch(10))), 20, 1)

	if _, err := c.Queue(qa).Task("resize").Wait(false).Pop(testCtx(t)); !errors.Is(err, queen.ErrInvalidOption) {
		t.Errorf("Task on a named queue's pop = %v, want ErrInvalidOption", err)
	}
}

// TestCreateReplace: Create().Replace() sends every option not given back
// to the broker's default, on both generations.
func TestCreateReplace(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q := unique("replace")
	newQueue(t, c, q, queen.QueueConfig{})
	def, err := c.Queue(q).Create().Execute(ctx)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if def.Config.RetryLimit == nil || def.Config.LeaseTime == nil {
		t.Fatalf("create reports no retryLimit/leaseTime: %+v", def.Config)
	}
	set, err := c.Queue(q).Config(queen.QueueConfig{RetryLimit: queen.Ptr(*def.Config.RetryLimit + 5), LeaseTime: queen.Ptr(*def.Config.LeaseTime + time.Minute)}).Create().Execute(ctx)
	if err != nil {
		t.Fatalf("configure: %v", err)
	}
	if *set.Config.RetryLimit != *def.Config.RetryLimit+5 {
		t.Fatalf("configure retryLimit = %d, want %d", *set.Config.RetryLimit, *def.Config.RetryLimit+5)
	}
	rep, err := c.Queue(q).Config(queen.QueueConfig{RetryLimit: queen.Ptr(1)}).Create().Replace().Execute(ctx)
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if rep.Name != q || rep.Config.RetryLimit == nil || *rep.Config.RetryLimit != 1 {
		t.Errorf("replace = %s %+v, want retryLimit 1", rep.Name, rep.Config)
	}
	if rep.Config.LeaseTime == nil || *rep.Config.LeaseTime != *def.Config.LeaseTime {
		t.Errorf("replace leaseTime = %v, want the default %v", fmtPtr(rep.Config.LeaseTime), *def.Config.LeaseTime)
	}
}

// TestReplayDLQ: a dead-lettered message is pushed back to its queue by
// ReplayDLQ on both generations (2.x in one step; on 0.15.1 the client
// pushes a copy and deletes the original), and the letter goes. Replaying
// it again stores no second copy: 2.x no longer finds the letter, 0.15.1
// finds its copy (ReplayDuplicate).
func TestReplayDLQ(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("replay")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute), RetryLimit: queen.Ptr(0),
		DeadLetterQueue: queen.Ptr(true), DLQAfterMaxRetries: queen.Ptr(true)})
	push(t, c, q, "", numbered(0, 1, nil)...)
	got := popPushed(t, c.Queue(q).Batch(1))
	if len(got) != 1 {
		t.Fatalf("pop: %d messages, want 1", len(got))
	}
	if _, err := c.Settle(ctx, got[0], queen.StatusDLQ, queen.AckOptions{Error: "bad payload"}); err != nil {
		t.Fatalf("ack dlq: %v", err)
	}
	var page queen.DLQPage
	eventually(t, 10*time.Second, "the message reaches the dead-letter queue", func() bool {
		var err error
		page, err = a.ListDLQ(ctx, q, queen.DLQListOptions{})
		if err != nil {
			t.Fatalf("ListDLQ: %v", err)
		}
		return len(page.Messages) == 1
	})
	dl := page.Messages[0]
	if dl.TransactionID != got[0].TransactionID || dl.Queue != q {
		t.Errorf("dead letter = %+v, want transaction %s of %s", dl, got[0].TransactionID, q)
	}

	res, err := a.ReplayDLQ(ctx, dl)
	if err != nil {
		t.Fatalf("ReplayDLQ: %v", err)
	}
	if !res.Moved || res.Result != "moved" || res.Queue != q || res.OriginalTransactionID != got[0].TransactionID {
		t.Errorf("ReplayDLQ = %+v, want moved back to %s from %s", res, q, got[0].TransactionID)
	}
	back := popWithin(t, c.Queue(q).Batch(10), 5*time.Second)
	checkExactlyOnce(t, "after the replay", nums(t, back), 0, 1)
	ackAll(t, c, "", back)
	page, err = a.ListDLQ(ctx, q, queen.DLQListOptions{})
	if err != nil {
		t.Fatalf("ListDLQ after the replay: %v", err)
	}
	if slices.ContainsFunc(page.Messages, func(d queen.DeadLetter) bool { return d.TransactionID == dl.TransactionID }) {
		t.Errorf("the replayed dead letter is still listed")
	}
	again, err := a.ReplayDLQ(ctx, dl)
	switch {
	case be.profile == queentest.Profile015 && (err != nil || again.Result != queen.ReplayDuplicate):
		t.Errorf("a second ReplayDLQ on 0.15.1 = %+v, %v; want duplicate", again, err)
	case be.profile != queentest.Profile015 && !errors.Is(err, queen.ErrDeadLetterNotFound):
		t.Errorf("a second ReplayDLQ of the same row = %+v, %v; want ErrDeadLetterNotFound", again, err)
	}
	if extra := popNow(t, c.Queue(q).Batch(10)); len(extra) != 0 {
		t.Errorf("the second replay stored %d messages", len(extra))
	}
	if _, err := a.ReplayDLQ(ctx, queen.DeadLetter{}); !errors.Is(err, queen.ErrNotReplayable) {
		t.Errorf("ReplayDLQ of an empty dead letter = %v, want ErrNotReplayable", err)
	}
}
