package queen

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
)

// The handler calls: a group's messages through the user's handler, one
// call per message (Consume, Each()) or one for the whole pop
// (ConsumeBatch), each message's outcome decided (the OnSuccess and
// OnError callbacks, a stop, a lost lease), a panic recovered. What a
// group records (group.acks, group.next) is what the settler sends.

// runGroup handles g on slot s and hands it to the settler (groupDone),
// which settles its pop when g was the pop's last group. s holds g while
// the handler runs: should it end the goroutine, slotEnded hands g on.
func (e *engine) runGroup(g *group, s *slot) {
	s.g = g
	if e.cfg.each {
		e.handleEach(g)
	} else {
		e.handleWhole(g)
	}
	s.g = nil
	e.groupDone(g)
}

// handleEach calls the handler once per message, in order. After a
// failed or retried message (or, under AutoAck(false), a dead-lettered
// one) the rest of the partition is given back; on a stop the messages not
// started are.
func (e *engine) handleEach(g *group) {
	ctx := g.b.ctx
	for i, m := range g.msgs {
		g.next = i
		if leaseLost(ctx) {
			g.lost = true
			return
		}
		if e.stopping() {
			return
		}
		g.handled++
		var err error
		hctx, turn := e.hooks.handlerStart(ctx, e.cfg.queue, e.cfg.group, g.msgs[i:i+1:i+1]) // HandlerHook
		if e.on.handle != nil {
			err = e.call(hctx, m)
		} else {
			err = e.callBatch(hctx, g.msgs[i:i+1:i+1])
		}
		if leaseLost(ctx) {
			e.hooks.handlerEnd(hctx, turn, err, nil, true)
			g.lost = true
			return
		}
		o, send := e.decide(hctx, m, err)
		var outcome [1]Outcome
		if send {
			if g.acks == nil {
				g.acks = make([]Settlement, 0, len(g.msgs)-i) // room for the rest
			}
			g.acks = append(g.acks, Settlement{Message: m, Status: o.Status, Error: o.Error})
			outcome[0] = o
		}
		e.hooks.handlerEnd(hctx, turn, err, outcome[:], false)
		g.next = i + 1
		// Under AutoAck(false) the handler acks the next messages itself,
		// at once: a dead-lettered one (whose ack waits for the pop's batch
		// ack) would be passed over by a 2.x cursor, so it stops the
		// partition too.
		if o.Status == StatusFailed || o.Status == StatusRetry || (o.Status == StatusDLQ && e.cfg.ackOff) {
			return
		}
	}
}

// handleWhole calls the batch handler once with the whole pop. After an
// error each partition's first message is failed and the rest of the
// partition given back (or OnError decides, message by message, until a
// Fail or Retry).
func (e *engine) handleWhole(g *group) {
	ctx := g.b.ctx
	if e.stopping() {
		return
	}
	g.handled = len(g.msgs)
	hctx, turn := e.hooks.handlerStart(ctx, e.cfg.queue, e.cfg.group, g.msgs) // HandlerHook
	err := e.callBatch(hctx, g.msgs)
	if leaseLost(ctx) {
		e.hooks.handlerEnd(hctx, turn, err, nil, true)
		g.lost = true
		return
	}
	var outcomes []Outcome // for the hooks, only when there are some
	if turn.active() {
		outcomes = make([]Outcome, len(g.msgs))
	}
	var skip []*Message // a message of each partition whose rest goes back
	for i, m := range g.msgs {
		given := false
		for _, s := range skip {
			given = given || samePartition(s, m)
		}
		if given {
			g.acks = append(g.acks, Settlement{Message: m, Status: StatusRetry})
			if outcomes != nil {
				outcomes[i] = Retry()
			}
			continue
		}
		o, send := e.decide(hctx, m, err)
		if send {
			if g.acks == nil {
				g.acks = make([]Settlement, 0, len(g.msgs)-i) // room for the rest
			}
			g.acks = append(g.acks, Settlement{Message: m, Status: o.Status, Error: o.Error})
			if outcomes != nil {
				outcomes[i] = o
			}
		}
		if o.Status == StatusFailed || o.Status == StatusRetry {
			skip = append(skip, m)
		}
	}
	e.hooks.handlerEnd(hctx, turn, err, outcomes, false)
	g.next = len(g.msgs)
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
// failure, so that one bad callback answer cannot sink the pop's batch ack.
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
