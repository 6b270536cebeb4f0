package queen

import (
	"context"
	"sync"
	"time"
)

// The lifecycle: the states of a loop, its one stop path, its contexts and
// its goroutines.
//
//   - running: pops go out for free handlers; groups start as workers and
//     their partitions free up; each pop is settled by the goroutine that
//     ends its last group, or, when its failed partitions wait for the
//     queue's retryDelay, by a goroutine of its own after the wait
//     (holdFailed). A stop (stopLocked: a ctx ended, the Limit is
//     reached, IdleMillis passed, a pop was refused for good, or a handler
//     ended its goroutine) leads to draining.
//   - draining: no pop and no group starts again. Groups waiting for a
//     handler are given back (never started). Pops in flight get
//     answerOnItsWay for an answer already on its way (its messages are
//     then given back, not left leased), and are then abandoned. Handlers
//     running go on for the grace period; then their ctx is cancelled.
//     A wait for retryDelay ends at once. Batch acks (a held pop's
//     included) wait until no pop of the loop is parked at the broker
//     (quiet): a parked long poll would be handed the messages given back,
//     and lose them with it. When no pop is in flight, no handler runs and
//     every pop is settled (none held), done.
//   - done: the workers end (the fetchers ended at the stop); Execute
//     returns nil after a ctx, Limit or idle stop, the error after a
//     refusal or a Goexit. No goroutine is left.
//
// The loop has four contexts: ctx, Execute's, which also ends when
// Consume's does (it stops the loop; its values are Execute's); pollCtx,
// the pops', cancelled to abandon them (after a stop); hctx, the base of
// the handlers' (Consume's values), cancelled when the grace period ends;
// reqCtx, the settles' and renewals' (Execute's values), cancelled only
// once run's goroutines are done.

type phase int

const (
	running phase = iota
	draining
	done
)

// lifecycle is the stop path's state: each field is written once (phase
// twice: draining, then done).
type lifecycle struct {
	phase  phase
	fatal  error         // what Execute returns
	stopCh chan struct{} // closed when the stop begins
	doneCh chan struct{} // closed when the stop path is done
	wg     sync.WaitGroup

	ctx context.Context // Execute's, ended also by Consume's
	end func()          // releases ctx
	// consumeDone is Consume's ctx's Done (nil: none), for stopping: ctx
	// ends after Consume's only once AfterFunc's goroutine ran.
	consumeDone <-chan struct{}
	pollCtx     context.Context
	pollCancel  context.CancelFunc
	hctx        context.Context
	hcancel     context.CancelCauseFunc
	reqCtx      context.Context
	reqCancel   context.CancelFunc
}

// init makes the contexts of a loop over Execute's ctx and Consume's
// (nil: none).
func (l *lifecycle) init(execCtx, consumeCtx context.Context) {
	if execCtx == nil {
		execCtx = context.Background()
	}
	l.stopCh, l.doneCh = make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(execCtx)
	l.ctx, l.end = ctx, cancel
	hbase := execCtx
	if consumeCtx != nil {
		hbase = consumeCtx
		if consumeCtx.Err() != nil {
			cancel() // at once: no pop goes after a ctx that has ended
		}
		l.consumeDone = consumeCtx.Done()
		// AfterFunc's goroutine ends within Execute too: end waits for it
		// when it has started.
		ran := make(chan struct{})
		unhook := context.AfterFunc(consumeCtx, func() { cancel(); close(ran) })
		l.end = func() {
			if !unhook() {
				<-ran
			}
			cancel()
		}
	}
	l.reqCtx, l.reqCancel = context.WithCancel(context.WithoutCancel(execCtx))
	l.pollCtx, l.pollCancel = context.WithCancel(l.reqCtx)
	l.hctx, l.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
}

// spawn runs f on a goroutine of the loop: run waits for them all.
func (l *lifecycle) spawn(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// stop begins the stop path, once (e.mu held): err is what Execute
// returns (nil: a ctx, Limit or idle stop); a later stop's error does not
// replace an earlier one. It says whether the stop began now.
func (l *lifecycle) stop(err error) bool {
	if l.fatal == nil {
		l.fatal = err
	}
	if l.phase != running {
		return false
	}
	l.phase = draining
	close(l.stopCh)
	return true
}

// finish ends the stop path (e.mu held).
func (l *lifecycle) finish() {
	l.phase = done
	close(l.doneCh)
}

// stopped says whether the stop began.
func (l *lifecycle) stopped() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// ended says whether Execute's ctx or Consume's has ended.
func (l *lifecycle) ended() bool {
	if l.ctx.Err() != nil {
		return true
	}
	select {
	case <-l.consumeDone:
		return true
	default:
		return false
	}
}

// run starts the fetchers and workers and walks the stop path; it returns
// when it is done.
func (e *engine) run() error {
	l := &e.life
	e.fetcher.start(e.cfg.retry)
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
		l.hcancel(errConsumeStopped)
		l.pollCancel()
		l.wg.Wait()
		l.reqCancel()
		l.end()
	}()

	// running: until a stop.
	var idle loopTimer
	if e.cfg.idle > 0 {
		idle.set(e.cfg.idle)
	}
	for running := true; running; {
		select {
		case <-l.stopCh:
			running = false
		case <-l.ctx.Done():
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
	if e.fetcher.inflight > 0 && l.pollCtx.Err() == nil {
		drain.set(answerOnItsWay)
	}
	e.mu.Unlock()
	if e.cfg.grace > 0 {
		grace.set(e.cfg.grace)
	} else {
		l.hcancel(errConsumeStopped)
	}
	for {
		select {
		case <-l.doneCh:
			e.mu.Lock()
			defer e.mu.Unlock()
			return l.fatal
		case <-drain.c:
			drain.fired()
			e.mu.Lock()
			if e.fetcher.abandon(l.pollCancel) {
				quiet.set(abandonNoticed)
			}
			e.mu.Unlock()
		case <-quiet.c:
			quiet.fired()
			e.mu.Lock()
			e.changed() // quiet now: the acks held back may go
			e.mu.Unlock()
		case <-grace.c:
			grace.fired()
			l.hcancel(errConsumeStopped)
		}
	}
}

// idleFor stops the loop after IdleMillis with no pop in hand, or says how
// long to wait before asking again.
func (e *engine) idleFor() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.settler.busy > 0 {
		return e.cfg.idle
	}
	if since := time.Since(e.fetcher.lastBusy); since < e.cfg.idle {
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

// stopLocked is the one way from running to draining (e.mu held); err as
// lifecycle.stop says. run arms the drain and grace timers when it sees
// stopCh closed.
func (e *engine) stopLocked(err error) {
	if !e.life.stop(err) {
		return
	}
	if e.fetcher.inflight == 0 {
		e.fetcher.abandon(e.life.pollCancel)
	}
	// Groups that never started: given back (their pops settle when
	// their last group is done).
	for _, b := range e.sched.drop() {
		e.settler.hold(b)
	}
	e.changed()
}

// stopping says whether the loop is stopping, for the handlers too. It
// reads the ctxs itself rather than wait for run to notice: a message is
// not started after either has ended.
func (e *engine) stopping() bool {
	return e.life.stopped() || e.life.ended()
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
