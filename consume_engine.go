package queen

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// The engine of one Execute. Its state (the loop type) is owned by one
// goroutine, Execute's own (run), which takes every decision in a select
// loop over channels; every other goroutine has one role and talks to it
// over those channels only:
//
//   - fetchers (consume_fetch.go) send the pops the owner orders and
//     return their answers (popc);
//   - workers (consume_handle.go) run the handler, the outcome callbacks
//     and the handler hooks for the messages the owner hands them, and
//     report each outcome as it is decided (donec);
//   - ONE sender (consume_send.go) sends the loop's acks, lease renewals
//     and reads of the queue's retry settings, each job on a goroutine of
//     its own, and returns each answer (sentc). Acks go in one job at a
//     time, what completes meanwhile in the next; only a batch's worth
//     (ackChunk) goes beside a job in flight, never two jobs with one
//     partition.
//
// A pop's answer goes fetch (consume_fetch.go), dispatch into parts, one
// per partition (consume_dispatch.go), handle (consume_handle.go), settle
// (consume_settle.go): each outcome is acked as soon as the sender is
// free, a partition's in order, and a failed message is retried where it
// failed (consume_failures.go), its lease renewed meanwhile
// (consume_lease.go). The stop path is consume_stop.go. The pop and part
// types and the part's state transitions, which every stage uses, are
// consume_part.go. No goroutine but
// the owner reads or writes the loop; what the others get (a message
// slice, a ctx, a job) is not written while they hold it.

// engineConfig is what the parts read of the options.
type engineConfig struct {
	queue, group string
	each         bool          // a part per partition, a handler call per message
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

// engine is one Execute: what every goroutine of the loop may read (set
// up before any starts, then never written), the channels between them,
// and the owner's state.
type engine struct {
	b     consumeBroker
	cfg   engineConfig
	log   *slog.Logger
	hooks *hookSet // the Client's (nil: none)
	on    handlers
	life  lifecycle

	// The channels. Each is buffered so that the owner never blocks on a
	// send: it orders at most Concurrency pops, hands at most Concurrency
	// parts to workers, and gives the sender at most as many jobs at once
	// as sendc holds.
	popOrders chan popOrder  // owner -> fetchers
	popc      chan popAnswer // fetchers -> owner
	workc     chan work      // owner -> workers
	donec     chan result    // workers -> owner
	sendc     chan *job      // owner -> sender
	sentc     chan *job      // sender -> owner

	st loop // the owner's alone
}

// loop is the state of one Execute, read and written by the owner
// goroutine (run) alone.
type loop struct {
	e    *engine
	cfg  *engineConfig
	log  *slog.Logger
	life *lifecycle

	phase phase
	fatal error // what Execute returns

	fetcher fetcher
	pops    []*pop  // in hand: from the answer until every ack of it was answered
	queued  []*part // parts waiting for a worker, in order
	running []*part // parts a worker has
	held    []*part // parts waiting for a retry (RetryDelay)
	outbox  []*part // parts that had acks to send (some may have none left)
	workers int     // worker goroutines alive
	// occupying counts the parts that occupy a handler: not settled, not
	// waiting for a retry (setState; inHand).
	occupying int

	failures *failureCounter
	rules    ruleState
	acks     ackState    // the outbox's backoff and outage
	sending  int         // the sender's jobs in flight
	acking   int         // of them, ack jobs
	spares   []*job      // ack jobs answered, for the next ones
	renewals []*pop      // pops whose renewal is due, in order
	news     settledNews // what settling found, for settledFound

	lastBusy time.Time // the last pop settled (or the start), for IdleMillis
	drainAt  time.Time // a stop's wait for answers on their way ends (zero: none)
	graceAt  time.Time // a stop's grace period ends (zero: none)
	settleBy time.Time // a stop's last acks are given up then (zero: none)
	acksOver bool      // settleBy passed: nothing more is acked
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
	e := newEngine(ctx, cb.ctx, b, cfg, qb.limit, qb.c.log)
	e.hooks = qb.c.hooks
	e.on = handlers{handle: cb.handle, handleBatch: cb.handleBatch,
		onSuccess: cb.onSuccess, onError: cb.onError, onLoopError: cb.onLoopError}
	return e, nil
}

// newEngine is an engine over any broker (tests give a fake); the caller
// sets the handlers. consumeCtx is Consume's (nil: none).
func newEngine(execCtx, consumeCtx context.Context, b consumeBroker, cfg engineConfig, limit int, log *slog.Logger) *engine {
	e := &engine{b: b, log: log, cfg: cfg}
	e.life.init(execCtx, consumeCtx)
	e.st = loop{e: e, cfg: &e.cfg, log: log, life: &e.life, fetcher: newFetcher(limit),
		failures: newFailureCounter(maxCountedFailures)}
	return e
}

// run is Execute: it starts the loop's goroutines, then runs the owner's
// select loop until the stop path is done, and returns when no goroutine
// of the loop is left.
func (e *engine) run() error {
	l := &e.st
	slots := e.cfg.slots
	e.popOrders, e.popc = make(chan popOrder, slots), make(chan popAnswer, slots)
	e.workc, e.donec = make(chan work, slots), make(chan result, 4*slots)
	// Jobs in flight: ack jobs (at most Concurrency), a renewal or a lost
	// lease's OnLoopError call per pop in hand (at most 2×Concurrency), a
	// read of the queue's settings.
	jobs := 3*slots + 1
	e.sendc, e.sentc = make(chan *job, jobs), make(chan *job, jobs)
	l.lastBusy = time.Now()
	l.fetcher.start(e.cfg.retry)
	l.acks.backoff = newRetryBackoff(e.cfg.retry)
	for range slots {
		e.life.spawn(e.fetch)
		e.life.spawn(e.work)
	}
	l.workers = slots
	e.life.spawn(e.send)
	defer e.shutdown()

	if e.stopping() {
		l.stop(nil) // a ctx that ended: no pop at all
	} else {
		l.readRuleAtStart() // before the first pop can create the queue
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	armed := time.Time{}
	ended, consumeEnded := e.life.ctx.Done(), e.life.consumeDone
	for {
		now := time.Now()
		l.act(now)
		if l.finished() {
			return l.fatal
		}
		if l.phase != running {
			ended, consumeEnded = nil, nil // stopped: nothing more to hear from them
		}
		// Arm the one timer for the earliest deadline, if it moved.
		if at := l.nextWake(now); !at.Equal(armed) {
			armed = at
			if !at.IsZero() {
				timer.Reset(max(at.Sub(now), 0))
			} else {
				timer.Stop()
			}
		}
		select {
		case a := <-e.popc:
			if err := l.answered(a); err != nil {
				l.stop(err)
			}
		case r := <-e.donec:
			l.handled(r)
		case j := <-e.sentc:
			l.sent(j)
		case <-timer.C:
			armed = time.Time{}
		case <-ended:
			l.stop(nil)
		case <-consumeEnded:
			l.stop(nil)
		}
		l.settledFound()
		l.drainReady()
	}
}

// drainReady takes the reports already waiting, so that what completed
// together is acked together.
func (l *loop) drainReady() {
	for range 64 {
		select {
		case r := <-l.e.donec:
			l.handled(r)
		case a := <-l.e.popc:
			if err := l.answered(a); err != nil {
				l.stop(err)
			}
		default:
			return
		}
		l.settledFound()
	}
}

// settledFound acts on what settling found (check, consume_settle.go)
// since it last ran: each partition freed paces the pops (one more may go
// while contended), each pop settled gives back the Limit units it did not
// use, and the Limit, once all called and settled, stops the loop. The
// owner runs it after every step that may settle a part, before anything
// reads the pacing or the Limit.
func (l *loop) settledFound() {
	for l.news != (settledNews{}) {
		n := l.news
		l.news = settledNews{}
		for range n.freed {
			l.fetcher.freed(l.cfg.slots)
		}
		if n.pops > 0 {
			l.fetcher.limit.settled(n.units, n.calls)
			if l.fetcher.limit.reached() {
				l.stop(nil) // its give-backs may settle more: taken in the next round
			}
		}
	}
}

// act does what the state allows now: the stop of a ctx that ended, what
// is due, handlers for the parts waiting, pops, and the sender's next
// jobs: a read of the queue's settings, every renewal due, then acks
// (after a stop, only once no pop of the loop can claim what they free).
func (l *loop) act(now time.Time) {
	if l.phase == running && l.e.stopping() {
		l.stop(nil) // no pop or message starts after a ctx ended
	}
	l.due(now)
	l.settledFound()
	l.dispatch()
	l.popMore(now)
	l.giveRuleRead()
	l.giveRenewals()
	l.flush(now, l.phase == running || l.fetcher.quiet(l.life.pollCtx, now))
}

// due does what a deadline asks: the stop's steps, the parts whose
// retryDelay is over, the renewals due, IdleMillis.
func (l *loop) due(now time.Time) {
	if !l.drainAt.IsZero() && !now.Before(l.drainAt) {
		l.drainAt = time.Time{}
		l.fetcher.abandon(l.life.pollCancel)
	}
	if !l.graceAt.IsZero() && !now.Before(l.graceAt) {
		l.graceAt = time.Time{}
		l.life.hcancel(errConsumeStopped)
	}
	if !l.settleBy.IsZero() && !now.Before(l.settleBy) {
		l.settleBy = time.Time{}
		l.giveUpAcks()
	}
	if len(l.held) > 0 {
		l.retryDue(now)
	}
	l.renewDue(now)
	if l.phase == running && l.idleCounts() && !now.Before(l.lastBusy.Add(l.cfg.idle)) {
		l.log.Debug("queen: consume loop idle, stopping", "queue", l.cfg.queue, "group", l.cfg.group, "idle", l.cfg.idle)
		l.stop(nil)
	}
}

// idleCounts says whether IdleMillis runs now: no pop in hand, and the
// loop has heard from the broker (a pop answered, or failing): a first pop
// slower than the idle time is no idleness.
func (l *loop) idleCounts() bool {
	f := &l.fetcher
	return l.cfg.idle > 0 && len(l.pops) == 0 && (f.answered || f.outage.backoff.failures > 0)
}

// nextWake is the earliest deadline the owner waits for (zero: none).
func (l *loop) nextWake(now time.Time) time.Time {
	var at time.Time
	soon := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	soon(l.drainAt)
	soon(l.graceAt)
	soon(l.settleBy)
	if l.phase == running {
		if l.idleCounts() {
			soon(l.lastBusy.Add(l.cfg.idle))
		}
		if t := l.fetcher.wakeAt(); l.canPop() && t.After(now) {
			soon(t) // a pop held back by the pacing
		}
	} else if q := l.fetcher.quietAt; l.life.pollCtx.Err() != nil && now.Before(q) {
		soon(q) // the acks held back may go then
	}
	for _, pt := range l.held {
		soon(pt.due)
	}
	for _, p := range l.pops {
		if p.renewAt.IsZero() || p.renewing {
			continue
		}
		soon(p.renewAt)
	}
	if t := l.acks.wakeAt(l, now); t.After(now) {
		soon(t) // acks held back by a backoff, or lingering
	}
	return at
}

// finished says whether the stop path is done: no pop or ack in flight,
// no handler running, every pop settled (or given up). Renewals and reads
// of the queue's settings still in flight are not waited for: shutdown
// cancels them.
func (l *loop) finished() bool {
	return l.phase != running && l.fetcher.inflight == 0 && len(l.running) == 0 &&
		l.acking == 0 && len(l.pops) == 0
}

// shutdown ends the loop's goroutines and contexts; it returns when none
// of them is left.
func (e *engine) shutdown() {
	l := &e.life
	l.hcancel(errConsumeStopped)
	l.pollCancel()
	l.reqCancel() // renewals and reads of the settings still in flight: nothing waits for them
	// ...but their answers are taken, so that none blocks the sender on
	// sentc: pops that settled may have left more renewals in flight than
	// sentc holds.
	for ; e.st.sending > 0; e.st.sending-- {
		<-e.sentc
	}
	close(e.popOrders)
	close(e.workc)
	close(e.sendc)
	l.wg.Wait()
	l.end()
}

// loopError hands err to the OnLoopError hook, if any; a panic in the hook
// is logged, never the loop's end. It runs on the fetchers and the sender,
// never on the owner.
func (e *engine) loopError(err *LoopError) {
	f := e.on.onLoopError
	if f == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("queen: OnLoopError hook panicked", "panic", v)
		}
	}()
	f(e.life.reqCtx, err)
}
