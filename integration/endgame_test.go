package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/queen-go/queen"
)

// popLog records the parameters and the outcome of every pop, in the
// order of their answers.
type popLog struct {
	mu   sync.Mutex
	pops []queen.PopEvent
}

func (l *popLog) OnPop(_ context.Context, e queen.PopEvent) {
	l.mu.Lock()
	l.pops = append(l.pops, queen.PopEvent{Wait: e.Wait, Err: e.Err, Messages: make([]*queen.Message, len(e.Messages))})
	l.mu.Unlock()
}

// Issue 11's Limit workload, small: several handlers over 10 partitions
// until the Limit. While the loop holds pops, a pop that waited at the
// broker would be parked until the broker's next look (0.15.1: 100 ms,
// backing off to 1 s; an ack wakes no parked pop), though the loop's own
// next ack frees a partition in milliseconds. So while the loop holds pops
// its pops do not wait (wait=false on the wire): none can be parked.
//
// What the test checks is what was sent, not how long pops took (a loaded
// machine makes any pop slow). The design (consume_fetch.go) lets a pop
// wait here in two cases only: the contended fallback (after a pop that
// found nothing, when no settle came within the pause: at most one per
// handler for each such empty answer), and a loop that holds nothing at
// all (every pop settled, none on its way: its next pop waits, the others
// that go with it do not), which a busy run reaches seldom if ever; the
// test allows one per handler. A loop that waited while it held pops would
// send mostly waiting pops (16 of 20 in this run).
func TestLimitRunHasNoParkedPops(t *testing.T) {
	rec := &popLog{}
	c, err := queen.New(be.url, append(clientOpts(), queen.WithHooks(rec))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	q := unique("endgame")
	newQueue(t, c, q, queen.QueueConfig{})
	const parts, per, handlers = 10, 200, 4
	for p := range parts {
		push(t, c, q, fmt.Sprint("p", p), numbered(0, per, nil)...)
	}
	var handled atomic.Int64
	err = c.Queue(q).Batch(100).Concurrency(handlers).Limit(parts*per).
		Consume(testCtx(t), func(context.Context, *queen.Message) error { handled.Add(1); return nil }).
		Execute(testCtx(t))
	if err != nil || handled.Load() != parts*per {
		t.Fatalf("Execute = %v after %d of %d messages", err, handled.Load(), parts*per)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	empties, waits := 0, 0
	var log []string
	for i, p := range rec.pops {
		log = append(log, fmt.Sprintf("#%d wait %v, %d messages, err %v", i, p.Wait, len(p.Messages), p.Err))
		if p.Err == nil && len(p.Messages) == 0 {
			empties++
		}
		if p.Wait > 0 {
			waits++
			if waits > handlers*(empties+1) {
				t.Fatalf("pop #%d waited at the broker while the loop held pops (%d waiting pops after %d empty answers); pops: %v",
					i, waits, empties, log)
			}
		}
	}
	t.Logf("%d pops, %d empty, %d waited", len(rec.pops), empties, waits)
}
