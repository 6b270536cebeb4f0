package queen

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// The dispatcher: a pop's messages become groups, and each group is
// handled by one worker (consume_loop.go), in order:
//
//   - per message (Consume, or Each()): one group per partition of the
//     pop; the loop starts a group only when no other group of its
//     partition runs, so a partition's messages are handled one at a time
//     and in order; Concurrency(n) groups run at once, on n partitions;
//   - per pop (ConsumeBatch without Each()): one group, the whole pop.
//
// A group records an outcome per message it handled (group.acks, in
// message order) and where it stopped (group.next): the settler gives
// back msgs[next:] with retry.

// batch is one pop's messages, from its answer until its ack.
type batch struct {
	leaseID  string
	msgs     []*Message
	groups   []*group
	reserved int                     // what its pop took from the Limit
	poppedAt time.Time               // when its answer came
	ctx      context.Context         // the handlers' ctx; a lost lease cancels it
	cancel   context.CancelCauseFunc // of ctx
	keeper   *leaseKeeper            // nil without RenewLease
	left     atomic.Int32            // groups not done

	// one is the group of a pop that makes one group (a batch handler's
	// pop, a pop of one partition), kept in the batch to spare allocating
	// it; groups is then oneRef[:].
	one    group
	oneRef [1]*group
}

// group is what one handler goroutine handles: the messages of one
// partition of a pop, or a whole pop.
type group struct {
	b       *batch
	msgs    []*Message
	whole   bool         // a whole pop (batch handler), not one partition
	acks    []Settlement // outcomes, in message order
	next    int          // msgs[next:] have no outcome: given back with retry
	handled int          // messages given to the handler, for the Limit
	lost    bool         // the lease was lost while it was handled
	goexit  bool         // its handler ended the goroutine (runtime.Goexit)
}

// newBatch turns a pop's answer into groups.
func (e *engine) newBatch(res *popResult, reserved int) *batch {
	b := &batch{leaseID: res.leaseID, msgs: res.messages, reserved: reserved, poppedAt: time.Now(), ctx: e.hctx, cancel: func(error) {}}
	if e.cfg.renewEvery > 0 && b.leaseID != "" {
		// Only a renewal can tell that the lease is lost.
		b.ctx, b.cancel = context.WithCancelCause(e.hctx)
	}
	switch msgs := res.messages; {
	case !e.cfg.each || onePartition(msgs):
		b.one = group{b: b, msgs: msgs[:len(msgs):len(msgs)], whole: !e.cfg.each}
		b.oneRef[0] = &b.one
		b.groups = b.oneRef[:]
	default:
		parts := splitPartitions(msgs)
		b.groups = make([]*group, len(parts))
		for i, part := range parts {
			b.groups[i] = &group{b: b, msgs: part}
		}
	}
	b.left.Store(int32(len(b.groups)))
	return b
}

// splitPartitions cuts msgs into partitions, in the order the partitions
// first appear, each partition's messages in their order. (A broker lists
// a pop partition after partition; a partition in several runs is put
// together all the same.) A partition in one run is a slice of msgs
// itself, capped so that nothing appends into msgs.
func splitPartitions(msgs []*Message) [][]*Message {
	var parts [][]*Message
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && samePartition(msgs[end], msgs[start]) {
			end++
		}
		run := msgs[start:end:end]
		i := 0
		for i < len(parts) && !samePartition(parts[i][0], run[0]) {
			i++
		}
		if i == len(parts) {
			parts = append(parts, run)
		} else {
			parts[i] = append(parts[i], run...) // a copy: run is capped
		}
		start = end
	}
	return parts
}

// onePartition reports whether msgs are all of one partition.
func onePartition(msgs []*Message) bool {
	for _, m := range msgs[min(1, len(msgs)):] {
		if !samePartition(m, msgs[0]) {
			return false
		}
	}
	return true
}

func samePartition(a, b *Message) bool {
	return a.PartitionID == b.PartitionID && a.Partition == b.Partition && a.Queue == b.Queue
}

// conflicts says whether g may not start while o runs: one partition.
func (g *group) conflicts(o *group) bool {
	return !g.whole && !o.whole && samePartition(g.msgs[0], o.msgs[0])
}

// groupDone is a group handed back to the loop. settled: it was its pop's
// last, and its worker settled the pop already.
type groupDone struct {
	g       *group
	last    bool
	settled bool
}

// runGroup handles g on its worker and hands it back to the loop. The
// worker that ends a pop's last group settles the pop at once (while the
// loop runs; after a stop, once quiet, see consume_stop.go). Should the
// handler end the goroutine (runtime.Goexit, as t.FailNow does), g goes
// back all the same, marked, with its running message and the rest
// without an outcome (given back), and the worker is gone: the loop stops.
func (e *engine) runGroup(g *group) {
	returned := false
	defer func() {
		g.goexit = !returned
		d := groupDone{g: g, last: g.b.left.Add(-1) == 0}
		if d.last && returned && !e.stopping() {
			e.settle(g.b)
			d.settled = true
		}
		e.finished(d)
	}()
	if e.cfg.each {
		e.handleEach(g)
	} else {
		e.handleWhole(g)
	}
	returned = true
}

// handleEach calls the handler once per message, in order. After a
// failed or retried message the rest of the partition is given back; on a
// stop the messages not started are.
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
		if e.handle != nil {
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
		if o.Status == StatusFailed || o.Status == StatusRetry {
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
		if f := e.onSuccess; f != nil {
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
	if f := e.onError; f != nil {
		return e.checked(e.callback(func() Outcome { return f(ctx, m, err) }, m), Fail(err)), true
	}
	return Fail(err), true
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
	return e.handle(ctx, m)
}

func (e *engine) callBatch(ctx context.Context, msgs []*Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = e.panicked(v, msgs[0], "batch handler")
		}
	}()
	return e.handleBatch(ctx, msgs)
}

// panicked logs a recovered panic at Error with its stack and returns it as
// an error naming the message.
func (e *engine) panicked(v any, m *Message, what string) error {
	e.log.Error("queen: consume "+what+" panicked; the message is nacked",
		"queue", m.Queue, "group", e.cfg.group, "partition", m.Partition, "transactionId", m.TransactionID,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return fmt.Errorf("%w (queue %s, partition %s, transaction %s): %v", ErrHandlerPanic, m.Queue, m.Partition, m.TransactionID, v)
}
