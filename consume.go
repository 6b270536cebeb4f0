package queen

import (
	"context"
	"errors"
	"time"
)

// DefaultGracePeriod is how long, after a stop, the handlers already running
// may go on before their context is cancelled (see ConsumeBuilder.GracePeriod).
const DefaultGracePeriod = 10 * time.Second

// The consume loop's engine is a few parts, one file each, in the order a
// message meets them (docs/ARCHITECTURE.md, "The consume loop", draws them):
//
//   - consume_broker.go: the narrow interface the engine talks to, and the
//     real one over the Client;
//   - consume_fetch.go: the fetcher, pops for free handlers, within the
//     Limit, paced;
//   - consume_dispatch.go: the scheduler, hands messages to handlers, one
//     partition at a time, in order;
//   - consume_handle.go: the handler calls, and each message's outcome;
//   - consume_lease.go: the lease keeper, renews what is in flight;
//   - consume_settle.go: the settler, one batch ack per pop;
//   - consume_failures.go: the failure count, each message's failures
//     against the queue's RetryLimit (the statuses the settler sends);
//   - consume_stop.go: the lifecycle, the states of a loop and its one
//     stop path;
//   - consume_engine.go: the engine of one Execute, which composes them.
//
// This file is the public face: ConsumeBuilder, its options and Execute.

// ErrHandlerPanic is matched (errors.Is) by the error a consume loop reports
// for a handler that panicked: the panic is recovered, logged at Error with
// its stack, and the message is treated as failed. The error's text names
// the message's queue, partition and transaction id, and the panic value.
var ErrHandlerPanic = errors.New("queen: consume handler panicked")

// LoopError is what a consume loop hands its OnLoopError hook: a failure of
// the loop's own requests, or a lost lease. Op says which; Err is the
// failure itself, so that errors.As finds a *BrokerError (or *AckError)
// and errors.Is matches ErrLeaseLost, ErrOutcomeUnknown, a context error,
// ... through the LoopError.
type LoopError struct {
	// Op is the loop's step that failed: LoopOpPop, LoopOpSettle,
	// LoopOpRenew or LoopOpLease.
	Op string
	// LeaseID names the pop's lease (settle, renew, lease); empty for a pop.
	LeaseID string
	// Messages is how many messages the failed step concerned (0 for a pop).
	Messages int
	// Err is the failure.
	Err error
}

// The steps a LoopError names.
const (
	// LoopOpPop: a pop failed; the loop backs off and pops again (or,
	// after a refusal that asking again cannot change, Execute returns it).
	LoopOpPop = "pop"
	// LoopOpSettle: an attempt of a pop's batch ack failed; after a
	// transient failure it is sent again, for up to 15 s in all (then its
	// messages come back when their lease runs out).
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

// Outcome is what happens to a message after its handler ran: one of the
// four ack statuses, with an error text for failed and dead-lettered
// messages (a consume loop sends a failure as retry or dlq, see
// ConsumeBuilder.OnError). Build it with Complete, Fail, Retry or DLQ. The zero
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

// Fail is the outcome of a message to try again: the message (with what
// follows it in its partition) comes back after the queue's retryDelay,
// and err's text is kept as the reason. In a consume loop it counts as one
// failure of that message alone: the failure that passes the queue's
// RetryLimit dead-letters it (see ConsumeBuilder.OnError for how the loop
// counts, and where that ends). Sent with Client.Settle or SettleBatch
// (StatusFailed), the broker counts instead, per partition (see
// QueueConfig.RetryLimit).
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
	onLoopError func(ctx context.Context, err error)
	grace       time.Duration
}

// Consume prepares a loop that pops messages and calls h once per message
// (Each() is implied), in partition order, never two messages of one
// partition at once. When h returns nil the message is acked completed;
// when it returns an error it is acked failed with the error's text, and
// the messages after it in its partition (in that pop) are given back with
// retry, to come again after it. Every message of one pop is settled in
// one batch ack. A failure is counted for its message alone, against the
// queue's RetryLimit (see OnError). With AutoAck(false) h acks each message
// itself; the loop then acks nothing after a nil, and still nacks after an
// error (counted as above), so that the partition is not stuck until the
// lease runs out. A panic in
// h is recovered, logged at Error with its stack and treated as an error
// matching ErrHandlerPanic. See Execute for when the loop stops and what
// it gives back, and OnLoopError for the loop's own failures.
//
// The loop has two contexts, and either one ending stops it: ctx gives its
// values to the handlers' ctx, and Execute's ctx gives its values to the
// loop's own requests (pops, acks, renewals) and to OnLoopError, while
// neither's cancellation reaches a running handler or an ack (see
// Execute). The ctx passed to h is cancelled when the grace period after
// a stop runs out, or when the lease of the message is lost.
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
// batch is failed with the error's text (one failure of that message
// against RetryLimit, see OnError), and the rest of the partition is given
// back with retry in the same ack, uncharged (it comes again after the
// failed one). With Each() set, h is called once per message with a
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
// error (or panicked) to f: the loop acks what f returns instead of Fail,
// for example DLQ for an error that retrying cannot fix. Per message, after
// Fail or Retry the rest of that partition in the pop is not handled: it is
// given back with retry in the same ack, and comes again after the message;
// after Complete or DLQ it goes on. Under ConsumeBatch without Each(), f is
// called for each message of the failed batch, in order, until it returns
// Fail or Retry for a message: the rest of that partition is then given
// back without a call. A handler stopped by the stop
// (its error returned after its ctx was cancelled at the end of the grace
// period, or an error matching context.Canceled returned once the loop is
// stopping) is given back with Retry without calling f.
//
// RetryLimit, per message. The loop keeps the promise of
// QueueConfig.RetryLimit for each message: a message is dead-lettered
// when it has itself failed RetryLimit + 1 times (Fail, or an error with
// no OnError), never because others of its partition failed. The broker
// counts failed acks per partition, so the loop sends none: it reads the
// queue's retryLimit, retryDelay, leaseTime and dead-letter flag once per
// Execute, counts each message's failures in memory (by partition and
// transaction id), sends retry (charged nothing) while the message has
// failures left, after holding its pop for retryDelay (a retry comes back
// at once; the pop's other partitions are acked meanwhile, in one request
// more; the hold keeps the lease, renewed under RenewLease, else at most
// half the lease time after the pop, and ends at once on a stop, its ack
// then sent with the stop's; it occupies no handler, so other partitions
// are handled meanwhile, but the held pop counts against what the loop
// holds until its ack, at most 2×Concurrency pops in all), and sends
// dlq with the error's text at the failure that passes the limit. Where the
// promise ends:
//   - the counts live in one Execute: after a restart, or in another
//     process of the group that takes the message next, it starts again
//     from zero (never dead-lettered early, but perhaps delivered more
//     often);
//   - a handler that kills the process sends no ack: the lease runs out,
//     which counts nothing, so such a message is never dead-lettered (a
//     panic is recovered and counts as a failure);
//   - the dead-letter row has the error's text, and the broker's own
//     count for the partition and group as retryCount: 0 unless failed
//     acks were sent there (by the fallback below, an AutoAck(false)
//     handler, or another client);
//   - a lease lost while a failed partition is held for retryDelay (only
//     a renewal can tell) sends nothing for that partition: its messages
//     come again, those handled before the failure included;
//   - on a 2.x queue whose dead-letter queue is off, the failure past the
//     limit is sent failed: the broker drops the message once its own
//     count is spent, and until then it comes back (and is sent failed
//     again);
//   - when the queue's settings cannot be read (at the start, and once
//     more at the first failure), failures are sent failed and the broker
//     counts them, per partition; a Warn says so, once;
//   - under ConsumeBatch, a failed batch charges each partition's first
//     message of the batch (the rest go back uncharged);
//   - an AutoAck(false) handler that acks failed itself
//     (Client.Ack(ctx, msg, false, ...)) gets the broker's count: to get
//     the loop's, return the error instead (the loop nacks it, counted);
//   - Pop users get the broker's count with StatusFailed; for the loop's,
//     count per message and settle StatusRetry below the limit and
//     StatusDLQ at it (docs/RETRIES.md).
//
// SettleHook's SettledMessage gives both: the outcome chosen (failed) and
// the status sent (retry or dlq).
func (cb *ConsumeBuilder) OnError(f func(ctx context.Context, msg *Message, err error) Outcome) *ConsumeBuilder {
	cb.onError = f
	return cb
}

// OnLoopError hands f every failure of the loop's own work, as a
// *LoopError: a pop that failed (network, 5xx, a refusal), a batch ack that
// failed or was partly refused, a renewal that failed on the way, and a
// lease the broker reports lost. f runs on the loop's goroutines, with the
// values of the ctx given to Execute; keep it short (count, export health).
// The loop logs the same failures (pops: a Warn at the first failure,
// then at most one line per backoff step or per 30 s, and a Warn when pops
// succeed again: the end of an outage at the level of its start); a panic
// in f is recovered and logged.
func (cb *ConsumeBuilder) OnLoopError(f func(ctx context.Context, err error)) *ConsumeBuilder {
	cb.onLoopError = f
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
// Transient failures (network errors, 5xx, 408, 429) are retried, each pop
// one attempt, with a backoff (50 ms doubling to 200 ms, or the client's
// RetryPolicy bounds when lower; a longer Retry-After is honoured), so that
// a loop resumes within about 0.2 s of its broker's restart, however long
// the outage; they are logged (a Warn at the first failure, then
// at most one line per backoff step or per 30 s, a Warn on recovery) and
// handed to OnLoopError. By default each pop long polls (wait=true, 30 s)
// when the loop holds no other pop. With Concurrency above 1, a pop sent
// while the loop holds others does not wait: the partitions it finds leased
// may be the loop's own, free again at its next ack, which a broker's long
// poll would notice only at its next re-check (0.15.1: 100 ms to 1 s). After
// such a pop comes back empty, the loop sends one pop per ack of its own
// (not one per idle handler), and long-polls if no ack comes within the
// usual pause after an empty answer.
//
// Of the loop's two contexts, either one ending stops it; ctx (Execute's)
// gives its values to the loop's own requests (pops, acks, renewals) and to
// OnLoopError, the ctx given to Consume gives its values to the handlers'
// ctx, and neither's cancellation reaches a running handler (it gets the
// grace period) or an ack (sent on a context of its own).
//
// Under a Limit each pop asks for at most what is left of it, and the
// remainder is asked for by one pop, not split between the handlers: a
// second pop goes only for what the first did not get.
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
	e, err := cb.newEngine(ctx)
	if err != nil {
		return err
	}
	return e.run()
}
