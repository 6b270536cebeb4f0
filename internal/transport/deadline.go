package transport

import (
	"context"
	"reflect"
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
// as its deadline is at most min(1 % of the time left, 10 ms) earlier than
// the one asked for. A deadline may so come up to that much early, never
// late.
//
// A shared context is not cancelled when a request releases it: it is
// cancelled (its timer released) once a newer one replaced it and its
// last user released it, or by Close; an idle one otherwise runs to its
// deadline, and keeps its parent reachable until its slot is taken again.
// Only parents of a pointer type (contexts of the context package but
// WithoutCancel's), Background and TODO are shared: a parent of another
// type is never compared with ==, which could panic, and gets a context
// of its own.
//
// The zero value is ready to use; a Deadlines must not be copied after
// first use. A nil *Deadlines shares nothing.
type Deadlines struct {
	mu     sync.Mutex
	slots  [deadlineSlots]*shared
	next   int // the slot to replace when none is free
	closed bool
}

// deadlineSlots is how many parents share deadlines at once (each loop's
// pops, the acks of the loops, callers' own ctxs).
const deadlineSlots = 8

// maxSlack is how much earlier than asked a shared deadline may end.
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

// Deadline is the handle of a context from Deadlines.Get: call Release
// exactly once, when the request is done with the context.
type Deadline struct {
	d      *Deadlines
	s      *shared
	cancel context.CancelFunc // of a context not shared
}

// Get returns a context derived from parent that ends at the latest at at
// (now is the current time: a deadline of d from now may end up to
// min(d/100, 10 ms) early).
func (d *Deadlines) Get(parent context.Context, at, now time.Time) (context.Context, Deadline) {
	if d == nil || !shareable(parent) {
		return own(parent, at)
	}
	slack := min(at.Sub(now)/100, maxSlack)
	d.mu.Lock()
	for _, s := range d.slots {
		if s == nil || s.parent != parent {
			continue
		}
		if s.at.After(at) { // earlier than the parent's shared one: its own
			d.mu.Unlock()
			return own(parent, at)
		}
		if at.Sub(s.at) <= slack && s.ctx.Err() == nil {
			s.users++
			d.mu.Unlock()
			return s.ctx, Deadline{d: d, s: s}
		}
	}
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return own(parent, at) // a closed Transport keeps nothing alive
	}

	ctx, cancel := context.WithDeadline(parent, at)
	s := &shared{parent: parent, at: at, ctx: ctx, cancel: cancel, users: 1}
	d.mu.Lock()
	if d.closed { // closed meanwhile
		s.stale = true
		d.mu.Unlock()
		return ctx, Deadline{d: d, s: s}
	}
	old := d.place(s)
	d.mu.Unlock()
	if old != nil {
		old()
	}
	return ctx, Deadline{d: d, s: s}
}

// shareable says whether parent may be compared with ==: a pointer, or
// context.Background() or TODO() (an interface compared with a value of
// another type is unequal, never a panic).
func shareable(parent context.Context) bool {
	return reflect.TypeOf(parent).Kind() == reflect.Pointer ||
		parent == context.Background() || parent == context.TODO()
}

// own returns a context of the request's own, not shared.
func own(parent context.Context, at time.Time) (context.Context, Deadline) {
	ctx, cancel := context.WithDeadline(parent, at)
	return ctx, Deadline{cancel: cancel}
}

// place puts s in a slot (d.mu held): the slot of its parent, else a
// free one (empty, or holding a context nobody uses that has ended), else
// the next in turn. It returns the cancel of the context it replaced, if
// that is to be cancelled now (nobody uses it).
func (d *Deadlines) place(s *shared) (cancel context.CancelFunc) {
	i, free := -1, -1
	for j, o := range d.slots {
		switch {
		case o == nil || (o.users == 0 && o.ctx.Err() != nil):
			if free < 0 {
				free = j
			}
		case o.parent == s.parent:
			i = j
		}
	}
	switch {
	case i >= 0:
	case free >= 0:
		i = free
	default:
		i = d.next
		d.next = (d.next + 1) % deadlineSlots
	}
	cancel = d.retire(d.slots[i])
	d.slots[i] = s
	return cancel
}

// retire marks s replaced; it returns its cancel if nobody uses it (d.mu
// held; the caller cancels once it let go of d.mu).
func (d *Deadlines) retire(s *shared) context.CancelFunc {
	if s == nil {
		return nil
	}
	s.stale = true
	if s.users == 0 {
		return s.cancel
	}
	return nil
}

// Release ends the request's use of the context. Call it once; a zero
// Deadline does nothing.
func (l Deadline) Release() {
	switch {
	case l.cancel != nil:
		l.cancel()
		return
	case l.s == nil:
		return
	}
	l.d.mu.Lock()
	l.s.users--
	end := l.s.users == 0 && l.s.stale
	l.d.mu.Unlock()
	if end {
		l.s.cancel()
	}
}

// Close cancels the shared contexts nobody uses, and those in use when
// their last user releases them; later contexts are not shared.
func (d *Deadlines) Close() {
	var ends []context.CancelFunc
	d.mu.Lock()
	d.closed = true
	for i, s := range d.slots {
		if end := d.retire(s); end != nil {
			ends = append(ends, end)
		}
		d.slots[i] = nil
	}
	d.mu.Unlock()
	for _, end := range ends {
		end()
	}
}
