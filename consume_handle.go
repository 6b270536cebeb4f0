package queen

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
)

// Handle: worker goroutines run the user's code, the owner what follows.
// A worker takes a part from its next message and calls the handler once
// per message (Consume, Each()) or once for the whole pop (ConsumeBatch),
// with the handler hooks and the outcome callbacks around it; it reports
// each outcome to the owner as soon as it is decided, and goes on with the
// part's next message after a Complete (or a DLQ, the loop's own ack),
// stopping after a failure or a Retry, at a stop and at a lost lease. The
// owner (handled) turns the outcomes into acks, retries and give-backs.

// work is a part handed to a worker: from msgs[from] on. The worker
// reads none of pt's fields: pt names the part in its reports.
type work struct {
	pt    *part
	msgs  []*Message
	from  int
	whole bool
	ctx   context.Context
}

// result is a worker's report: the outcome of msgs[i] (called: the
// handler ran; send false: no ack from the loop, AutoAck(false) after a
// success), or, for a whole pop, each message's outcome (outs; a zero
// one: no ack). end: the worker is done with the part (its next message
// is i+1 when called, i when not).
type result struct {
	pt     *part
	i      int
	called bool
	o      Outcome
	send   bool
	outs   []Outcome
	lost   bool // the lease was lost: the outcome is not acked
	end    bool
	goexit bool // the handler ended the goroutine (runtime.Goexit)
	fast   bool // the handler's call took less than quickCall: the next one may too
}

// work is a worker goroutine: it handles the parts the owner hands it.
// Should a handler end the goroutine (runtime.Goexit, as t.FailNow does),
// the worker reports it and is gone: the loop stops.
func (e *engine) work() {
	for w := range e.workc {
		if w.whole {
			e.handleWhole(w)
		} else {
			e.handleEach(w)
		}
	}
}

// handleEach calls the handler once per message of w, in order, and
// reports each outcome.
func (e *engine) handleEach(w work) {
	i := w.from
	reported := false
	defer func() {
		if !reported { // runtime.Goexit in the handler or a callback
			e.donec <- result{pt: w.pt, i: i, end: true, goexit: true}
		}
	}()
	last := len(w.msgs) - 1
	for ; i <= last; i++ {
		m := w.msgs[i]
		if leaseLost(w.ctx) {
			reported = true
			e.donec <- result{pt: w.pt, i: i, lost: true, end: true}
			return
		}
		if e.stopping() {
			reported = true
			e.donec <- result{pt: w.pt, i: i, end: true}
			return
		}
		one := w.msgs[i : i+1 : i+1]
		hctx, turn := e.hooks.handlerStart(w.ctx, e.cfg.queue, e.cfg.group, one) // HandlerHook
		var err error
		began := time.Now() // the handler's time alone: not the hooks', nor the callbacks'
		if e.on.handle != nil {
			err = e.call(hctx, m)
		} else {
			err = e.callBatch(hctx, one)
		}
		took := time.Since(began)
		if leaseLost(w.ctx) {
			e.hooks.handlerEnd(hctx, turn, err, nil, true)
			reported = true
			e.donec <- result{pt: w.pt, i: i, called: true, lost: true, end: true}
			return
		}
		o, send := e.decide(hctx, m, err)
		var outcome [1]Outcome
		if send {
			outcome[0] = o
		}
		e.hooks.handlerEnd(hctx, turn, err, outcome[:], false)
		// After a failure or a Retry the part waits for the owner; under
		// AutoAck(false) a dead-lettered message too, since the handler
		// acks the next ones itself, at once, and a 2.x cursor would pass
		// the dead letter before its ack.
		end := i == last || o.Status == StatusFailed || o.Status == StatusRetry || (o.Status == StatusDLQ && e.cfg.ackOff)
		reported = end
		e.donec <- result{pt: w.pt, i: i, called: true, o: o, send: send, end: end, fast: took < quickCall}
		if end {
			return
		}
	}
}

// handleWhole calls the batch handler once with the whole pop. After an
// error each partition's first message is failed and the rest of the
// partition given back (or OnError decides, message by message, until a
// Fail or Retry).
func (e *engine) handleWhole(w work) {
	reported := false
	defer func() {
		if !reported { // runtime.Goexit in the handler or a callback
			e.donec <- result{pt: w.pt, end: true, goexit: true}
		}
	}()
	if leaseLost(w.ctx) || e.stopping() {
		reported = true
		e.donec <- result{pt: w.pt, end: true, lost: leaseLost(w.ctx)}
		return
	}
	hctx, turn := e.hooks.handlerStart(w.ctx, e.cfg.queue, e.cfg.group, w.msgs) // HandlerHook
	err := e.callBatch(hctx, w.msgs)
	if leaseLost(w.ctx) {
		e.hooks.handlerEnd(hctx, turn, err, nil, true)
		reported = true
		e.donec <- result{pt: w.pt, called: true, lost: true, end: true}
		return
	}
	outs := make([]Outcome, len(w.msgs))
	var skip []*Message // a message of each partition whose rest goes back
	for i, m := range w.msgs {
		if slices.ContainsFunc(skip, func(s *Message) bool { return samePartition(s, m) }) {
			outs[i] = Retry()
			continue
		}
		o, send := e.decide(hctx, m, err)
		if send {
			outs[i] = o
		}
		if o.Status == StatusFailed || o.Status == StatusRetry {
			skip = append(skip, m)
		}
	}
	e.hooks.handlerEnd(hctx, turn, err, outs, false)
	reported = true
	e.donec <- result{pt: w.pt, called: true, outs: outs, end: true}
}

// handled is the owner's part of a worker's report: the part's place, the
// outcome's ack, a retry or a give-back, and what the part does next.
func (l *loop) handled(r result) {
	pt, p := r.pt, r.pt.p
	if r.called {
		if pt.whole {
			p.calls += len(pt.msgs)
		} else {
			p.calls++
		}
	}
	if r.end {
		l.running = deleteOne(l.running, pt)
		l.setState(pt, partIdle)
	}
	if r.goexit {
		l.workers--
		l.log.Error("queen: consume handler ended its goroutine (runtime.Goexit); the loop stops",
			"queue", l.cfg.queue, "group", l.cfg.group)
		l.stop(errHandlerGoexit)
	}
	switch {
	case p.lost || r.lost:
		if r.end {
			l.drop(pt)
		}
		return
	case r.goexit:
		l.giveBack(pt, r.i, nil) // the message it ran, and the rest
		return
	case pt.whole:
		if r.called {
			l.wholeDone(pt, r)
		} else if r.end {
			l.giveBack(pt, 0, nil)
		}
		return
	}
	if r.called {
		pt.next = r.i + 1
		l.outcome(pt, r)
		l.linger(pt, r)
	} else {
		pt.next = r.i
	}
	if r.end {
		l.afterRun(pt)
	}
}

// afterRun goes on with an Each part whose worker is done with it, unless
// it waits (a retry, the queue's settings) or is resolved: given back
// after a stop, handed on from its next message (after a dead letter: the
// partition goes on), or resolved when every message was handled.
func (l *loop) afterRun(pt *part) {
	if pt.state != partIdle || pt.resolved {
		return
	}
	switch {
	case l.phase != running:
		l.giveBackAtStop(pt)
	case pt.next < len(pt.msgs):
		l.requeue(pt)
	default:
		pt.resolved = true
		l.check(pt)
	}
}

// outcome turns a message's outcome into its ack (consume_settle.go), a
// retry in place or a give-back of the rest of its partition
// (consume_failures.go).
func (l *loop) outcome(pt *part, r result) {
	m := pt.msgs[r.i]
	if !r.send { // AutoAck(false), success: the handler acked it
		l.failures.done(m)
		l.resolvedMsg(pt)
		return
	}
	o := r.o
	switch o.Status {
	case StatusCompleted:
		l.failures.done(m)
		l.resolvedMsg(pt)
		l.addAck(pt, ackItem{s: Settlement{Message: m, Status: StatusCompleted}, chosen: StatusCompleted})
	case StatusDLQ:
		l.failures.done(m)
		l.resolvedMsg(pt)
		l.addAck(pt, ackItem{s: Settlement{Message: m, Status: StatusDLQ, Error: o.Error}, chosen: StatusDLQ})
		if l.cfg.ackOff {
			l.giveBack(pt, r.i+1, nil)
		}
	case StatusRetry:
		l.resolvedMsg(pt)
		l.giveBack(pt, r.i+1, &ackItem{s: Settlement{Message: m, Status: StatusRetry, Error: o.Error}, chosen: StatusRetry})
	default: // StatusFailed
		l.failure(pt, r)
	}
}

// Causes of a handler ctx's cancellation.
var (
	errConsumeStopped = errors.New("queen: consume loop stopped and its grace period ended")
	errLeaseLostCause = fmt.Errorf("%w: renewal refused while the handler ran", ErrLeaseLost)
	errHandlerGoexit  = errors.New("queen: consume handler ended its goroutine (runtime.Goexit)")
)

func leaseLost(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), errLeaseLostCause)
}

// stoppedBy says whether a handler's error comes from the loop's stop: its
// ctx was cancelled at the end of the grace period, or, once the loop is
// stopping, the error is a context cancellation (of a ctx of the handler's
// own, such as the signal ctx of a worker). Such a message is given back
// with a retry ack: a stop spends no retry and dead-letters nothing.
func (e *engine) stoppedBy(ctx context.Context, err error) bool {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), errConsumeStopped) {
		return true
	}
	return e.stopping() && errors.Is(err, context.Canceled)
}

// decide turns a handler's result into the message's outcome; send is false
// when the loop leaves the ack to the handler (AutoAck(false), success).
func (e *engine) decide(ctx context.Context, m *Message, err error) (o Outcome, send bool) {
	if err == nil {
		if f := e.on.onSuccess; f != nil {
			return e.checked(e.callback(func() Outcome { return f(ctx, m) }, m), Complete()), true
		}
		if e.cfg.ackOff {
			return Outcome{}, false
		}
		return Complete(), true
	}
	if e.stoppedBy(ctx, err) {
		return Retry(), true
	}
	if f := e.on.onError; f != nil {
		return e.checked(e.callback(func() Outcome { return f(ctx, m, err) }, m), failure(err)), true
	}
	return failure(err), true // Poison: DLQ
}

// checked replaces the zero Outcome by def and an unknown status by a
// failure, so that one bad callback answer cannot sink an ack.
func (e *engine) checked(o, def Outcome) Outcome {
	if o.Status == "" {
		return def
	}
	if !o.Status.valid() {
		e.log.Error("queen: outcome callback returned an unknown status; acking failed", "status", string(o.Status))
		return Outcome{Status: StatusFailed, Error: fmt.Sprintf("unknown outcome status %q", o.Status)}
	}
	return o
}

// callback runs an outcome callback, turning a panic into a failure.
func (e *engine) callback(f func() Outcome, m *Message) (o Outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = Fail(e.panicked(v, m, "outcome callback"))
		}
	}()
	return f()
}

func (e *engine) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = e.panicked(v, m, "handler")
		}
	}()
	return e.on.handle(ctx, m)
}

func (e *engine) callBatch(ctx context.Context, msgs []*Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = e.panicked(v, msgs[0], "batch handler")
		}
	}()
	return e.on.handleBatch(ctx, msgs)
}

// panicked logs a recovered panic at Error with its stack and returns it as
// an error naming the message.
func (e *engine) panicked(v any, m *Message, what string) error {
	e.log.Error("queen: consume "+what+" panicked; the message is nacked",
		"queue", m.Queue, "group", e.cfg.group, "partition", m.Partition, "transactionId", m.TransactionID,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return fmt.Errorf("%w (queue %s, partition %s, transaction %s): %v", ErrHandlerPanic, m.Queue, m.Partition, m.TransactionID, v)
}
