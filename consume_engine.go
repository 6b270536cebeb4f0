package queen

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The engine of one Execute: what the parts read of the options, and the
// state they share (consume_loop.go says who touches it, and how).

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
	failures    *failureCounter // each message's failures (consume_failures.go)
	rules       ruleReader      // the queue's retryLimit and retryDelay, read once

	execCtx    context.Context    // Execute's
	consumeCtx context.Context    // Consume's (may be nil)
	reqCtx     context.Context    // execCtx's values, not cancelled with it: acks, renewals
	reqCancel  context.CancelFunc // after the last request (run)
	pollCtx    context.Context    // pops; cancelled to abandon them
	pollCancel context.CancelFunc
	hctx       context.Context // base of the handlers' ctxs: ends after the grace period
	hcancel    context.CancelCauseFunc
	stopCh     chan struct{} // closed when the stop begins
	doneCh     chan struct{} // closed when the stop path is done
	wg         sync.WaitGroup

	// Under mu: the state the fetchers and workers share (consume_loop.go).
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
	// The pacing of pops that do not wait (consume_fetch.go).
	settled    uint64    // pops settled so far
	answered   bool      // a pop was answered (empty or not)
	flowing    bool      // the last answer brought messages
	contended  bool      // a pop that did not wait found nothing; pops go one per settle
	tokens     int       // settles not yet used by a pop, while contended
	fallbackAt time.Time // while contended with no token: a long poll may go after this
	abandoned  bool      // pops in flight were abandoned at the stop
	quietAt    time.Time // when an abandoned pop is surely gone
	lastBusy   time.Time
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
		stopCh:   make(chan struct{}),
		doneCh:   make(chan struct{}),
		kickPop:  make(chan struct{}),
		kickWork: make(chan struct{}),
		limit:    limiter{on: limit > 0, left: limit},
		failures: newFailureCounter(maxCountedFailures),
		lastBusy: time.Now(),
	}
	// reqCtx is cancelled once run's goroutines are done.
	e.reqCtx, e.reqCancel = context.WithCancel(context.WithoutCancel(execCtx))
	e.pollCtx, e.pollCancel = context.WithCancel(e.reqCtx)
	e.hctx, e.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
	return e
}
