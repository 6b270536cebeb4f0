package transport

import (
	"context"
	"sync"
	"time"
)

// Deadlines hands out contexts that end at a deadline, shared by the
// requests that ask for nearly the same deadline under the same parent.
//
// Every attempt is bounded by a deadline. A context of its own would cost
// each request a timer, a context and, since net/http derives a context
// from the request's, a map in which it registers; in a consume loop of
// one message a pop, those are a measurable share of the client's work
// (BenchmarkConsume). Requests of one loop have the same parent and ask
// for deadlines a few microseconds apart: they share one context as long
// as its deadline is at most Slack earlier than the one asked for. A
// deadline may so come up to Slack early, never late.
//
// A shared context is cancelled (its timer released) once it is replaced
// by a newer one and its last user released it, or by Close. It keeps its
// parent reachable until then.
type Deadlines struct {
	mu     sync.Mutex
	slots  [deadlineSlots]*shared
	next   int // the slot to replace when no slot has the parent
	closed bool
}

// deadlineSlots is how many parents share deadlines at once (loops,
// their pops and their acks, each have a parent).
const deadlineSlots = 8

// maxSlack is how much earlier than asked a shared deadline may end; a
// deadline close at hand may end at most 1% of its time early.
const maxSlack = 10 * time.Millisecond

// shared is one shared context and who uses it.
type shared struct {
	parent context.Context
	at     time.Time
	ctx    context.Context
	cancel context.CancelFunc
	users  int
	stale  bool // replaced: cancelled when its last user releases it
}

// Deadline is a context from Deadlines.Get, to release once its request
// is done.
type Deadline struct {
	d      *Deadlines
	s      *shared
	cancel context.CancelFunc // of a context not shared (nil Deadlines)
}

// Get returns a context derived from parent that ends at the latest at at
// (now is the current time: a deadline of d from now may end up to
// min(d/100, 10 ms) early). Release it when the request is done. A nil
// Deadlines shares nothing.
func (d *Deadlines) Get(parent context.Context, at, now time.Time) (context.Context, Deadline) {
	if d == nil {
		ctx, cancel := context.WithDeadline(parent, at)
		return ctx, Deadline{cancel: cancel}
	}
	slack := min(at.Sub(now)/100, maxSlack)
	d.mu.Lock()
	defer d.mu.Unlock()
	own, free := -1, -1
	for i, s := range d.slots {
		switch {
		case s == nil:
			if free < 0 {
				free = i
			}
		case s.parent != parent:
		case !s.at.After(at) && at.Sub(s.at) <= slack && s.ctx.Err() == nil:
			s.users++
			return s.ctx, Deadline{d: d, s: s}
		default:
			own = i // the parent's slot, out of date
		}
	}
	ctx, cancel := context.WithDeadline(parent, at)
	s := &shared{parent: parent, at: at, ctx: ctx, cancel: cancel, users: 1}
	switch {
	case d.closed:
		s.stale = true // not kept: a closed Transport keeps nothing alive
		return ctx, Deadline{d: d, s: s}
	case own >= 0:
		free = own
	case free < 0:
		free = d.next
		d.next = (d.next + 1) % deadlineSlots
	}
	d.retire(d.slots[free])
	d.slots[free] = s
	return ctx, Deadline{d: d, s: s}
}

// retire marks s replaced, and cancels it if nobody uses it (d.mu held).
func (d *Deadlines) retire(s *shared) {
	if s == nil {
		return
	}
	s.stale = true
	if s.users == 0 {
		s.cancel()
	}
}

// Release ends the use of the context; a zero Deadline does nothing.
func (l Deadline) Release() {
	switch {
	case l.cancel != nil:
		l.cancel()
		return
	case l.s == nil:
		return
	}
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	l.s.users--
	if l.s.users == 0 && l.s.stale {
		l.s.cancel()
	}
}

// Close cancels the shared contexts nobody uses, and those in use when
// their last user releases them; later contexts are not shared.
func (d *Deadlines) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for i, s := range d.slots {
		d.retire(s)
		d.slots[i] = nil
	}
}
