package queen

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The loop: one goroutine (Execute's) owns the engine's state and drives
// everything else: Concurrency fetchers send the pops it asks for,
// Concurrency workers run the handler groups it hands out (and settle each
// pop after its last group), a lease keeper per pop renews its lease. Each
// reports back on a channel; no lock guards the state: only the loop
// touches it.
//
// The states of a loop, and its one stop path:
//
//	running   pops go out for free handlers (consume_fetch.go); groups
//	          start as handlers and their partitions free up; each pop is
//	          settled by the worker that ends its last group.
//	   │  stop: a ctx ended, the Limit is reached, IdleMillis passed, a
//	   │  pop was refused for good, or a handler ended its goroutine
//	   ▼
//	draining  no pop and no group starts again. Groups waiting for a
//	          handler are given back (never started). Pops in flight get
//	          popDrain for an answer already on its way (its messages are
//	          then given back, not left leased), and are then abandoned.
//	          Handlers running go on for the grace period; then their ctx
//	          is cancelled. Batch acks wait until no pop of the loop is
//	          parked at the broker (quiet): a parked long poll would be
//	          handed the messages given back, and lose them with it.
//	   │  no pop in flight, no handler running, every pop settled
//	   ▼
//	done      Execute returns: nil after a ctx, Limit or idle stop, the
//	          error after a refusal or a Goexit. No goroutine is left.

const (
	popDrain      = 250 * time.Millisecond // what a stop gives a pop's answer on its way
	abandonNotice = 100 * time.Millisecond // what a broker gets to notice an abandoned long poll
)

type phase int

const (
	running phase = iota
	draining
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

	popReq   chan int       // pops to send, to the fetchers (their size)
	work     chan *group    // groups to handle, to the workers
	popped   chan popDone   // from the fetchers
	finished chan groupDone // from the workers
	settled  chan *batch    // from the settles after a stop
	wg       sync.WaitGroup // every goroutine the loop started

	// The loop's state: touched by the loop's goroutine only.
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
	abandoned bool      // pops in flight were abandoned
	quietAt   time.Time // when an abandoned pop is surely gone
	lastBusy  time.Time

	wake, idleT, drainT, graceT, quietT loopTimer
}

func (cb *ConsumeBuilder) newEngine(ctx context.Context) (*engine, error) {
	qb := &cb.qb
	if cb.handle == nil && cb.handleBatch == nil {
		return nil, fmt.Errorf("%w: nil consume handler", ErrInvalidOption)
	}
	if qb.c == nil {
		return nil, fmt.Errorf("%w: builder has no client", ErrInvalidOption)
	}
	if qb.commitOnDelivery {
		return nil, ErrCommitOnDeliveryConsume
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
	e.log, e.retry = qb.c.log, qb.c.cfg.retry
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
		popReq:   make(chan int, cfg.slots),    // never more pops in flight than slots
		work:     make(chan *group, cfg.slots), // nor groups running
		popped:   make(chan popDone),
		finished: make(chan groupDone),
		settled:  make(chan *batch),
		limit:    limiter{on: limit > 0, left: limit},
		lastBusy: time.Now(),
	}
	e.pollCtx, e.pollCancel = context.WithCancel(e.reqCtx)
	e.hctx, e.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
	return e
}

// run is the loop. It returns when the stop path is done.
func (e *engine) run() error {
	e.outage = newOutage(e.retry)
	if e.cfg.idle > 0 {
		e.idleT.set(e.cfg.idle)
	}
	e.wg.Add(2 * e.cfg.slots)
	for range e.cfg.slots {
		go e.fetcher()
		go e.worker()
	}
	defer func() {
		for _, t := range []*loopTimer{&e.wake, &e.idleT, &e.drainT, &e.graceT, &e.quietT} {
			t.stop()
		}
		e.hcancel(errConsumeStopped)
		e.pollCancel()
		close(e.popReq)
		close(e.work)
		e.wg.Wait()
	}()
	for {
		e.step()
		if e.phase == draining && e.inflight == 0 && len(e.running) == 0 && e.settling == 0 && len(e.pending) == 0 {
			return e.fatal
		}
		select {
		case d := <-e.popped:
			e.onPopped(d)
		case d := <-e.finished:
			e.onFinished(d)
		case b := <-e.settled:
			e.onSettled(b)
		case <-e.execCtx.Done():
			e.beginStop(nil)
		case <-ctxDone(e.consumeCtx):
			e.beginStop(nil)
		case <-e.wake.c:
			e.wake.fired()
		case <-e.idleT.c:
			e.idleT.fired()
			e.checkIdle()
		case <-e.drainT.c:
			e.drainT.fired()
			e.abandonPops()
		case <-e.graceT.c:
			e.graceT.fired()
			e.hcancel(errConsumeStopped)
		case <-e.quietT.c:
			e.quietT.fired()
		}
	}
}

// step starts what may start: while running, groups for free handlers and
// pops for the handlers left free; once stopping, the batch acks held
// back until no pop of the loop is parked at the broker.
func (e *engine) step() {
	if e.phase == running && e.stopping() {
		e.beginStop(nil) // a ctx that ended stops the loop before its next pop, and its first
	}
	if e.phase == running {
		e.dispatch()
		for e.mayPop() {
			n, ok := e.limit.reserve(e.cfg.want)
			if !ok {
				break
			}
			e.inflight++
			e.popReq <- n
		}
		return
	}
	if e.quiet() {
		for _, b := range e.pending {
			e.startSettle(b)
		}
		e.pending = nil
	}
}

// dispatch starts the waiting groups whose partition is free, in order,
// while handlers are free.
func (e *engine) dispatch() {
	for i := 0; i < len(e.queued) && len(e.running) < e.cfg.slots; {
		g := e.queued[i]
		if slices.ContainsFunc(e.running, g.conflicts) {
			i++
			continue
		}
		e.queued = slices.Delete(e.queued, i, i+1)
		e.running = append(e.running, g)
		e.work <- g
	}
}

// mayPop says whether a pop may go now: a handler is free for it (pops in
// flight, groups waiting, groups running and pops being settled are fewer
// than the handlers, which bounds what the loop holds to Concurrency
// pops), and no pause runs.
func (e *engine) mayPop() bool {
	if e.inflight+len(e.queued)+len(e.running)+e.settling >= e.cfg.slots {
		return false
	}
	if wait := time.Until(e.pauseTill); wait > 0 {
		if !e.wake.active() {
			e.wake.set(wait)
		}
		return false
	}
	return true
}

// pause holds the pops until t.
func (e *engine) pause(t time.Time) {
	e.pauseTill = t
	e.wake.stop()
}

func (e *engine) onPopped(d popDone) {
	e.inflight--
	got := 0
	if d.res != nil {
		got = len(d.res.messages)
	}
	e.limit.popped(d.reserved, got)
	if e.phase == draining {
		if e.inflight == 0 {
			e.abandonPops() // the last pop is back: nothing to wait for
		}
		if got > 0 { // an answer on its way at the stop: given back whole
			e.busy++
			e.batchDone(e.newBatch(d.res, d.reserved))
		}
		return
	}
	switch {
	case d.err != nil:
		e.popFailed(d.err)
	case got == 0:
		e.popOK()
		e.pause(time.Now().Add(emptyDelay(d.res, d.took)))
	default:
		e.popOK()
		e.pause(time.Time{})
		b := e.newBatch(d.res, d.reserved)
		e.busy++
		if e.cfg.renewEvery > 0 && b.leaseID != "" {
			b.keeper = e.keepLease(b)
		}
		e.queued = append(e.queued, b.groups...)
	}
}

func (e *engine) onFinished(d groupDone) {
	g := d.g
	e.running = slices.DeleteFunc(e.running, func(o *group) bool { return o == g })
	if g.goexit {
		e.log.Error("queen: consume handler ended its goroutine (runtime.Goexit); the loop stops",
			"queue", e.cfg.queue, "group", e.cfg.group)
		e.beginStop(errHandlerGoexit)
	}
	switch {
	case d.settled:
		e.settling++ // its worker settled it: counted as one
		e.onSettled(g.b)
	case d.last:
		e.batchDone(g.b)
	}
}

// batchDone settles a pop whose groups are all done: at once while
// running, once quiet after a stop.
func (e *engine) batchDone(b *batch) {
	if e.phase == draining && !e.quiet() {
		e.pending = append(e.pending, b)
		return
	}
	e.startSettle(b)
}

func (e *engine) startSettle(b *batch) {
	e.settling++
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.settle(b)
		e.settled <- b
	}()
}

func (e *engine) onSettled(b *batch) {
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
		e.beginStop(nil)
	}
}

// checkIdle stops the loop after IdleMillis with no pop in hand.
func (e *engine) checkIdle() {
	if e.phase != running {
		return
	}
	if e.busy > 0 {
		e.idleT.set(e.cfg.idle)
		return
	}
	if since := time.Since(e.lastBusy); since < e.cfg.idle {
		e.idleT.set(e.cfg.idle - since)
		return
	}
	e.log.Debug("queen: consume loop idle, stopping", "queue", e.cfg.queue, "group", e.cfg.group, "idle", e.cfg.idle)
	e.beginStop(nil)
}

// beginStop is the one way from running to draining. err is what Execute
// returns (nil: a ctx, Limit or idle stop); a later stop's error does not
// replace an earlier one.
func (e *engine) beginStop(err error) {
	if e.phase == draining {
		if e.fatal == nil {
			e.fatal = err
		}
		return
	}
	e.phase, e.fatal = draining, err
	close(e.stopCh)
	e.wake.stop()
	e.idleT.stop()
	if e.inflight == 0 {
		e.abandonPops()
	} else {
		e.drainT.set(popDrain)
	}
	if e.cfg.grace > 0 {
		e.graceT.set(e.cfg.grace)
	} else {
		e.hcancel(errConsumeStopped)
	}
	// Groups that never started: given back (their pops settle when
	// their last group is done).
	queued := e.queued
	e.queued = nil
	for _, g := range queued {
		if g.b.left.Add(-1) == 0 {
			e.batchDone(g.b)
		}
	}
}

// abandonPops cancels the pops still in flight, once: after popDrain, or
// as soon as none is in flight. The broker claims nothing more for a poll
// that is gone, once it has noticed: quiet waits abandonNotice for that.
func (e *engine) abandonPops() {
	if e.pollCtx.Err() != nil {
		return
	}
	e.drainT.stop()
	if e.inflight > 0 {
		e.abandoned = true
		e.quietAt = time.Now().Add(abandonNotice)
		e.quietT.set(abandonNotice)
	}
	e.pollCancel()
}

// quiet says whether, after a stop, no pop of the loop can still claim
// messages at the broker.
func (e *engine) quiet() bool {
	return e.inflight == 0 && e.pollCtx.Err() != nil && (!e.abandoned || !time.Now().Before(e.quietAt))
}

// stopping says whether the loop is stopping, for the handler goroutines
// too. It reads the two ctxs itself rather than wait for the loop to
// notice: a message is not started after either has ended.
func (e *engine) stopping() bool {
	select {
	case <-e.stopCh:
		return true
	default:
	}
	return e.execCtx.Err() != nil || (e.consumeCtx != nil && e.consumeCtx.Err() != nil)
}

// loopTimer is a timer of the loop: c is nil while it is not armed.
type loopTimer struct {
	t *time.Timer
	c <-chan time.Time
}

func (t *loopTimer) set(d time.Duration) {
	t.stop()
	t.t = time.NewTimer(d)
	t.c = t.t.C
}

func (t *loopTimer) active() bool { return t.c != nil }

// fired disarms a timer whose channel delivered.
func (t *loopTimer) fired() { t.t, t.c = nil, nil }

func (t *loopTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.t, t.c = nil, nil
}
