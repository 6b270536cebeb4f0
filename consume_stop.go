package queen

import (
	"time"
)

// The states of a loop, and its one stop path:
//
//   - running: pops go out for free handlers; groups start as workers and
//     their partitions free up; each pop is settled by the goroutine that
//     ends its last group. A stop (stopLocked: a ctx ended, the Limit is
//     reached, IdleMillis passed, a pop was refused for good, or a handler
//     ended its goroutine) leads to draining.
//   - draining: no pop and no group starts again. Groups waiting for a
//     handler are given back (never started). Pops in flight get popDrain
//     for an answer already on its way (its messages are then given back,
//     not left leased), and are then abandoned. Handlers running go on for
//     the grace period; then their ctx is cancelled. Batch acks wait until
//     no pop of the loop is parked at the broker (quiet): a parked long
//     poll would be handed the messages given back, and lose them with it.
//     When no pop is in flight, no handler runs and every pop is settled,
//     done.
//   - done: the workers end (the fetchers ended at the stop); Execute
//     returns nil after a ctx, Limit or idle stop, the error after a
//     refusal or a Goexit. No goroutine is left.

const (
	popDrain      = 250 * time.Millisecond // what a stop gives a pop's answer on its way
	abandonNotice = 100 * time.Millisecond // what a broker gets to notice an abandoned long poll
)

type phase int

const (
	running phase = iota
	draining
	done
)

// run starts the fetchers and workers and walks the stop path; it returns
// when it is done.
func (e *engine) run() error {
	e.outage = newOutage(e.retry)
	if e.stopping() {
		e.beginStop(nil) // a ctx that ended stops the loop before its first pop
	} else {
		e.readRule(nil) // the queue's retry settings, before its first pop can create it
	}
	for range e.cfg.slots {
		e.startSlot(true)
		e.startSlot(false)
	}
	defer func() {
		e.hcancel(errConsumeStopped)
		e.pollCancel()
		e.wg.Wait()
		e.reqCancel()
	}()

	// running: until a stop.
	var idle loopTimer
	if e.cfg.idle > 0 {
		idle.set(e.cfg.idle)
	}
	for running := true; running; {
		select {
		case <-e.stopCh:
			running = false
		case <-e.execCtx.Done():
			e.beginStop(nil)
		case <-ctxDone(e.consumeCtx):
			e.beginStop(nil)
		case <-idle.c:
			idle.fired()
			if d := e.idleFor(); d > 0 {
				idle.set(d)
			}
		}
	}
	idle.stop()

	// draining: the drain of the pops in flight, the grace period, quiet.
	var drain, grace, quiet loopTimer
	defer func() { drain.stop(); grace.stop(); quiet.stop() }()
	e.mu.Lock()
	if e.inflight > 0 && e.pollCtx.Err() == nil {
		drain.set(popDrain)
	}
	e.mu.Unlock()
	if e.cfg.grace > 0 {
		grace.set(e.cfg.grace)
	} else {
		e.hcancel(errConsumeStopped)
	}
	for {
		select {
		case <-e.doneCh:
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.fatal
		case <-drain.c:
			drain.fired()
			e.mu.Lock()
			if e.abandonPops() {
				quiet.set(abandonNotice)
			}
			e.mu.Unlock()
		case <-quiet.c:
			quiet.fired()
			e.mu.Lock()
			e.changed() // quiet now: the acks held back may go
			e.mu.Unlock()
		case <-grace.c:
			grace.fired()
			e.hcancel(errConsumeStopped)
		}
	}
}

// idleFor stops the loop after IdleMillis with no pop in hand, or says how
// long to wait before asking again.
func (e *engine) idleFor() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy > 0 {
		return e.cfg.idle
	}
	if since := time.Since(e.lastBusy); since < e.cfg.idle {
		return e.cfg.idle - since
	}
	e.log.Debug("queen: consume loop idle, stopping", "queue", e.cfg.queue, "group", e.cfg.group, "idle", e.cfg.idle)
	e.stopLocked(nil)
	return 0
}

// beginStop is stopLocked for who does not hold e.mu.
func (e *engine) beginStop(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked(err)
}

// stopLocked is the one way from running to draining (e.mu held). err is
// what Execute returns (nil: a ctx, Limit or idle stop); a later stop's
// error does not replace an earlier one. run arms the drain and grace
// timers when it sees stopCh closed.
func (e *engine) stopLocked(err error) {
	if e.fatal == nil {
		e.fatal = err
	}
	if e.phase != running {
		return
	}
	e.phase = draining
	close(e.stopCh)
	if e.inflight == 0 {
		e.abandonPops()
	}
	// Groups that never started: given back (their pops settle when
	// their last group is done).
	for _, g := range e.queued {
		if g.b.left.Add(-1) == 0 {
			e.batchDone(g.b)
		}
	}
	e.queued = nil
	e.changed()
}

// abandonPops cancels the pops still in flight, once (e.mu held): after
// popDrain, or as soon as none is in flight. The broker claims nothing
// more for a poll that is gone, once it has noticed: quiet waits
// abandonNotice for that. It says whether pops were abandoned.
func (e *engine) abandonPops() bool {
	if e.pollCtx.Err() != nil {
		return false
	}
	if e.inflight > 0 {
		e.abandoned = true
		e.quietAt = time.Now().Add(abandonNotice)
	}
	e.pollCancel()
	return e.abandoned
}

// quiet says whether, after a stop, no pop of the loop can still claim
// messages at the broker (e.mu held).
func (e *engine) quiet() bool {
	return e.inflight == 0 && e.pollCtx.Err() != nil && (!e.abandoned || !time.Now().Before(e.quietAt))
}

// stopping says whether the loop is stopping, for the handlers too. It
// reads the two ctxs itself rather than wait for run to notice: a message
// is not started after either has ended.
func (e *engine) stopping() bool {
	select {
	case <-e.stopCh:
		return true
	default:
	}
	return e.execCtx.Err() != nil || (e.consumeCtx != nil && e.consumeCtx.Err() != nil)
}

// loopTimer is a timer of run: c is nil while it is not armed.
type loopTimer struct {
	t *time.Timer
	c <-chan time.Time
}

func (t *loopTimer) set(d time.Duration) {
	t.stop()
	t.t = time.NewTimer(d)
	t.c = t.t.C
}

// fired disarms a timer whose channel delivered.
func (t *loopTimer) fired() { t.t, t.c = nil, nil }

func (t *loopTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.t, t.c = nil, nil
}
