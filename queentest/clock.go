package queentest

import (
	"sync"
	"time"
)

// Clock tells the broker what time it is. Leases, dedup windows, delayed
// processing, message timestamps and subscription times all read it. The
// default is the wall clock; tests inject a *FakeClock to move time by hand.
//
// HTTP-level waits (a long poll's timeout, a fetch's maxWaitMs, injected
// latency) always run on real time, whatever the Clock.
type Clock interface {
	Now() time.Time
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// clockNotifier is implemented by clocks that tell the broker when they
// jump, so that parked long polls can look again at once (FakeClock).
type clockNotifier interface {
	subscribe(fn func()) (cancel func())
}

// FakeClock is a Clock that only moves when told to. It is safe for
// concurrent use. Moving it wakes the long polls parked on every Server that
// uses it, so a message whose delayedProcessing has passed is
// handed out at once (best effort: the parked pop looks again right after
// the move).
type FakeClock struct {
	mu   sync.Mutex
	now  time.Time
	subs map[int]func()
	next int
}

// NewFakeClock returns a FakeClock that reads start until moved.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, subs: map[int]func(){}}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d moves it back) and wakes
// parked long polls.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	subs := c.snapshot()
	c.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

// Set moves the clock to t and wakes parked long polls.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	subs := c.snapshot()
	c.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

func (c *FakeClock) snapshot() []func() {
	out := make([]func(), 0, len(c.subs))
	for _, fn := range c.subs {
		out = append(out, fn)
	}
	return out
}

func (c *FakeClock) subscribe(fn func()) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		c.subs = map[int]func(){}
	}
	id := c.next
	c.next++
	c.subs[id] = fn
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.subs, id)
	}
}
