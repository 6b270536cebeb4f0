package queen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// DefaultGracePeriod is how long, after a stop, the handlers already running
// may go on before their context is cancelled (see ConsumeBuilder.GracePeriod).
const DefaultGracePeriod = 10 * time.Second

// Tuning of the consume loop. Requests that settle or renew run on their own
// context bounded by these, never on the caller's (possibly cancelled) one.
const (
	settleTimeout     = 15 * time.Second
	renewTimeout      = 10 * time.Second
	emptyPollDelay    = 100 * time.Millisecond
	popBackoffMin     = 100 * time.Millisecond
	popBackoffMax     = 5 * time.Second
	popDrain          = 250 * time.Millisecond // what a stop gives a pop's answer on its way
	abandonNotice     = 100 * time.Millisecond // what a broker gets to notice an abandoned long poll
	autopilotMaxBatch = 1000                   // the most messages the broker hands out when it sizes a pop
)

// ErrHandlerPanic is matched (errors.Is) by the error a consume loop reports
// for a handler that panicked: the panic is recovered, logged with its
// stack, and the message is treated as failed.
var ErrHandlerPanic = errors.New("queen: consume handler panicked")

// Outcome is what happens to a message after its handler ran: one of the
// four ack statuses, with an error text for failed and dead-lettered
// messages. Build it with Complete, Fail, Retry or DLQ. The zero
// Outcome stands for the loop's own choice (completed after success, failed
// after an error).
type Outcome struct {
	// Status is the ack status sent to the broker.
	Status AckStatus
	// Error is the reason stored with a failed or dead-lettered message.
	Error string
}

// Complete is the outcome of a message that is done: the group's cursor
// moves past it.
func Complete() Outcome { return Outcome{Status: StatusCompleted} }

// Fail is the outcome of a message to try again: one retry is spent and the
// message (with what follows it in its partition) comes back after the
// queue's retryDelay. err's text is stored as the reason.
//
// The broker counts retries per partition and consumer group, not per
// message: every Fail adds one, and the count goes back to zero only when
// a leased batch of the partition is finished with no failure (see
// QueueConfig.RetryLimit). A Fail that finds the count at RetryLimit
// dead-letters its message, even on that message's first failure. An
// Each() consumer with a Batch larger than one therefore dead-letters
// messages that failed once when others of their partition failed just
// before: return Retry() for a failure that should not count (a timeout of
// a service the handler calls, say), and Fail for one that should.
func Fail(err error) Outcome { return Outcome{Status: StatusFailed, Error: errText(err)} }

// Retry is the outcome of a message given back at once without spending a
// retry: it is delivered again, first of its partition.
func Retry() Outcome { return Outcome{Status: StatusRetry} }

// DLQ is the outcome of a message that can never succeed: it goes to
// the dead-letter queue at once, with err's text as the reason, whatever
// retries are left.
func DLQ(err error) Outcome { return Outcome{Status: StatusDLQ, Error: errText(err)} }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ConsumeBuilder is a consume loop ready to run: the options of the
// QueueBuilder it came from, the handler, and the outcome callbacks. Start it
// with Execute. Create it with QueueBuilder.Consume or ConsumeBatch.
type ConsumeBuilder struct {
	qb          QueueBuilder
	ctx         context.Context
	handle      func(ctx context.Context, msg *Message) error
	handleBatch func(ctx context.Context, msgs []*Message) error
	onSuccess   func(ctx context.Context, msg *Message) Outcome
	onError     func(ctx context.Context, msg *Message, err error) Outcome
	grace       time.Duration
}

// Consume prepares a loop that pops messages and calls h once per message
// (Each() is implied), in partition order, never two messages of one
// partition at once. When h
// returns nil the message is acked completed; when it returns an error it is
// acked failed with the error's text, and the messages after it in its
// partition are left for the broker to deliver again after it. The
// completed and failed outcomes of one pop go to the broker in one batch
// ack. With AutoAck(false) h acks each message itself; the loop then acks
// nothing after a nil, and still nacks (failed) after an error, so that the
// partition is not stuck until the lease runs out. A panic in h is
// recovered, logged with its stack and treated as an error matching
// ErrHandlerPanic. See Execute for when the loop stops and what it gives
// back.
//
// The loop stops when ctx or the ctx given to Execute ends. The ctx passed to
// h keeps ctx's values; it is cancelled when the grace period after a stop
// runs out, or when the lease of the message is lost.
//
// Every option of the QueueBuilder applies (Group, SubscriptionMode, Batch,
// Partitions, Wait, ..., Each, AutoAck, RenewLease, Concurrency, Limit,
// IdleMillis); they are copied when Consume is called.
func (b *QueueBuilder) Consume(ctx context.Context, h func(ctx context.Context, msg *Message) error) *ConsumeBuilder {
	return &ConsumeBuilder{qb: *b, ctx: ctx, handle: h, grace: DefaultGracePeriod}
}

// ConsumeBatch prepares a loop that calls h once per pop with the whole
// batch (which may span several partitions of the pop). When h returns nil
// every message is acked completed in one batch ack; when it returns an
// error every message is nacked: each partition's first message of the
// batch is acked failed with the error's text, and the rest of the partition
// comes back after it. With Each() set, h is called once per message with a
// one-message slice, under the rules of Consume. Otherwise as Consume.
func (b *QueueBuilder) ConsumeBatch(ctx context.Context, h func(ctx context.Context, msgs []*Message) error) *ConsumeBuilder {
	return &ConsumeBuilder{qb: *b, ctx: ctx, handleBatch: h, grace: DefaultGracePeriod}
}

// OnSuccess hands the outcome of every message whose handler returned nil to
// f: the loop acks what f returns (still in the pop's one batch ack) instead
// of completed. It applies with AutoAck(false) too. Under ConsumeBatch, f is
// called for each message of the batch.
func (cb *ConsumeBuilder) OnSuccess(f func(ctx context.Context, msg *Message) Outcome) *ConsumeBuilder {
	cb.onSuccess = f
	return cb
}

// OnError hands the outcome of every message whose handler returned an
// error (or panicked) to f: the loop acks what f returns instead of failed,
// for example DLQ for an error that retrying cannot fix. Per message, after
// Fail or Retry the rest of that partition in the pop is not handled (it
// comes back after the message); after Complete or DLQ it goes on. Under
// ConsumeBatch without Each(), f is called for each message of the failed batch, in order,
// until it returns Fail or Retry for a message: the rest of that partition
// then comes back after it without a call. A handler stopped by the stop
// (its error returned after its ctx was cancelled at the end of the grace
// period, or an error matching context.Canceled returned once the loop is
// stopping) is given back with Retry without calling f.
func (cb *ConsumeBuilder) OnError(f func(ctx context.Context, msg *Message, err error) Outcome) *ConsumeBuilder {
	cb.onError = f
	return cb
}

// GracePeriod sets how long the handlers already running may go on after a
// stop before their ctx is cancelled (default DefaultGracePeriod; 0 cancels
// them at once). Their outcomes are acked either way; a handler that returns
// an error because of that cancellation, or an error matching
// context.Canceled once the loop is stopping (a ctx of its own that the same
// signal ended, say), has its message given back with a retry ack, which
// spends no retry.
func (cb *ConsumeBuilder) GracePeriod(d time.Duration) *ConsumeBuilder {
	cb.grace = d
	return cb
}

// Execute runs the loop until one of these:
//   - ctx, or the ctx given to Consume, ends: Execute returns nil;
//   - Limit messages were handled, counted across all slots: nil;
//   - IdleMillis passed with no message in any slot: nil;
//   - the broker refuses a pop for good (a 4xx answer other than 408 and
//     429, a closed client, a broker without conflation): that error;
//   - a handler ends its goroutine (runtime.Goexit, as t.FailNow does):
//     an error saying so (its message is given back).
//
// Transient failures (network errors, 5xx, 429) are retried with a backoff;
// by default each pop long polls (wait=true, 30 s).
//
// On every stop the long polls in flight are abandoned within 250 ms (the
// time an answer already on its way gets to arrive, so that the messages it
// leased are given back rather than left leased; at once when no pop is in
// flight); handlers already running
// get the grace period and their outcomes are acked; messages popped but
// not started are given back with a retry ack (no
// retry spent) in the same batch ack, so that another worker gets them at
// once. Acks, renewals and give-backs go out on their own short-lived
// context, never on a cancelled one; an ack that fails on the way (the
// network, 5xx, 429) is sent again for up to 15 s, so a stop may take that
// long when the broker is unreachable. When Execute returns, none of its
// goroutines is left and every message it popped has been settled or
// given back (unless the broker could not be reached for that long: such
// messages come back when their lease runs out).
//
// Invalid options fail before any request with an error matching
// ErrInvalidArgument: CommitOnDelivery(true) (ErrCommitOnDeliveryConsume),
// Concurrency below 1, a negative Limit or IdleMillis, a RenewLease
// interval under MinRenewMillis (ErrInvalidOption), and the checks of Pop. Execute may be called
// again after it returned.
func (cb *ConsumeBuilder) Execute(ctx context.Context) error {
	r, err := cb.newRun(ctx)
	if err != nil {
		return err
	}
	return r.run()
}

// consumeRun is the state of one Execute.
type consumeRun struct {
	c      *Client
	cb     *ConsumeBuilder
	req    *popRequest
	group  string
	queue  string
	each   bool
	ackOff bool

	renewEvery time.Duration
	renewSecs  int
	idle       time.Duration
	limited    bool

	execCtx    context.Context
	reqCtx     context.Context // values of execCtx, never cancelled: acks, renewals
	pollCtx    context.Context // cancelled by stop: abandons long polls
	pollCancel context.CancelFunc
	hctx       context.Context // base of the handlers' contexts
	hcancel    context.CancelCauseFunc

	stopCh    chan struct{}
	stopOnce  sync.Once
	drain     *time.Timer // after a stop: abandons the pops in flight
	quietAt   time.Time   // after a stop: when the abandoned pops are surely gone
	popping   atomic.Int32
	abandon   sync.Once
	abandoned atomic.Bool   // pops in flight were abandoned
	slotsDone chan struct{} // closed when every slot and poller has ended
	slots     int           // Concurrency: handler slots
	workers   sync.WaitGroup
	pollers   sync.WaitGroup

	// Under mu (see consume_sched.go): the scheduling of slots and pops.
	mu          sync.Mutex
	workCond    sync.Cond // on mu: slots wait for a group to handle
	popCond     sync.Cond // on mu: pollers wait for their turn
	fatal       error
	budget      int          // Limit left to reserve
	outstanding int          // reserved by pops, or popped and not yet settled
	free        int          // slots waiting for a group
	inflight    int          // pops in flight
	ready       []*partGroup // partition groups waiting for a free slot
	running     []*partGroup // partition groups being handled

	start  time.Time
	busy   atomic.Int32
	active atomic.Int64 // last activity, as time since start
}

// Causes of a handler ctx's cancellation.
var (
	errConsumeStopped = errors.New("queen: consume loop stopped and its grace period ended")
	errLeaseLostCause = fmt.Errorf("%w: renewal refused while the handler ran", ErrLeaseLost)
	errHandlerGoexit  = errors.New("queen: consume handler ended its goroutine (runtime.Goexit)")
)

func (cb *ConsumeBuilder) newRun(ctx context.Context) (*consumeRun, error) {
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
	req, err := qb.popRequest()
	if err != nil {
		return nil, err
	}
	if _, err := qb.c.popValues(req, true, 0); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	hbase := cb.ctx
	if hbase == nil {
		hbase = ctx
	}
	r := &consumeRun{
		c: qb.c, cb: cb, req: req,
		group: qb.group, queue: qb.queue,
		each:      qb.each || cb.handle != nil,
		ackOff:    qb.autoAckOff,
		idle:      time.Duration(qb.idleMs) * time.Millisecond,
		limited:   qb.limit > 0,
		budget:    qb.limit,
		execCtx:   ctx,
		reqCtx:    context.WithoutCancel(ctx),
		stopCh:    make(chan struct{}),
		slotsDone: make(chan struct{}),
		start:     time.Now(),
	}
	if qb.renew {
		r.renewEvery = time.Duration(qb.renewMs) * time.Millisecond
		r.renewSecs = renewSeconds(qb.renewMs, qb.leaseSeconds)
	}
	r.slots = max(qb.concurrency, 1)
	r.workCond.L = &r.mu
	r.popCond.L = &r.mu
	r.pollCtx, r.pollCancel = context.WithCancel(r.reqCtx)
	r.hctx, r.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
	return r, nil
}

// renewSeconds is how far each renewal extends the lease: at least three
// renewal intervals, and never less than the pop's own lease override or
// DefaultRenewSeconds (a renewal never shortens a lease on 2.x brokers, but
// may on older ones).
func renewSeconds(everyMs, leaseSeconds int) int {
	s := int(math.Ceil(3 * float64(everyMs) / 1000))
	base := DefaultRenewSeconds
	if leaseSeconds > 0 {
		base = leaseSeconds
	}
	return max(s, base)
}

func (r *consumeRun) run() error {
	var sup sync.WaitGroup
	sup.Add(1)
	go func() {
		defer sup.Done()
		r.supervise()
	}()
	for range r.slots {
		r.startWorker()
		r.pollers.Add(1)
		go func() {
			defer r.pollers.Done()
			r.poller()
		}()
	}
	r.workers.Wait()
	r.pollers.Wait()
	close(r.slotsDone)
	r.stop()
	sup.Wait()
	r.hcancel(errConsumeStopped)
	r.drain.Stop()
	r.pollCancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// stop ends the loop: no new pop or handler starts, and the pops in flight
// are abandoned after popDrain (at once when none is in flight). Running
// handlers get the grace period (see supervise).
//
// Why not abandon pops at once: a pop whose answer is already on its way
// has leased its messages, and dropping the answer would leave them leased
// until their lease runs out, out of reach of any worker. Given a moment,
// the answer arrives and its messages are given back with a retry ack. A
// long poll still parked after that is abandoned, and the broker claims
// nothing for a client that is gone, once it has noticed: settle waits for
// that before it gives messages back.
func (r *consumeRun) stop() {
	r.stopOnce.Do(func() {
		r.quietAt = time.Now().Add(popDrain + abandonNotice)
		r.drain = time.AfterFunc(popDrain, r.abandonPops)
		close(r.stopCh)
		if r.popping.Load() == 0 {
			r.abandonPops() // nothing to wait for; a pop starting now fails at once
		}
		r.mu.Lock()
		r.workCond.Broadcast()
		r.popCond.Broadcast()
		r.mu.Unlock()
	})
}

// abandonPops cancels the pops in flight, once, after a stop: at the end of
// popDrain, or as soon as no pop is in flight.
func (r *consumeRun) abandonPops() {
	r.abandon.Do(func() {
		r.abandoned.Store(r.popping.Load() > 0)
		r.pollCancel()
	})
}

// stopping says whether the loop is stopping. It reads the two ctxs itself
// rather than wait for the supervisor to notice: a ctx that has ended stops
// the loop before its next pop or handler, and before its first pop.
func (r *consumeRun) stopping() bool {
	if r.isStopped() {
		return true
	}
	if r.execCtx.Err() != nil || (r.cb.ctx != nil && r.cb.ctx.Err() != nil) {
		r.stop()
		return true
	}
	return false
}

// fail records a terminal error and stops the loop.
func (r *consumeRun) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.stop()
}

// supervise turns the end of either ctx and idleness into a stop, then
// cancels the running handlers once the grace period is over (or at once
// when the slots are all done).
func (r *consumeRun) supervise() {
	var idleT *time.Timer
	if r.idle > 0 {
		idleT = time.NewTimer(r.idle)
		defer idleT.Stop()
	}
	r.waitStop(idleT)
	if g := r.cb.grace; g > 0 {
		t := time.NewTimer(g)
		select {
		case <-t.C:
		case <-r.slotsDone:
		}
		t.Stop()
	}
	r.hcancel(errConsumeStopped)
}

func (r *consumeRun) waitStop(idleT *time.Timer) {
	var idleC <-chan time.Time
	if idleT != nil {
		idleC = idleT.C
	}
	var consumeDone <-chan struct{}
	if r.cb.ctx != nil {
		consumeDone = r.cb.ctx.Done()
	}
	for {
		select {
		case <-r.stopCh:
			return
		case <-r.execCtx.Done():
			r.stop()
			return
		case <-consumeDone:
			r.stop()
			return
		case <-idleC:
			if r.busy.Load() > 0 {
				idleT.Reset(r.idle)
				continue
			}
			since := time.Since(r.start) - time.Duration(r.active.Load())
			if since >= r.idle {
				r.c.log.Debug("queen: consume loop idle, stopping", "queue", r.queue, "group", r.group, "idle", r.idle)
				r.stop()
				return
			}
			idleT.Reset(r.idle - since)
		}
	}
}

func (r *consumeRun) touch() { r.active.Store(int64(time.Since(r.start))) }

// sleep waits d or until the loop stops.
func (r *consumeRun) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopCh:
	case <-t.C:
	}
}

// emptyDelay is the pause after an empty pop, so that pops that do not wait
// (Wait(false), discovery, a broker that answers at once) do not spin.
func (r *consumeRun) emptyDelay(res *popResult, took time.Duration) time.Duration {
	d := emptyPollDelay
	if res.autopilot != nil && res.autopilot.WaitMs != nil && *res.autopilot.WaitMs >= 0 {
		d = time.Duration(*res.autopilot.WaitMs) * time.Millisecond
	}
	return d - took
}

// nextBackoff is the pause after a failed pop: the client's retry policy
// bounds (MinBackoff, MaxBackoff, at most popBackoffMax), doubling.
func (r *consumeRun) nextBackoff(prev time.Duration) time.Duration {
	lo, hi := popBackoffMin, popBackoffMax
	if p := r.c.cfg.retry; p.MinBackoff > 0 {
		lo = p.MinBackoff
		if p.MaxBackoff > 0 {
			hi = min(p.MaxBackoff, popBackoffMax)
		}
		hi = max(hi, lo)
	}
	d := lo
	if prev > 0 {
		d = min(prev*2, hi)
	}
	// ±20 % jitter, so that many workers do not retry in step.
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// fatalPopError says whether a pop error ends the loop: a refusal that
// asking again cannot change.
func fatalPopError(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrConflationUnsupported) || errors.Is(err, ErrInvalidArgument) {
		return true
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return be.Status >= 400 && !retryableStatus(be.Status)
	}
	return !transport.RetryableErr(err) // e.g. an untrusted TLS certificate
}

// retryableStatus says whether a broker's answer of that status may change
// if the request is sent again: the client's one rule, transport.Retryable.
func retryableStatus(status int) bool { return transport.Retryable(status) }

// popOnce sends one pop, its batch capped to n when n > 0 (the rest of the
// Limit, so that nothing is popped only to be given back).
func (r *consumeRun) popOnce(n int) (*popResult, error) {
	start := r.c.hooks.now()
	res, err := r.sendPop(n)
	var msgs []*Message
	if err == nil {
		msgs = res.messages
	}
	r.c.hooks.popped(r.pollCtx, r.queue, r.cb.qb.partition, r.group, r.req.longPollWait(), start, msgs, err)
	return res, err
}

// sendPop sends one pop, its batch capped to n when n > 0, and decodes
// its answer.
func (r *consumeRun) sendPop(n int) (*popResult, error) {
	withSub, err := r.c.withSubscription(r.pollCtx, r.req)
	if err != nil {
		return nil, err
	}
	vals, err := r.c.popValues(r.req, withSub, n)
	if err != nil {
		return nil, err
	}
	res, err := r.c.popWith(r.pollCtx, r.req, vals, r.cb.qb.conflation)
	if err != nil {
		return nil, err
	}
	r.c.popAnswered(r.req, withSub, res)
	return res, nil
}

// partSet is a small set of partition ids (a pop spans at most 64).
type partSet []string

func (s partSet) has(id string) bool {
	for _, p := range s {
		if p == id {
			return true
		}
	}
	return false
}

func leaseLost(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), errLeaseLostCause)
}

// stoppedBy says whether a handler's error comes from the loop's stop: its
// ctx was cancelled at the end of the grace period, or, once the loop is
// stopping, the error is a context cancellation (of a ctx of the handler's
// own, such as the signal ctx of a worker). Such a message is given back
// with a retry ack: a stop spends no retry and dead-letters nothing.
func (r *consumeRun) stoppedBy(ctx context.Context, err error) bool {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errConsumeStopped) {
		return true
	}
	return r.stopping() && errors.Is(err, context.Canceled)
}

// decide turns a handler's result into the message's outcome; send is false
// when the loop leaves the ack to the handler (AutoAck(false), success).
func (r *consumeRun) decide(ctx context.Context, m *Message, err error) (o Outcome, send bool) {
	if err == nil {
		if f := r.cb.onSuccess; f != nil {
			return r.checked(r.callback(func() Outcome { return f(ctx, m) }, m), Complete()), true
		}
		if r.ackOff {
			return Outcome{}, false
		}
		return Complete(), true
	}
	if r.stoppedBy(ctx, err) {
		// Stopped by the stop: give it back, spend nothing.
		return Retry(), true
	}
	if f := r.cb.onError; f != nil {
		return r.checked(r.callback(func() Outcome { return f(ctx, m, err) }, m), Fail(err)), true
	}
	return Fail(err), true
}

// checked replaces the zero Outcome by def and an unknown status by a
// failure, so that one bad callback answer cannot sink the pop's batch ack.
func (r *consumeRun) checked(o, def Outcome) Outcome {
	if o.Status == "" {
		return def
	}
	if !o.Status.valid() {
		r.c.log.Error("queen: outcome callback returned an unknown status; acking failed", "status", string(o.Status))
		return Outcome{Status: StatusFailed, Error: fmt.Sprintf("unknown outcome status %q", o.Status)}
	}
	return o
}

// callback runs an outcome callback, turning a panic into a failure.
func (r *consumeRun) callback(f func() Outcome, m *Message) (o Outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = Fail(r.panicked(v, m, "outcome callback"))
		}
	}()
	return f()
}

func (r *consumeRun) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = r.panicked(v, m, "handler")
		}
	}()
	return r.cb.handle(ctx, m)
}

func (r *consumeRun) callBatch(ctx context.Context, msgs []*Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = r.panicked(v, msgs[0], "batch handler")
		}
	}()
	return r.cb.handleBatch(ctx, msgs)
}

// panicked logs a recovered panic with its stack and returns it as an error.
func (r *consumeRun) panicked(v any, m *Message, what string) error {
	r.c.log.Error("queen: consume "+what+" panicked; the message is nacked",
		"queue", r.queue, "group", r.group, "transactionId", m.TransactionID, "partition", m.Partition,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return fmt.Errorf("%w: %v", ErrHandlerPanic, v)
}

// settle sends the outcomes of one pop in one batch ack, on its own context.
// A failure that asking again may cure (the network, 5xx, 408, 429) is sent
// again with a backoff until settleTimeout, so that a blip, at a stop above
// all, does not leave the messages leased until their lease runs out.
func (r *consumeRun) settle(acks []Settlement) {
	if len(acks) == 0 {
		return
	}
	if r.stopping() {
		// The pops in flight first: a long poll still parked would claim the
		// messages given back here; answered, it would give them back again,
		// abandoned before the broker noticed, it would leave them leased.
		<-r.pollCtx.Done()
		if r.abandoned.Load() {
			time.Sleep(time.Until(r.quietAt))
		}
	}
	ctx, cancel := context.WithTimeout(r.reqCtx, settleTimeout)
	defer cancel()
	start := r.c.hooks.now()
	var err error
	defer func() {
		group := r.group
		if group == "" {
			group = messageGroup(acks[0].Message)
		}
		r.c.hooks.settled(ctx, group, acks, start, err)
	}()
	var backoff time.Duration
	for {
		err = r.sendAcks(ctx, acks)
		if err == nil {
			return
		}
		var ae *AckError
		if errors.As(err, &ae) {
			r.c.log.Warn("queen: broker refused some acks of a pop", "queue", r.queue, "group", r.group, "err", err)
			return
		}
		if transientSettleError(err) && ctx.Err() == nil {
			backoff = r.nextBackoff(backoff)
			r.c.log.Warn("queen: batch ack failed; sending it again", "queue", r.queue, "group", r.group,
				"messages", len(acks), "err", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		r.c.log.Error("queen: batch ack failed; its messages come back when their lease ends",
			"queue", r.queue, "group", r.group, "messages", len(acks), "err", err)
		return
	}
}

// transientSettleError says whether sending an ack again may succeed: not
// after a refusal of the request itself (4xx other than 408 and 429, an
// answer that is not an ack result, an invalid ack, a closed client).
func transientSettleError(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return retryableStatus(be.Status)
	}
	return transport.RetryableErr(err)
}

// renewer renews one pop's lease on a ticker while its handlers run.
type renewer struct {
	cancel   context.CancelFunc
	finished chan struct{}
}

func (r *consumeRun) startRenewer(leaseID string, lost context.CancelCauseFunc) *renewer {
	ctx, cancel := context.WithCancel(r.reqCtx)
	rn := &renewer{cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(rn.finished)
		t := time.NewTicker(r.renewEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, renewTimeout)
			res, err := r.c.renewLeaseOf(cctx, leaseID, r.renewSecs, r.queue, r.group)
			ccancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.c.log.Warn("queen: lease renewal failed; trying again at the next tick", "leaseId", leaseID, "err", err)
				continue
			}
			if !res.Success {
				r.c.log.Warn("queen: lease lost; cancelling its handlers", "leaseId", leaseID, "reason", res.Error)
				lost(errLeaseLostCause)
				return
			}
		}
	}()
	return rn
}

// stop ends the renewals and waits for the renewer to exit.
func (rn *renewer) stop() {
	rn.cancel()
	<-rn.finished
}
