package queen

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The engine of one Execute composes its parts, each a type whose fields
// only its own methods write, each in its own file:
//
//   - fetcher (consume_fetch.go): when a pop goes, how big, whether it
//     waits (the pacing), the Limit, the outage, the pops abandoned at a
//     stop;
//   - scheduler (consume_dispatch.go): the groups waiting and running, one
//     group per partition at a time, in order;
//   - the handler calls (consume_handle.go): a group's messages through
//     the handler, and each message's outcome;
//   - settler (consume_settle.go): the pops not yet settled, those whose
//     failed partitions wait for the queue's retryDelay, and those held
//     back after a stop until no pop of the loop is parked;
//   - failureCounter (consume_failures.go): each message's failures
//     against the queue's RetryLimit;
//   - leaseKeeper (consume_lease.go): one per pop under RenewLease;
//   - lifecycle (consume_stop.go): the phases of the stop path, the
//     contexts, the goroutines.
//
// The parts share e.mu: a method documented "(e.mu held)" is called with
// it held. Concurrency fetchers send pops when a handler is free for one,
// Concurrency workers handle the groups whose partition is free, and the
// goroutine that ends a pop's last group settles the pop; a pop whose
// failed partitions wait for the queue's retryDelay waits on a goroutine
// of its own (holdFailed), so that the wait occupies no handler. A fetcher
// handles the first group of its own pop itself: a pop of one partition
// goes from answer to ack on one goroutine (fetch, dispatch, handle,
// settle). Each goroutine takes its next task with next; who has nothing
// to do waits on its wakeup, which changed kicks when the state may have
// work for it. Execute's own goroutine (run, consume_stop.go) turns the
// contexts and the timers into the steps of the stop path.

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

	mu       sync.Mutex // the parts' state below (but failures and rules, which lock themselves)
	life     lifecycle
	fetcher  fetcher
	sched    scheduler
	settler  settler
	failures *failureCounter // each message's failures
	rules    ruleReader      // the queue's retryLimit and retryDelay, read once
}

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
	e := newEngine(ctx, cb.ctx, b, cfg, qb.limit)
	e.log, e.hooks = qb.c.log, qb.c.hooks
	e.on = handlers{handle: cb.handle, handleBatch: cb.handleBatch,
		onSuccess: cb.onSuccess, onError: cb.onError, onLoopError: cb.onLoopError}
	return e, nil
}

// newEngine is an engine over any broker (tests give a fake); the caller
// sets the handlers. consumeCtx is Consume's (nil: none).
func newEngine(execCtx, consumeCtx context.Context, b consumeBroker, cfg engineConfig, limit int) *engine {
	e := &engine{
		b: b, log: slog.New(slog.DiscardHandler), cfg: cfg,
		fetcher:  newFetcher(limit),
		sched:    newScheduler(),
		failures: newFailureCounter(maxCountedFailures),
	}
	e.life.init(execCtx, consumeCtx)
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
		for {
			t, ok := e.next(fetcher)
			if !ok {
				return
			}
			switch {
			case t.pop:
				e.fetch(t)
			case t.g != nil:
				e.runGroup(t.g)
			default:
				e.settle(t.settle)
				e.settledLate(t.settle)
			}
		}
	})
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
		if e.life.phase == running && e.stopping() {
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
		if (fetcher && e.life.phase != running) || e.life.phase == done {
			e.mu.Unlock()
			return task{}, false
		}
		w := &e.sched.wake
		if fetcher {
			w = &e.fetcher.wake
		}
		kick := w.sleep()
		var wake <-chan time.Time
		if wait := time.Until(e.fetcher.wakeAt()); fetcher && wait > 0 {
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
		w.woke()
		e.mu.Unlock()
	}
}

// takeWork gives a worker a group whose partition is free, or, after a
// stop and once quiet, a pop to settle (e.mu held).
func (e *engine) takeWork() (task, bool) {
	if e.life.phase == running {
		if g := e.sched.take(e.cfg.slots); g != nil {
			return task{g: g}, true
		}
		return task{}, false
	}
	if b := e.settler.take(e.fetcher.quiet(e.life.pollCtx)); b != nil {
		return task{settle: b}, true
	}
	return task{}, false
}

// inHand is what the loop holds past the pops' answers (e.mu held):
// groups waiting or running, pops being settled. With the pops in flight,
// it is held below Concurrency. The pops held for retryDelay are not in it
// (they occupy no handler); takePop bounds them.
func (e *engine) inHand() int { return e.sched.held() + e.settler.settling }

// changed wakes who waits for a task and may now have one (e.mu held),
// and ends the stop path when nothing is left to do. (Waking only those
// spares a fetcher that handles its own pop a wake-up of every idle
// worker at each step.)
func (e *engine) changed() {
	if e.life.phase == draining && e.fetcher.inflight == 0 && len(e.sched.running) == 0 && e.settler.idle() {
		e.life.finish()
	}
	stopped := e.life.phase != running
	if stopped || len(e.sched.queued) > 0 {
		e.sched.wake.kick()
	}
	if stopped || e.fetcher.inflight+e.inHand() < e.cfg.slots {
		e.fetcher.wake.kick()
	}
}

// wakeup is where the loop's goroutines with nothing to do wait (one for
// the fetchers, one for the workers): a channel closed and replaced by
// kick (e.mu held for all three).
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
