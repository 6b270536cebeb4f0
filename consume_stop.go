package queen

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The loop: Concurrency fetchers send pops when a handler is free for one
// (consume_fetch.go), Concurrency workers handle the groups of messages
// whose partition is free (consume_dispatch.go), at most Concurrency at
// once, and the goroutine that ends a pop's last group settles the pop
// (consume_settle.go). A fetcher handles the first group of its own pop
// itself: a pop of one partition goes from answer to ack on one goroutine. They take their
// next task with next; the state they share is in this file, under e.mu,
// and only the functions below touch it; who has nothing to do waits on
// a channel (e.kickPop for fetchers, e.kickWork for workers) that changed
// closes, and replaces, when the state may have work for them.
// Execute's own goroutine (run) turns the ctxs and the timers into the
// steps of the stop path.
//
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
	grace        time.Duration
}

// engine is one Execute.
type engine struct {
	b           consumeBroker
	log         *slog.Logger
	hooks       *hookSet // the Client's (nil: none)
	retry       RetryPolicy
	cfg         engineConfig
	handle      func(ctx context.Context, msg *Message) error
	handleBatch func(ctx context.Context, msgs []*Message) error
	onSuccess   func(ctx context.Context, msg *Message) Outcome
	onError     func(ctx context.Context, msg *Message, err error) Outcome
	onLoopError func(ctx context.Context, err error)

	execCtx    context.Context // Execute's
	consumeCtx context.Context // Consume's (may be nil)
	reqCtx     context.Context // execCtx's values, never cancelled: acks, renewals
	pollCtx    context.Context // pops; cancelled to abandon them
	pollCancel context.CancelFunc
	hctx       context.Context // base of the handlers' ctxs: ends after the grace period
	hcancel    context.CancelCauseFunc
	stopCh     chan struct{} // closed when the stop begins
	doneCh     chan struct{} // closed when the stop path is done
	wg         sync.WaitGroup

	// Under mu: the state the slots share.
	mu        sync.Mutex
	kickPop   chan struct{} // closed and replaced when a pop may go
	kickWork  chan struct{} // closed and replaced when a group or a settle may start
	idlePop   int           // fetchers waiting on kickPop
	idleWork  int           // workers waiting on kickWork
	phase     phase
	fatal     error
	inflight  int      // pops in flight
	queued    []*group // groups waiting for a handler (or their partition)
	running   []*group // groups being handled
	settling  int      // pops being settled
	pending   []*batch // pops to settle once quiet (after a stop)
	busy      int      // pops not yet settled
	limit     limiter
	outage    outage
	pauseTill time.Time // no pop before (after an empty answer or a failure)
	abandoned bool      // pops in flight were abandoned at the stop
	quietAt   time.Time // when an abandoned pop is surely gone
	lastBusy  time.Time
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
	}
	if b.req.query.Batch != nil {
		cfg.want = max(*b.req.query.Batch, 1)
	}
	if qb.renew {
		cfg.renewEvery = time.Duration(qb.renewMs) * time.Millisecond
		cfg.renewSecs = renewSeconds(qb.renewMs)
	}
	e := newEngine(ctx, cb.ctx, b, cfg, qb.limit)
	e.log, e.retry, e.hooks = qb.c.log, qb.c.cfg.retry, qb.c.hooks
	e.handle, e.handleBatch = cb.handle, cb.handleBatch
	e.onSuccess, e.onError, e.onLoopError = cb.onSuccess, cb.onError, cb.onLoopError
	return e, nil
}

// newEngine is an engine over any broker (tests give a fake); the caller
// sets the handlers.
func newEngine(execCtx, consumeCtx context.Context, b consumeBroker, cfg engineConfig, limit int) *engine {
	if execCtx == nil {
		execCtx = context.Background()
	}
	hbase := consumeCtx
	if hbase == nil {
		hbase = execCtx
	}
	e := &engine{
		b: b, log: slog.New(slog.DiscardHandler), cfg: cfg,
		execCtx: execCtx, consumeCtx: consumeCtx,
		reqCtx:   context.WithoutCancel(execCtx),
		stopCh:   make(chan struct{}),
		doneCh:   make(chan struct{}),
		kickPop:  make(chan struct{}),
		kickWork: make(chan struct{}),
		limit:    limiter{on: limit > 0, left: limit},
		lastBusy: time.Now(),
	}
	e.pollCtx, e.pollCancel = context.WithCancel(e.reqCtx)
	e.hctx, e.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
	return e
}

// run starts the fetchers and workers and walks the stop path; it returns
// when it is done.
func (e *engine) run() error {
	e.outage = newOutage(e.retry)
	if e.stopping() {
		e.beginStop(nil) // a ctx that ended stops the loop before its first pop
	}
	for range e.cfg.slots {
		e.startSlot(true)
		e.startSlot(false)
	}
	defer func() {
		e.hcancel(errConsumeStopped)
		e.pollCancel()
		e.wg.Wait()
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

// task is what next gives a goroutine of the loop: a group to handle, a
// pop to send (of n messages), or a pop to settle.
type task struct {
	g      *group
	pop    bool
	n      int
	settle *batch
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
				if g := e.fetch(t.n); g != nil {
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
		if wait := time.Until(e.pauseTill); fetcher && wait > 0 {
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
	if e.phase != running || e.inflight+len(e.queued)+len(e.running)+e.settling >= e.cfg.slots ||
		time.Now().Before(e.pauseTill) {
		return task{}, false
	}
	n, ok := e.limit.reserve(e.cfg.want)
	if !ok {
		return task{}, false
	}
	e.inflight++
	return task{pop: true, n: n}, true
}

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
	pop := e.phase != running || e.inflight+len(e.queued)+len(e.running)+e.settling < e.cfg.slots
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
	case got == 0:
		e.popOK()
		e.pause(time.Now().Add(emptyDelay(d.res, d.took)))
	default:
		e.popOK()
		e.pauseTill = time.Time{}
		b := e.newBatch(d.res, d.reserved)
		e.busy++
		if e.cfg.renewEvery > 0 && b.leaseID != "" {
			b.keeper = e.keepLease(b)
		}
		e.queued = append(e.queued, b.groups...)
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
