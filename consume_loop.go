package queen

import (
	"slices"
	"time"
)

// The loop: Concurrency fetchers send pops when a handler is free for one
// (consume_fetch.go), Concurrency workers handle the groups of messages
// whose partition is free (consume_dispatch.go), at most Concurrency at
// once, and the goroutine that ends a pop's last group settles the pop
// (consume_settle.go). A fetcher handles the first group of its own pop
// itself: a pop of one partition goes from answer to ack on one goroutine.
// Each takes its next task with next. The state they share (the engine's
// fields under e.mu, consume_engine.go) is changed only by the functions
// of this file and of consume_stop.go; who has nothing to do waits on a
// channel (e.kickPop for fetchers, e.kickWork for workers) that changed
// closes, and replaces, when the state may have work for them. Execute's
// own goroutine (run, consume_stop.go) turns the ctxs and the timers into
// the steps of the stop path.

// task is what next gives a goroutine of the loop: a group to handle, a
// pop to send (of n messages), or a pop to settle.
type task struct {
	g         *group
	pop       bool
	n         int
	nowait    bool
	settledAt uint64 // e.settled when the pop went
	settle    *batch
}

// startSlot starts one fetcher (it sends pops) or one worker (it handles
// groups and settles pops).
func (e *engine) startSlot(fetcher bool) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			t, ok := e.next(fetcher)
			if !ok {
				return
			}
			switch {
			case t.pop:
				if g := e.fetch(t); g != nil {
					e.runGroup(g) // the pop's first group, on the fetcher that brought it
				}
			case t.g != nil:
				e.runGroup(t.g)
			default:
				e.settle(t.settle)
				e.settledLate(t.settle)
			}
		}
	}()
}

// next waits for the next task of a fetcher or a worker; false: it is done
// (a fetcher after the stop, a worker when the stop path is done).
func (e *engine) next(fetcher bool) (task, bool) {
	var pause *time.Timer
	defer func() {
		if pause != nil {
			pause.Stop()
		}
	}()
	for {
		e.mu.Lock()
		if e.phase == running && e.stopping() {
			e.stopLocked(nil) // a ctx that ended: no pop or message starts after it
		}
		var t task
		ok := false
		if fetcher {
			t, ok = e.takePop()
		} else {
			t, ok = e.takeWork()
		}
		if ok {
			e.mu.Unlock()
			return t, true
		}
		if (fetcher && e.phase != running) || e.phase == done {
			e.mu.Unlock()
			return task{}, false
		}
		kick := e.kickWork
		idle := &e.idleWork
		if fetcher {
			kick, idle = e.kickPop, &e.idlePop
		}
		*idle++
		var wake <-chan time.Time
		if wait := time.Until(e.wakeAt()); fetcher && wait > 0 {
			if pause == nil {
				pause = time.NewTimer(wait)
			} else {
				pause.Reset(wait)
			}
			wake = pause.C
		}
		e.mu.Unlock()
		select {
		case <-kick:
		case <-wake:
		}
		e.mu.Lock()
		*idle--
		e.mu.Unlock()
	}
}

// takePop gives a fetcher a pop to send, if one may go (e.mu held): only
// for a free handler (pops in flight, groups waiting and running and pops
// being settled stay below Concurrency, which bounds what the loop holds
// to Concurrency pops), after any pause, within the Limit.
func (e *engine) takePop() (task, bool) {
	now := time.Now()
	if e.phase != running || e.pops() >= e.cfg.slots || now.Before(e.pauseTill) {
		return task{}, false
	}
	goes, nowait := e.paced(now)
	if !goes {
		return task{}, false
	}
	n, ok := e.limit.reserve(e.cfg.want)
	if !ok {
		if nowait && e.contended {
			e.tokens++ // the settle stays unused
		}
		return task{}, false
	}
	e.inflight++
	return task{pop: true, n: n, nowait: nowait, settledAt: e.settled}, true
}

// wakeAt is when a fetcher with nothing to do looks again by itself (e.mu
// held): the end of a pause, or when a contended loop may long-poll.
func (e *engine) wakeAt() time.Time {
	if e.contended && e.tokens == 0 && e.fallbackAt.After(e.pauseTill) {
		return e.fallbackAt
	}
	return e.pauseTill
}

// pops is what the loop holds against Concurrency (e.mu held): pops in
// flight, groups waiting or running, pops being settled.
func (e *engine) pops() int { return e.inflight + e.inHand() }

// inHand is the part of pops past their answer (e.mu held).
func (e *engine) inHand() int { return len(e.queued) + len(e.running) + e.settling }

// takeWork gives a worker a group whose partition is free, or, after a
// stop and once quiet, a pop to settle (e.mu held).
func (e *engine) takeWork() (task, bool) {
	if e.phase == running {
		if g := e.takeGroup(); g != nil {
			return task{g: g}, true
		}
		return task{}, false
	}
	if len(e.pending) > 0 && e.quiet() {
		b := e.pending[0]
		e.pending = e.pending[1:]
		e.settling++
		return task{settle: b}, true
	}
	return task{}, false
}

// takeGroup moves the first waiting group whose partition is free to
// running, while fewer than Concurrency run (e.mu held).
func (e *engine) takeGroup() *group {
	if len(e.running) >= e.cfg.slots {
		return nil
	}
	for i, g := range e.queued {
		if !slices.ContainsFunc(e.running, g.conflicts) {
			e.queued = slices.Delete(e.queued, i, i+1)
			e.running = append(e.running, g)
			return g
		}
	}
	return nil
}

// pause holds the pops until t (e.mu held).
func (e *engine) pause(t time.Time) {
	e.pauseTill = t
	e.changed()
}

// changed wakes who waits for a task and may now have one (e.mu held),
// and ends the stop path when nothing is left to do. (Waking only those
// spares a fetcher that handles its own pop a wake-up of every idle
// worker at each step.)
func (e *engine) changed() {
	if e.phase == draining && e.inflight == 0 && len(e.running) == 0 && e.settling == 0 && len(e.pending) == 0 {
		e.phase = done
		close(e.doneCh)
	}
	work := e.phase != running || len(e.queued) > 0
	pop := e.phase != running || e.pops() < e.cfg.slots
	if work && e.idleWork > 0 {
		close(e.kickWork)
		e.kickWork = make(chan struct{})
	}
	if pop && e.idlePop > 0 {
		close(e.kickPop)
		e.kickPop = make(chan struct{})
	}
}

// popped takes a pop's answer, and returns the first group it brought for
// the fetcher to handle itself (nil: none, or no handler free), so that a
// pop of one partition is handled with no hand-off; workers take the rest.
func (e *engine) popped(d popDone) *group {
	var mine *group
	got := 0
	if d.res != nil {
		got = len(d.res.messages)
	}
	var hook *LoopError
	e.mu.Lock()
	e.inflight--
	e.limit.popped(d.reserved, got)
	switch {
	case e.phase != running:
		if e.inflight == 0 {
			e.abandonPops() // the last pop is back: nothing to wait for
		}
		if got > 0 { // an answer on its way at the stop: given back whole
			e.busy++
			e.batchDone(e.newBatch(d.res, d.reserved))
		}
	case d.err != nil:
		hook = &LoopError{Op: LoopOpPop, Err: d.err}
		e.popFailed(d.err)
	case got == 0 && d.nowait:
		e.popOK()
		e.answered = true
		if !e.contended {
			e.contended, e.tokens = true, 0
		}
		if e.settled != d.settledAt {
			e.tokens = max(e.tokens, 1) // a settle while it was on its way may have freed a partition
		}
		e.fallbackAt = time.Now().Add(emptyDelay(d.res, 0))
	case got == 0:
		e.popOK()
		e.answered = true
		e.flowing = false // a long poll found nothing: the queue is empty
		e.pause(time.Now().Add(emptyDelay(d.res, d.took)))
	default:
		e.popOK()
		e.answered, e.flowing = true, true
		e.pauseTill = time.Time{}
		b := e.newBatch(d.res, d.reserved)
		e.busy++
		if e.cfg.renewEvery > 0 && b.leaseID != "" {
			b.keeper = e.keepLease(b)
		}
		e.queued = append(e.queued, b.groups...)
		if e.pops() >= e.cfg.slots {
			e.contended = false // no handler idle: nothing to pace
		}
		mine = e.takeGroup()
	}
	e.changed()
	e.mu.Unlock()
	if hook != nil {
		e.loopError(hook)
	}
	return mine
}

// finished takes a group back from its worker.
func (e *engine) finished(d groupDone) {
	g := d.g
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = slices.DeleteFunc(e.running, func(o *group) bool { return o == g })
	if g.goexit {
		e.log.Error("queen: consume handler ended its goroutine (runtime.Goexit); the loop stops",
			"queue", e.cfg.queue, "group", e.cfg.group)
		e.stopLocked(errHandlerGoexit)
		e.startSlot(false) // in the place of the worker that ended: the stop path needs workers
	}
	switch {
	case d.settled:
		e.settling++ // its slot settled it: counted as one
		e.settledLocked(g.b)
	case d.last:
		e.batchDone(g.b)
	}
	e.changed()
}

// batchDone holds a pop whose groups are all done and that its worker did
// not settle (after a stop): the next free worker settles it once quiet
// (e.mu held).
func (e *engine) batchDone(b *batch) {
	e.pending = append(e.pending, b)
}

// settledLate takes back a pop settled after a stop.
func (e *engine) settledLate(b *batch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settledLocked(b)
	e.changed()
}

// settledLocked ends the hold of a settled pop (e.mu held).
func (e *engine) settledLocked(b *batch) {
	e.settling--
	e.busy--
	e.settled++
	if e.contended {
		e.tokens = min(e.tokens+1, e.cfg.slots) // a partition may be free again
		e.fallbackAt = time.Now().Add(emptyPollDelay)
	}
	e.lastBusy = time.Now()
	handled := 0
	for _, g := range b.groups {
		handled += g.handled
	}
	e.limit.settled(len(b.msgs), handled)
	b.cancel(nil)
	if e.limit.reached() {
		e.stopLocked(nil)
	}
}
