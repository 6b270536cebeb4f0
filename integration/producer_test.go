package integration

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queen-go/queen"
)

// TestProducer: a producer's messages to several partitions of two queues
// are each stored once, in push order within a partition, and every
// outcome reaches its PendingPush and the OnResult callback.
func TestProducer(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q1, q2 := unique("prod-a"), unique("prod-b")
	newQueue(t, c, q1, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	newQueue(t, c, q2, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})

	var mu sync.Mutex
	var results []queen.PushResult
	p, err := c.Producer(queen.WithBatchCount(7), queen.WithBatchDelay(5*time.Millisecond), queen.WithMaxInflight(2),
		queen.WithOnResult(func(r queen.PushResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, queen.ErrClosed): // the push after Close, below
			case err != nil:
				t.Errorf("OnResult error: %v", err)
			default:
				results = append(results, r)
			}
		}))
	if err != nil {
		t.Fatalf("Producer: %v", err)
	}
	const perPartition = 25
	parts := []string{"p0", "p1", "p2"}
	var pending []*queen.PendingPush
	for i := range perPartition {
		for j, part := range parts {
			pending = append(pending, p.Queue(q1).Partition(part).Push(ctx, map[string]any{"n": j*100 + i}))
		}
		pending = append(pending, p.Queue(q2).Push(ctx, map[string]any{"n": 1000 + i}))
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, pp := range pending {
		r, err := pp.Wait(ctx)
		if err != nil || r.Status != queen.PushQueued {
			t.Errorf("push %d: %+v, %v; want queued", i, r, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	if len(results) != len(pending) {
		t.Errorf("OnResult called %d times for %d pushes", len(results), len(pending))
	}
	mu.Unlock()
	if r, err := p.Queue(q1).Push(ctx, map[string]any{"n": -1}).Wait(ctx); !errors.Is(err, queen.ErrClosed) {
		t.Errorf("Push after Close = %+v, %v; want ErrClosed", r, err)
	}

	for j, part := range parts {
		got := nums(t, drain(t, c, c.Queue(q1).Partition(part).Batch(100), "", 0))
		want := make([]int, perPartition)
		for i := range want {
			want[i] = j*100 + i
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s/%s = %v, want %v in order", q1, part, got, want)
		}
	}
	got := nums(t, drain(t, c, c.Queue(q2).Batch(100), "", 0))
	checkExactlyOnce(t, q2, got, 1000, perPartition)
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Errorf("%s out of push order: %v", q2, got)
			break
		}
	}
}

// TestProducerItemsAndDuplicates: an Item's transaction id is kept, and
// pushing it again through a producer is answered duplicate, a success
// that stores nothing.
func TestProducerItemsAndDuplicates(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q := unique("prod-dup")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	p, err := c.Queue(q).Partition("x").Producer(queen.WithBatchCount(10))
	if err != nil {
		t.Fatalf("Producer: %v", err)
	}
	defer p.Close(ctx)
	id := "prod-" + uuid.NewString()
	first, err := p.Push(ctx, queen.Item{Payload: map[string]any{"n": 0}, TransactionID: id}).Wait(ctx)
	if err != nil || first.Status != queen.PushQueued || first.TransactionID != id {
		t.Fatalf("first push = %+v, %v; want queued with id %s", first, err, id)
	}
	again, err := p.Push(ctx, queen.Item{Payload: map[string]any{"n": 1}, TransactionID: id}).Wait(ctx)
	if err != nil || again.Status != queen.PushDuplicate || !again.Stored() {
		t.Fatalf("second push = %+v, %v; want duplicate", again, err)
	}
	if again.MessageID != first.MessageID {
		t.Errorf("duplicate names message %q, want %q", again.MessageID, first.MessageID)
	}
	if _, err := p.Push(ctx, map[string]any{"n": 2}).Wait(ctx); err != nil {
		t.Fatalf("third push: %v", err)
	}
	got := drain(t, c, c.Queue(q).Partition("x").Batch(10), "", 0)
	if fmt.Sprint(nums(t, got)) != "[0 2]" {
		t.Errorf("stored %v, want [0 2]", nums(t, got))
	}
	if len(got) > 0 && got[0].TransactionID != id {
		t.Errorf("message 0 transaction id = %q, want %q", got[0].TransactionID, id)
	}
}

// TestProducerBufferFull: with WithFailWhenFull and a buffer of one
// message, a push while another is held fails with ErrBufferFull; the
// held one is still stored.
func TestProducerBufferFull(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	q := unique("prod-full")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(time.Minute)})
	// A long delay keeps the first message buffered.
	p, err := c.Queue(q).Producer(queen.WithBufferLimit(1, 1<<20), queen.WithFailWhenFull(), queen.WithBatchDelay(time.Hour), queen.WithBatchBytes(1<<20))
	if err != nil {
		t.Fatalf("Producer: %v", err)
	}
	held := p.Push(ctx, map[string]any{"n": 0})
	if _, err := p.Push(ctx, map[string]any{"n": 1}).Wait(ctx); !errors.Is(err, queen.ErrBufferFull) {
		t.Errorf("push into a full buffer = %v, want ErrBufferFull", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r, err := held.Wait(ctx); err != nil || r.Status != queen.PushQueued {
		t.Errorf("held push = %+v, %v; want queued", r, err)
	}
	checkExactlyOnce(t, "stored", nums(t, drain(t, c, c.Queue(q).Batch(10), "", 0)), 0, 1)
}
