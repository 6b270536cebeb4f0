package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// slowPops records the pops that asked the broker to wait and took longer
// than its first look at a parked pop (0.15.1: 100 ms). A pop that asked
// for no wait cannot be parked: its time is the network's and the
// machine's, which a busy machine or a container's port proxy stretches.
type slowPops struct {
	mu   sync.Mutex
	slow []string
}

func (s *slowPops) OnPop(_ context.Context, e queen.PopEvent) {
	if e.Wait > 0 && e.Duration >= 95*time.Millisecond {
		s.mu.Lock()
		s.slow = append(s.slow, fmt.Sprintf("%v (wait %v, %d messages)", e.Duration.Round(time.Millisecond), e.Wait, len(e.Messages)))
		s.mu.Unlock()
	}
}

// Issue 11's Limit workload, small: several handlers over 10 partitions
// until the Limit. While the loop holds pops, a pop that waited at the
// broker would be parked until the broker's next look (0.15.1: 100 ms,
// backing off to 1 s; an ack wakes no parked pop), though the loop's own
// next ack frees a partition in milliseconds. No pop may sit out such a
// look: every pop is answered within the broker's first look.
func TestLimitRunHasNoParkedPops(t *testing.T) {
	rec := &slowPops{}
	c, err := queen.New(be.url, append(clientOpts(), queen.WithHooks(rec))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	q := unique("endgame")
	newQueue(t, c, q, queen.QueueConfig{})
	const parts, per = 10, 200
	for p := range parts {
		push(t, c, q, fmt.Sprint("p", p), numbered(0, per, nil)...)
	}
	var handled atomic.Int64
	err = c.Queue(q).Batch(100).Concurrency(4).Limit(parts*per).
		Consume(testCtx(t), func(context.Context, *queen.Message) error { handled.Add(1); return nil }).
		Execute(testCtx(t))
	if err != nil || handled.Load() != parts*per {
		t.Fatalf("Execute = %v after %d of %d messages", err, handled.Load(), parts*per)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.slow) > 0 {
		t.Fatalf("pops parked at the broker: %v", rec.slow)
	}
}
