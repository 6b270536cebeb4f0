package queen

import (
	"context"
	"errors"
	"time"
)

// DefaultGracePeriod is how long, after a stop, the handlers already running
// may go on before their context is cancelled (see ConsumeBuilder.GracePeriod).
const DefaultGracePeriod = 10 * time.Second

// The public face of the consume loop: ConsumeBuilder, its options and
// Execute. The engine's parts are the other consume_*.go files
// (consume_engine.go tells who owns what); docs/CONSUME.md states what the
// loop promises in full.

// ErrHandlerPanic is matched by the error of a consume handler or
// callback that panicked: the panic is recovered and logged, and the
// message is treated as failed. The text names the message.
var ErrHandlerPanic = errors.New("queen: consume handler panicked")

// LoopError is a failure of a consume loop's own requests, or a lost
// lease, as OnLoopError gets it. Err is the failure itself: errors.As and
// errors.Is see through the LoopError.
type LoopError struct {
	// Op is the loop's step that failed: LoopOpPop, LoopOpSettle,
	// LoopOpRenew or LoopOpLease.
	Op string
	// LeaseID names the pop's lease of a renewal or a lost lease, and of
	// an ack request whose messages are all of one pop (an ack request
	// carries what completed meanwhile, of any pop: empty then); empty
	// for a pop.
	LeaseID string
	// Messages is how many messages the failed step concerned: an ack
	// request's, a renewed pop's (0 for a pop).
	Messages int
	// Err is the failure.
	Err error
}

// The steps a LoopError names.
const (
	// LoopOpPop: a pop failed; the loop backs off and pops again, or,
	// after a refusal for good, Execute returns it.
	LoopOpPop = "pop"
	// LoopOpSettle: an attempt of an ack request failed; after a
	// transient failure its acks are sent again after a backoff, with
	// what completed meanwhile: while the loop runs until they go, after
	// a stop until 15 s past the grace period (then their messages come
	// back when their lease runs out).
	LoopOpSettle = "settle"
	// LoopOpRenew: a lease renewal failed on the way; it is tried again at
	// the next tick, and the handlers go on.
	LoopOpRenew = "renew"
	// LoopOpLease: the broker reports the lease lost; its handlers' ctx is
	// cancelled and their outcomes are not acked. Err matches ErrLeaseLost.
	LoopOpLease = "lease"
)

// Error names the step and the failure.
func (e *LoopError) Error() string {
	s := "queen: consume " + e.Op
	if e.LeaseID != "" {
		s += " (lease " + e.LeaseID + ")"
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the failure.
func (e *LoopError) Unwrap() error { return e.Err }

// Outcome is what happens to a message after its handler ran: an ack
// status, with an error text for failed and dead-lettered messages. Build
// it with Complete, Fail, Retry or DLQ; the zero Outcome is the loop's
// own choice.
type Outcome struct {
	// Status is the ack status sent to the broker.
	Status AckStatus
	// Error is the reason stored with a failed or dead-lettered message.
	Error string
}

// Complete is the outcome of a message that is done: the group's cursor
// moves past it.
func Complete() Outcome { return Outcome{Status: StatusCompleted} }

// Fail is the outcome of a message to try again. A consume loop retries
// it where it failed: the handler gets it again after the queue's
// retryDelay (its partition kept, nothing after it handled meanwhile),
// up to the queue's RetryLimit for that message alone, then dead-letters
// it with err's text (docs/RETRIES.md). Sent with Settle or SettleBatch,
// it comes back with the rest of its partition, and the broker counts
// per partition.
func Fail(err error) Outcome { return Outcome{Status: StatusFailed, Error: errText(err)} }

// Retry is the outcome of a message given back at once without spending a
// retry: it is delivered again, first of its partition.
func Retry() Outcome { return Outcome{Status: StatusRetry} }

// DLQ is the outcome of a message that can never succeed: it goes to
// the dead-letter queue at once, with err's text as the reason, whatever
// retries are left.
func DLQ(err error) Outcome { return Outcome{Status: StatusDLQ, Error: errText(err)} }

// Poison marks err as one that retrying cannot fix: a consume handler that
// returns it, wrapped or not, has its message dead-lettered at once with
// err's text, spending no retry. The result wraps err; Poison(nil) is nil.
//
//	o, err := queen.Decode[Order](msg)
//	if err != nil {
//		return queen.Poison(err)
//	}
//
// OnError, when set, still decides (a zero Outcome then means DLQ). A
// batch handler's poison dead-letters its whole batch; a message given
// back by a stop is not dead-lettered. docs/CONSUME.md has the details.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &PoisonError{Err: err}
}

// PoisonError is the error Poison returns: Err, marked for the dead-letter
// queue.
type PoisonError struct{ Err error }

// Error returns Err's text.
func (e *PoisonError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *PoisonError) Unwrap() error { return e.Err }

// failure is the loop's own outcome for a handler's error: DLQ for a
// Poison error, else Fail.
func failure(err error) Outcome {
	if _, ok := errors.AsType[*PoisonError](err); ok {
		return DLQ(err)
	}
	return Fail(err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ConsumeBuilder is a consume loop ready to run: the options of the
// QueueBuilder it came from, the handler and the callbacks. Make it with
// QueueBuilder.Consume or ConsumeBatch; run it with Execute. It is a value
// like QueueBuilder: every setter returns a changed copy and leaves cb
// unchanged.
type ConsumeBuilder struct {
	qb          QueueBuilder
	ctx         context.Context
	handle      func(ctx context.Context, msg *Message) error
	handleBatch func(ctx context.Context, msgs []*Message) error
	onSuccess   func(ctx context.Context, msg *Message) Outcome
	onError     func(ctx context.Context, msg *Message, err error) Outcome
	onLoopError func(ctx context.Context, err error)
	grace       time.Duration
}

// Consume prepares a loop that calls h once per message, in partition
// order, one message of a partition at a time. nil acks the message
// completed, as soon as the loop's one ack sender is free (what completes
// meanwhile goes in the next ack). An error retries the message where it
// failed, after the queue's RetryDelay, up to RetryLimit, then
// dead-letters it (see OnError; msg.Attempt() counts the calls; a Poison
// error dead-letters it at once); the rest of its partition waits. Either
// ctx ending stops the loop: ctx gives its values to h's ctx, which is
// cancelled when the grace period after a stop ends or its lease is lost.
// The QueueBuilder's options are copied now. Details: docs/CONSUME.md.
func (b *QueueBuilder) Consume(ctx context.Context, h func(ctx context.Context, msg *Message) error) *ConsumeBuilder {
	return &ConsumeBuilder{qb: *b, ctx: ctx, handle: h, grace: DefaultGracePeriod}
}

// ConsumeBatch prepares a loop that calls h once per pop with the whole
// batch. nil acks every message completed; an error fails each
// partition's first message of the batch (one failure of it against
// RetryLimit, dlq past it) and gives the batch back after the queue's
// RetryDelay, to be delivered again (a Poison error dead-letters the
// whole batch). With Each(), h gets one message at a time, as under
// Consume, retries in place included.
func (b *QueueBuilder) ConsumeBatch(ctx context.Context, h func(ctx context.Context, msgs []*Message) error) *ConsumeBuilder {
	return &ConsumeBuilder{qb: *b, ctx: ctx, handleBatch: h, grace: DefaultGracePeriod}
}

// OnSuccess makes f choose the outcome of each message whose handler
// returned nil (AutoAck(false) included) instead of Complete.
func (cb *ConsumeBuilder) OnSuccess(f func(ctx context.Context, msg *Message) Outcome) *ConsumeBuilder {
	cp := *cb
	cp.onSuccess = f
	return &cp
}

// OnError makes f choose the outcome of each message whose handler
// returned an error or panicked, instead of Fail (DLQ for a Poison error,
// which is also what a zero Outcome from f means then): DLQ, say, for an
// error that retrying cannot fix. After Fail the message is retried in
// place (the rest of its partition waits); after Retry it and the rest of
// its partition in the pop are given back. A message stopped by the
// loop's stop is given back with Retry without calling f.
//
// The loop counts each message's failures itself against the queue's
// RetryLimit: it calls the handler again after the queue's retryDelay
// while the message has failures left, and dead-letters it at the one
// past them; docs/RETRIES.md says how, and where that promise ends.
func (cb *ConsumeBuilder) OnError(f func(ctx context.Context, msg *Message, err error) Outcome) *ConsumeBuilder {
	cp := *cb
	cp.onError = f
	return &cp
}

// OnLoopError hands f each failed attempt of the loop's pops, acks and
// renewals, and each lost lease, as a *LoopError. f runs on the loop's
// goroutines (its fetchers, and a goroutine per request of its sender),
// so it may be called from several goroutines at once: it must be safe
// for concurrent use. It gets the values of Execute's ctx; keep it short.
// The loop logs the same failures; a panic in f is recovered and logged;
// an f that ends its goroutine (runtime.Goexit, as t.FailNow does) stops
// the loop with an error.
func (cb *ConsumeBuilder) OnLoopError(f func(ctx context.Context, err error)) *ConsumeBuilder {
	cp := *cb
	cp.onLoopError = f
	return &cp
}

// GracePeriod sets how long the handlers running at a stop may go on
// before their ctx is cancelled (default DefaultGracePeriod; 0: at once).
// Their outcomes are acked either way; an error caused by that
// cancellation gives the message back with retry.
func (cb *ConsumeBuilder) GracePeriod(d time.Duration) *ConsumeBuilder {
	cp := *cb
	cp.grace = d
	return &cp
}

// Execute runs the loop until a ctx ends, Limit messages were handled or
// IdleMillis passed with nothing in hand (it returns nil), or the broker
// refuses a pop for good or a handler ends its goroutine (it returns that
// error). Transient failures are retried with a backoff and reported to
// OnLoopError. At the stop, running handlers get the grace period and
// every message popped and not handled is given back; when Execute
// returns, no goroutine of it is left. Invalid options fail before any
// request, matching ErrInvalidArgument. Details: docs/CONSUME.md.
func (cb *ConsumeBuilder) Execute(ctx context.Context) error {
	e, err := cb.newEngine(ctx)
	if err != nil {
		return err
	}
	return e.run()
}
