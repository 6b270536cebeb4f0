package queen

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The engine of one Execute composes its parts, each a type whose fields
// only its own methods write, each in its own file: fetcher
// (consume_fetch.go), scheduler (consume_dispatch.go), the handler calls
// (consume_handle.go), settler (consume_settle.go), failureCounter and
// ruleReader (consume_failures.go, each with a lock of its own),
// leaseKeeper (consume_lease.go), lifecycle (consume_stop.go).
//
// The fetcher, scheduler and settler, and the loop's phase, are the state
// its goroutines share: the loop type below. Only engine.lock gives a
// *loop, and unlock ends its use, so every method of loop runs under the
// engine's mutex and calls the parts' methods; nothing else reaches them.
// Who writes what:
//
//   - loop.phase, loop.fatal: loop.stop, loop.changed (done);
//   - fetcher: the pops in flight, the pacing, the Limit, the outage
//     (loop.start, loop.takePop, loop.answered, loop.dispatched,
//     loop.settled, loop.stop, loop.abandon);
//   - scheduler: the groups waiting and running (loop.dispatched,
//     loop.takeWork, loop.groupDone, loop.stop);
//   - settler: the pops not yet settled (loop.dispatched, loop.groupDone,
//     loop.holdEnd, loop.settled, loop.stop);
//   - the wakeups of the fetcher and scheduler: next (a goroutine goes to
//     sleep and wakes) and loop.changed (kick).
//
// A pop goes fetch, dispatch, handle, settle: a fetcher goroutine sends
// it (engine.fetch), turns its answer into groups (engine.dispatch) and
// handles the first itself (engine.runGroup), and the goroutine that ends
// the pop's last group settles it (engine.settle); workers handle the
// other groups. A pop whose failed partitions wait for the queue's
// retryDelay waits on a goroutine of its own (holdFailed), so that the
// wait occupies no handler. Each goroutine takes its next task with next;
// who has nothing to do waits on its wakeup, which loop.changed kicks
// when the state may have work for it. Execute's own goroutine (run,
// consume_stop.go) turns the contexts and the timers into the steps of
// the stop path.

// engineConfig is what the parts read of the options.
type engineConfig struct {
	queue, group string
	each         bool          // a group per partition, a handler call per message
	ackOff       bool          // AutoAck(false)
	slots        int           // Concurrency
	want         int           // the most one pop asks for
	idle         time.Duration // IdleMillis; 0: none
	renewEvery   time.Duration // RenewLease interval; 0: no renewal
	renewSecs    int
	lease        time.Duration // LeaseTime: the pops' lease, over the queue's (0: the queue's)
	grace        time.Duration
	retry        RetryPolicy // the Client's: the bounds of the pops' and acks' backoff
}

// handlers are the user's functions of one Execute.
type handlers struct {
	handle      func(ctx context.Context, msg *Message) error
	handleBatch func(ctx context.Context, msgs []*Message) error
	onSuccess   func(ctx context.Context, msg *Message) Outcome
	onError     func(ctx context.Context, msg *Message, err error) Outcome
	onLoopError func(ctx context.Context, err error)
}

// engine is one Execute.
type engine struct {
	b     consumeBroker
	cfg   engineConfig
	log   *slog.Logger
	hooks *hookSet // the Client's (nil: none)
	on    handlers

	life     lifecycle       // set up by init, then only read
	failures *failureCounter // each message's failures
	rules    ruleReader      // the queue's retryLimit and retryDelay, read once

	mu sync.Mutex
	st loop // through lock only
}

// loop is the state the loop's goroutines share (the top of this file).
type loop struct {
	cfg  *engineConfig // read only
	log  *slog.Logger
	life *lifecycle // read only: its contexts and channels
	// The phase: running until the stop, draining until done.
	phase phase
	fatal error // what Execute returns
	// The parts.
	fetcher fetcher
	sched   scheduler
	settler settler
}

// lock gives the loop's shared state; unlock gives it back.
func (e *engine) lock() *loop {
	e.mu.Lock()
	return &e.st
}

func (e *engine) unlock() { e.mu.Unlock() }

func (cb *ConsumeBuilder) newEngine(ctx context.Context) (*engine, error) {
	qb := &cb.qb
	if cb.handle == nil && cb.handleBatch == nil {
		return nil, fmt.Errorf("%w: nil consume handler", ErrInvalidOption)
	}
	if qb.c == nil {
		return nil, fmt.Errorf("%w: builder has no client", ErrInvalidOption)
	}
	if err := qb.checkConsume(); err != nil {
		return nil, err
	}
	if cb.grace < 0 {
		return nil, fmt.Errorf("%w: GracePeriod(%v) must not be negative", ErrInvalidOption, cb.grace)
	}
	b, err := newClientBroker(qb)
	if err != nil {
		return nil, err
	}
	cfg := engineConfig{
		queue: qb.queue, group: qb.group,
		each:   qb.each || cb.handle != nil,
		ackOff: qb.autoAckOff,
		slots:  max(qb.concurrency, 1),
		want:   autopilotMaxBatch,
		idle:   time.Duration(qb.idleMs) * time.Millisecond,
		grace:  cb.grace,
		lease:  qb.lease,
		retry:  qb.c.cfg.retry,
	}
	if b.req.query.Batch != nil {
		cfg.want = max(*b.req.query.Batch, 1)
	}
	if qb.renew {
		cfg.renewEvery = time.Duration(qb.renewMs) * time.Millisecond
		cfg.renewSecs = renewSeconds(qb.renewMs)
	}
	e := newEngine(ctx, cb.ctx, b, cfg, qb.limit, qb.c.log)
	e.hooks = qb.c.hooks
	e.on = handlers{handle: cb.handle, handleBatch: cb.handleBatch,
		onSuccess: cb.onSuccess, onError: cb.onError, onLoopError: cb.onLoopError}
	return e, nil
}

// newEngine is an engine over any broker (tests give a fake); the caller
// sets the handlers. consumeCtx is Consume's (nil: none).
func newEngine(execCtx, consumeCtx context.Context, b consumeBroker, cfg engineConfig, limit int, log *slog.Logger) *engine {
	e := &engine{b: b, log: log, cfg: cfg, failures: newFailureCounter(maxCountedFailures)}
	e.life.init(execCtx, consumeCtx)
	e.st = loop{cfg: &e.cfg, log: log, life: &e.life, fetcher: newFetcher(limit), sched: newScheduler()}
	return e
}

// task is what next gives a goroutine of the loop: a pop to send (of n
// messages), a group to handle, or a pop to settle.
type task struct {
	pop       bool
	n         int
	nowait    bool
	settledAt uint64 // the pops settled when the pop went
	g         *group
	settle    *batch
}

// startSlot starts one fetcher (it sends pops and handles the first group
// of each) or one worker (it handles groups and settles pops).
func (e *engine) startSlot(fetcher bool) {
	e.life.spawn(func() {
		var s slot
		defer e.slotEnded(&s)
		for {
			t, ok := e.next(fetcher)
			if !ok {
				return
			}
			switch {
			case t.pop:
				e.fetch(t, &s)
			case t.g != nil:
				e.runGroup(t.g, &s)
			default:
				e.settle(t.settle)
				e.settledLate(t.settle)
			}
		}
	})
}

// slot is one goroutine of the loop: the group it is handling, if any.
type slot struct{ g *group }

// slotEnded ends a slot's goroutine. Should a handler have ended it
// (runtime.Goexit, as t.FailNow does), its group goes on all the same,
// marked, its running message and the rest without an outcome (given
// back), and the loop stops.
func (e *engine) slotEnded(s *slot) {
	if s.g != nil {
		s.g.goexit = true
		e.groupDone(s.g)
	}
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
		l := e.lock()
		if l.phase == running && e.stopping() {
			l.stop(nil) // a ctx that ended: no pop or message starts after it
		}
		var t task
		ok := false
		if fetcher {
			t, ok = l.takePop()
		} else {
			t, ok = l.takeWork()
		}
		if ok {
			e.unlock()
			return t, true
		}
		if (fetcher && l.phase != running) || l.phase == done {
			e.unlock()
			return task{}, false
		}
		w := &l.sched.wake
		if fetcher {
			w = &l.fetcher.wake
		}
		kick := w.sleep()
		var wake <-chan time.Time
		if wait := time.Until(l.fetcher.wakeAt()); fetcher && wait > 0 {
			if pause == nil {
				pause = time.NewTimer(wait)
			} else {
				pause.Reset(wait)
			}
			wake = pause.C
		}
		e.unlock()
		select {
		case <-kick:
		case <-wake:
		}
		e.lock()
		w.woke()
		e.unlock()
	}
}

// takeWork gives a worker a group whose partition is free, or, after a
// stop and once quiet, a pop to settle.
func (l *loop) takeWork() (task, bool) {
	if l.phase == running {
		if g := l.sched.take(l.cfg.slots); g != nil {
			return task{g: g}, true
		}
		return task{}, false
	}
	if b := l.settler.take(l.fetcher.quiet(l.life.pollCtx)); b != nil {
		return task{settle: b}, true
	}
	return task{}, false
}

// inHand is what the loop holds past the pops' answers: groups waiting or
// running, pops being settled. With the pops in flight, it is held below
// Concurrency. The pops held for retryDelay are not in it (they occupy no
// handler); takePop bounds them.
func (l *loop) inHand() int { return l.sched.held() + l.settler.settling }

// changed wakes who waits for a task and may now have one, and ends the
// stop path when nothing is left to do. (Waking only those spares a
// fetcher that handles its own pop a wake-up of every idle worker at each
// step.)
func (l *loop) changed() {
	if l.phase == draining && l.fetcher.inflight == 0 && len(l.sched.running) == 0 && l.settler.idle() {
		l.phase = done
		l.life.finish()
	}
	stopped := l.phase != running
	if stopped || len(l.sched.queued) > 0 {
		l.sched.wake.kick()
	}
	if stopped || l.fetcher.inflight+l.inHand() < l.cfg.slots {
		l.fetcher.wake.kick()
	}
}

// stop is the one way from running to draining; err is what Execute
// returns (nil: a ctx, Limit or idle stop; a later stop's error does not
// replace an earlier one). run arms the drain and grace timers when it
// sees the stop.
func (l *loop) stop(err error) {
	if l.fatal == nil {
		l.fatal = err
	}
	if l.phase != running {
		return
	}
	l.phase = draining
	l.life.announceStop()
	if l.fetcher.inflight == 0 {
		l.fetcher.abandon(l.life.pollCancel)
	}
	// Groups that never started: given back (their pops settle when
	// their last group is done).
	for _, b := range l.sched.drop() {
		l.settler.hold(b)
	}
	l.changed()
}

// wakeup is where the loop's goroutines with nothing to do wait (one for
// the fetchers, one for the workers): a channel closed and replaced by
// kick.
type wakeup struct {
	ch   chan struct{}
	idle int // goroutines waiting on ch
}

func newWakeup() wakeup { return wakeup{ch: make(chan struct{})} }

// sleep counts one more waiter and returns the channel to wait on.
func (w *wakeup) sleep() <-chan struct{} {
	w.idle++
	return w.ch
}

// woke counts one waiter less.
func (w *wakeup) woke() { w.idle-- }

// kick wakes every waiter, if any.
func (w *wakeup) kick() {
	if w.idle > 0 {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}
