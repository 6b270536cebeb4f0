package queen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/queen-go/queen/internal/transport"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// A Producer pushes messages one at a time and sends them in batches: each
// Push returns at once with a *PendingPush, and the messages of one queue
// and partition form a batch that goes out when it reaches its count or its
// size, or has waited its delay, whichever comes first. At most
// WithMaxInflight push requests are on the wire at once: while more than
// one is free, a partition's batch goes in a request of its own (so that
// the broker serves partitions side by side); the request that takes the
// last free one also carries the batches of every other partition ready
// then (up to the batch count and bytes in all). What is pushed while the
// requests are on the wire joins the next ones.
// Create one with Client.Producer (any queue) or QueueBuilder.Producer (one
// queue), and stop it with Close.
//
//	orders, err := client.Queue("orders").Producer(queen.WithBatchDelay(2 * time.Millisecond))
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer orders.Close(ctx)
//	res, err := orders.Partition(customer).Push(ctx, order).Wait(ctx)
//
// What it promises:
//
//   - Order within a partition. A partition's next batch is sent only once
//     the one before it is settled (answered, or failed for good), and its
//     messages go in push order.
//   - An outage is ridden out. A batch that fails in a way that may pass
//     (no answer, a refused connection, 429, a retryable 5xx: RetryPolicy's
//     rule) is sent again with the client's backoff until its delivery
//     timeout (WithDeliveryTimeout, default a minute from the Push of its
//     oldest message). Meanwhile its partition waits, the buffer fills, and
//     Push waits for room (or fails, WithFailWhenFull).
//   - A batch that fails for good (refused with a 4xx, a message of it not
//     stored, its delivery timeout over; a request that fails as a whole
//     fails every batch in it) fails the messages of its partition
//     buffered behind it, with a *PartitionFailedError (not sent, matching
//     ErrNotSent, wrapping the batch's failure). A later Push to the
//     partition goes out as usual, and the other partitions go on. With
//     WithPauseOnFailure the partition pauses instead: those messages and
//     every later Push to it fail with a *PartitionPausedError until Resume.
//   - Nothing silent. Every message's outcome reaches its PendingPush (and
//     the WithOnResult callback, if set): its PushResult when the broker
//     stored it (Status queued, or duplicate when a message with its
//     transaction id was already there), an error otherwise: matching
//     ErrNotSent when it surely never reached the broker, ErrOutcomeUnknown
//     when it may have been stored. A message the
//     broker answered without storing (2.x "error", 0.15.1 "failed") fails
//     with a *PushError; a 0.15.1 "buffered" answer (kept by the broker to be
//     stored later, not stored yet) fails with an error matching both
//     ErrOutcomeUnknown and *PushError: it is never a success.
//   - No loss and no double store. Each message gets its transaction id when
//     it is pushed (the client makes one unless an Item gives it), before its
//     first send, and keeps it on every resend, so a batch sent again after a
//     lost answer is deduplicated by the broker: what was already stored is
//     answered duplicate. A message whose outcome stays open fails with an
//     error matching ErrOutcomeUnknown; push it again with the same
//     transaction id (an Item). This holds as long as the broker remembers
//     transaction ids: a 0.15.1 broker keeps them as long as it keeps the
//     message (a unique index, no window). A 2.x broker remembers them for
//     the queue's deduplication window (dedupWindowSeconds, default 3600 s):
//     keep it at least the delivery timeout (and longer than any push
//     again of yours). Under 0, or a window shorter than the time between
//     the first send and a resend, a batch whose answer was lost can be
//     stored twice (at least once, not exactly once).
//   - Bounded memory. At most WithBufferLimit messages and bytes are held,
//     buffered or being sent; at the limit a Push waits for room or for its
//     ctx (or fails at once with ErrBufferFull under WithFailWhenFull). The
//     ctx of a Push governs only that wait: once buffered, a message is sent
//     whatever becomes of the ctx.
//   - PushHook (WithHooks) is called once per batch, with that batch's
//     partition, count and results (a request that carried several batches
//     reports each), so hooks that trace pushes (queenotel) see one span per
//     batch.
//
// A Producer is safe for concurrent use. Queue and Partition return views
// that share it: its buffer, limits, Flush and Close. Close the producer
// before its client: a batch sent after Client.Close fails with ErrClosed.
type Producer struct {
	e         *producer
	queue     string
	partition string
}

// ProducerOption configures a Producer.
type ProducerOption func(*producerConfig)

type producerConfig struct {
	count     int
	bytes     int
	delay     time.Duration
	maxMsgs   int
	maxBytes  int
	failFast  bool
	inflight  int
	onResult  func(PushResult, error)
	deliver   time.Duration // WithDeliveryTimeout
	pause     bool          // WithPauseOnFailure
	countSet  bool
	bytesSet  bool
	limitsSet bool
}

// Defaults of the producer options.
const (
	// DefaultBatchCount is the most messages of one batch (WithBatchCount).
	DefaultBatchCount = 100
	// DefaultBatchBytes is the most bytes of one batch (WithBatchBytes).
	DefaultBatchBytes = 1 << 20
	// DefaultBufferMessages and DefaultBufferBytes bound what a Producer
	// holds (WithBufferLimit).
	DefaultBufferMessages = 10000
	DefaultBufferBytes    = 64 << 20
	// DefaultMaxInflight is how many push requests may be on the wire at
	// once (WithMaxInflight).
	DefaultMaxInflight = 4
	// DefaultDeliveryTimeout is how long a batch is sent again after a
	// failure that may pass (WithDeliveryTimeout).
	DefaultDeliveryTimeout = time.Minute
)

// WithBatchCount sets the most messages in one batch (default
// DefaultBatchCount, at most MaxBatch): a batch that reaches it goes out
// without waiting for its delay.
func WithBatchCount(n int) ProducerOption {
	return func(c *producerConfig) { c.count, c.countSet = n, true }
}

// WithBatchBytes sets the most bytes of messages in one batch (default
// DefaultBatchBytes), counted as their encoded payloads and ids: a batch
// that reaches it goes out without waiting for its delay. A message larger
// than that goes alone.
func WithBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.bytes, c.bytesSet = n, true }
}

// WithBatchDelay sets how long a batch may wait for more messages once its
// partition is free to send (default 0). With 0 a batch goes as soon as its
// partition has no batch on the wire, so batches form from the messages
// pushed while the partition's previous batch is being sent: a lone message
// goes at once, a busy partition sends big batches. A delay trades that
// latency for fewer, bigger requests at moderate rates: a lone message then
// goes after the delay. The delay counts from the partition's oldest
// buffered message, or from the settling of its previous batch when that is
// later, so that callers who wait for their result have the delay to push
// again and join the next batch.
func WithBatchDelay(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.delay = d }
}

// WithBufferLimit bounds what the producer holds, buffered or being sent:
// at most messages messages and bytes bytes (defaults DefaultBufferMessages
// and DefaultBufferBytes). A message larger than bytes is refused with
// ErrMessageTooLarge.
func WithBufferLimit(messages, bytes int) ProducerOption {
	return func(c *producerConfig) { c.maxMsgs, c.maxBytes, c.limitsSet = messages, bytes, true }
}

// WithFailWhenFull makes a Push that finds the buffer full fail at once with
// ErrBufferFull, instead of waiting for room.
func WithFailWhenFull() ProducerOption {
	return func(c *producerConfig) { c.failFast = true }
}

// WithMaxInflight sets how many push requests may be on the wire at once
// (default DefaultMaxInflight). A partition has at most one batch on the
// wire whatever the setting, so more than one request at once needs more
// than one partition; the last free request carries the ready batches of
// several partitions.
func WithMaxInflight(n int) ProducerOption {
	return func(c *producerConfig) { c.inflight = n }
}

// WithDeliveryTimeout bounds how long a message may wait for its outcome,
// counted from its Push (default DefaultDeliveryTimeout): its batch is sent
// again after each failure that may pass (no answer, a refused connection,
// 429, and the 5xx that RetryPolicy retries) while the next send can start
// within that time of the batch's oldest message. Each send is one
// attempt; the waits between them are the client's backoff (RetryPolicy's
// MinBackoff and MaxBackoff, Retry-After honoured), and MaxAttempts does
// not apply. So an outcome comes within the timeout and one attempt
// (WithRequestTimeout). When no send may start, the batch fails with an error
// matching ErrDeliveryTimeout and the last failure's (ErrNotSent when no
// send may have reached the broker, else ErrOutcomeUnknown or the
// *BrokerError). On a 2.x broker a resend is deduplicated only within the
// queue's dedupWindowSeconds: keep it at least this timeout (see Producer).
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.deliver = d }
}

// WithPauseOnFailure makes a batch that fails for good pause its
// partition until Resume: the messages buffered behind it and every later
// Push to that partition fail with a *PartitionPausedError. Without it,
// only the messages buffered behind the batch fail (*PartitionFailedError)
// and a later Push goes out as usual.
func WithPauseOnFailure() ProducerOption {
	return func(c *producerConfig) { c.pause = true }
}

// WithOnResult sets a function called once with the outcome of every
// message, the same as its PendingPush gives: for fire-and-forget callers
// that do not keep the PendingPush. It is called on the producer's
// goroutine that settled the batch, in push order within a partition (for a
// message refused at once, on the goroutine of Push, before Push returns);
// it must be safe for concurrent use and not block for long, as the
// partition's next batch is not sent before the callbacks of its previous
// one have returned. A callback may call Push; a Push there that waits for
// room waits for the other partitions' batches only (the callback's own
// partition is held), so use WithFailWhenFull or a ctx that ends.
func WithOnResult(f func(PushResult, error)) ProducerOption {
	return func(c *producerConfig) { c.onResult = f }
}

// Errors of a Producer.
var (
	// ErrBufferFull: the producer's buffer is at its limit and
	// WithFailWhenFull is set.
	ErrBufferFull = errors.New("queen: producer buffer is full")
	// ErrPartitionPaused is matched by a *PartitionPausedError.
	ErrPartitionPaused = errors.New("queen: partition paused after a failed batch")
	// ErrDeliveryTimeout: a batch was still failing in a way that may pass
	// when its delivery timeout (WithDeliveryTimeout) ended.
	ErrDeliveryTimeout = errors.New("queen: producer delivery timeout")
	// ErrMessageTooLarge: a message is larger than the producer's buffer
	// byte limit (WithBufferLimit).
	ErrMessageTooLarge = newArgError("message is larger than the producer's buffer limit")
)

// errProducerClosed is what a closed producer answers for a message it
// never sent; it matches ErrClosed and ErrNotSent.
var errProducerClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string { return "queen: producer is closed" }
func (*closedError) Is(target error) bool {
	return target == ErrClosed || target == ErrNotSent
}

// closedSending is the failure of a batch that a Close whose ctx ended
// stopped between two sends: it matches ErrClosed and unwraps to the last
// send's failure (ErrNotSent when that one did not reach the broker).
type closedSending struct{ last error }

func (e *closedSending) Error() string {
	return "queen: producer is closed; last send: " + strings.TrimPrefix(e.last.Error(), "queen: ")
}
func (e *closedSending) Unwrap() error        { return e.last }
func (e *closedSending) Is(target error) bool { return target == ErrClosed }

// PartitionPausedError is the error of a message that was not sent because
// an earlier batch of its partition failed for good, under
// WithPauseOnFailure: the message was not stored. Resume the partition
// (Producer.Resume) to push there again.
type PartitionPausedError struct {
	// Queue and Partition name the paused partition ("Default" for the
	// broker's default one).
	Queue, Partition string
	// Cause is the failure of the batch that paused it.
	Cause error
}

// Error names the partition and the failure that paused it.
func (e *PartitionPausedError) Error() string {
	return fmt.Sprintf("queen: partition %q of queue %q is paused after a failed batch (%v); message not sent",
		e.Partition, e.Queue, e.Cause)
}

// Is matches ErrPartitionPaused and ErrNotSent. The cause is not
// unwrapped: this message itself was never sent.
func (e *PartitionPausedError) Is(target error) bool {
	return target == ErrPartitionPaused || target == ErrNotSent
}

// PartitionFailedError is the error of a message that was buffered behind
// a batch of its partition that failed for good: it was not sent (its
// order was tied to that batch), so it was not stored. It matches
// ErrNotSent, and errors.Is and errors.As reach Cause, the batch's
// failure: that may match ErrOutcomeUnknown, which is about the batch,
// not this message. A later Push to the partition goes out as usual.
type PartitionFailedError struct {
	// Queue and Partition name the partition ("Default" for the broker's
	// default one).
	Queue, Partition string
	// Cause is the failure of the batch ahead.
	Cause error
}

// Error names the partition and the batch's failure.
func (e *PartitionFailedError) Error() string {
	return fmt.Sprintf("queen: message not sent: an earlier batch of partition %q of queue %q failed (%v)",
		e.Partition, e.Queue, e.Cause)
}

// Is matches ErrNotSent.
func (e *PartitionFailedError) Is(target error) bool { return target == ErrNotSent }

// Unwrap returns Cause.
func (e *PartitionFailedError) Unwrap() error { return e.Cause }

// deliveryTimeoutError is the failure of a batch whose delivery timeout
// ended; it matches ErrDeliveryTimeout and unwraps to the last failure.
type deliveryTimeoutError struct {
	timeout  time.Duration
	attempts int
	err      error
}

func (e *deliveryTimeoutError) Error() string {
	return fmt.Sprintf("queen: producer: delivery timeout of %v ended after %d attempts: %v", e.timeout, e.attempts,
		strings.TrimPrefix(e.err.Error(), "queen: "))
}
func (e *deliveryTimeoutError) Unwrap() error        { return e.err }
func (e *deliveryTimeoutError) Is(target error) bool { return target == ErrDeliveryTimeout }

// ProducerError is returned by Producer.Flush and Close when some messages
// were not stored: NotStored counts those surely not stored (refused by the
// broker, failed before their send, paused, or still buffered when the ctx
// ended), Unknown those whose outcome is open (an answer lost or cut, a
// 0.15.1 "buffered" answer). Each message's own error is in its PendingPush.
type ProducerError struct {
	// NotStored counts the messages surely not stored.
	NotStored int
	// Unknown counts the messages that may or may not have been stored.
	Unknown int
	// Err is the ctx's error when the ctx ended first, else the error of
	// the earliest pushed of the messages not stored (by the order their
	// Push calls buffered them, across partitions).
	Err error
}

// Error gives both counts and Err.
func (e *ProducerError) Error() string {
	return fmt.Sprintf("queen: producer: %d messages not stored, %d with outcome unknown: %v", e.NotStored, e.Unknown, e.Err)
}

// Unwrap returns Err.
func (e *ProducerError) Unwrap() error { return e.Err }

// PendingPush is the outcome, to come, of one Producer.Push.
type PendingPush struct {
	done  chan struct{}
	res   PushResult
	err   error
	item  wire.PushItem
	enc   []byte // item encoded as JSON
	size  int
	at    time.Time // when it was buffered
	seq   uint64    // push order among the buffered messages
	state pushState // guarded by the producer's mu
}

type pushState uint8

const (
	stateBuffered pushState = iota
	stateSending
	stateStored
	stateNotStored
	stateUnknown
)

// Done is closed once the message's outcome is known.
func (p *PendingPush) Done() <-chan struct{} { return p.done }

// Wait waits for the message's outcome, or for ctx: its PushResult and nil
// when the broker stored it (queued or duplicate), or the error. On an
// error the result is the broker's answer for the message when it gave one
// (Status PushFailed), else it has only TransactionID and Queue. Index is
// always 0 (one message per Push). When ctx ends first Wait returns
// ctx.Err(); the message is still sent, and Wait may be called again.
func (p *PendingPush) Wait(ctx context.Context) (PushResult, error) {
	select {
	case <-p.done:
		return p.res, p.err
	default:
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return PushResult{}, ctx.Err()
	}
}

// partKey names a partition; "" is normalised to "Default".
type partKey struct{ queue, partition string }

func partKeyOf(queue, partition string) partKey {
	if partition == "" {
		partition = "Default"
	}
	return partKey{queue, partition}
}

// partState is one partition's buffer.
type partState struct {
	key      partKey
	buf      []*PendingPush
	bufBytes int
	sending  []*PendingPush // the batch on the wire
	running  bool           // a worker goroutine serves it
	paused   error          // the cause, while paused
	freed    time.Time      // when its last batch was settled (with a delay)
	kick     chan struct{}  // wakes the worker (cap 1)
}

// producer is the engine behind a Producer and its views.
type producer struct {
	c   *Client
	cfg producerConfig

	ctx    context.Context // the sends'; cancelled by a Close whose ctx ended
	cancel context.CancelFunc
	slots  chan struct{} // WithMaxInflight
	wg     sync.WaitGroup

	mu      sync.Mutex
	parts   map[partKey]*partState
	closed  bool
	flushes int    // Flush or Close calls under way: send without delay
	count   int    // messages held
	seq     uint64 // the last buffered message's PendingPush.seq
	bytes   int    // their bytes
	waiters int
	room    chan struct{} // closed when room frees, while waiters > 0
}

// Producer returns a batching producer for any queue: name the queue of a
// push with Producer.Queue. See Producer for what it promises. Options out
// of range fail with an error matching ErrInvalidOption.
func (c *Client) Producer(opts ...ProducerOption) (*Producer, error) {
	cfg := producerConfig{count: DefaultBatchCount, bytes: DefaultBatchBytes, maxMsgs: DefaultBufferMessages,
		maxBytes: DefaultBufferBytes, inflight: DefaultMaxInflight, deliver: DefaultDeliveryTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.count < 1 || cfg.count > MaxBatch:
		return nil, fmt.Errorf("%w: WithBatchCount(%d) must be 1..%d", ErrInvalidOption, cfg.count, MaxBatch)
	case cfg.bytes < 1:
		return nil, fmt.Errorf("%w: WithBatchBytes(%d) must be positive", ErrInvalidOption, cfg.bytes)
	case cfg.delay < 0:
		return nil, fmt.Errorf("%w: WithBatchDelay(%v) must not be negative", ErrInvalidOption, cfg.delay)
	case cfg.maxMsgs < 1 || cfg.maxBytes < 1:
		return nil, fmt.Errorf("%w: WithBufferLimit(%d, %d) must be positive", ErrInvalidOption, cfg.maxMsgs, cfg.maxBytes)
	case cfg.inflight < 1:
		return nil, fmt.Errorf("%w: WithMaxInflight(%d) must be at least 1", ErrInvalidOption, cfg.inflight)
	case cfg.deliver <= 0:
		return nil, fmt.Errorf("%w: WithDeliveryTimeout(%v) must be positive", ErrInvalidOption, cfg.deliver)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &producer{c: c, cfg: cfg, ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.inflight),
		parts: map[partKey]*partState{}}
	return &Producer{e: e}, nil
}

// Producer returns a batching producer for the builder's queue (and its
// partition, if set): see Client.Producer. A bad queue or partition name
// fails here.
func (b *QueueBuilder) Producer(opts ...ProducerOption) (*Producer, error) {
	if err := b.checkPush(); err != nil {
		return nil, err
	}
	p, err := b.c.Producer(opts...)
	if err != nil {
		return nil, err
	}
	p.queue, p.partition = b.queue, b.partition
	return p, nil
}

// Queue returns a view of the producer that pushes to the queue name (its
// Default partition unless Partition is called). It shares the producer.
func (p *Producer) Queue(name string) *Producer { return &Producer{e: p.e, queue: name} }

// Partition returns a view of the producer that pushes to the partition
// name of its queue. It shares the producer.
func (p *Producer) Partition(name string) *Producer {
	return &Producer{e: p.e, queue: p.queue, partition: name}
}

// Push buffers one message for the view's queue and partition and returns
// at once (or, at the buffer's limit, once there is room or ctx ends). The
// payload is what QueueBuilder.Push takes: any value that encodes to JSON,
// json.RawMessage or []byte holding JSON, or an Item with its own ids. It is
// checked before it is buffered: a bad name, payload or trace id, a message
// larger than the buffer, a closed producer (ErrClosed), a paused partition
// (*PartitionPausedError), a full buffer (ErrBufferFull, with
// WithFailWhenFull) or a ctx that ended while waiting for room give a
// PendingPush that is already done with that error. ctx bounds only that
// wait, never the send.
func (p *Producer) Push(ctx context.Context, payload any) *PendingPush {
	pp := &PendingPush{done: make(chan struct{})}
	e := p.e
	if err := p.check(); err != nil {
		e.refuse(pp, err)
		return pp
	}
	it, err := pushItem(p.queue, p.partition, "", "", payload)
	if err != nil {
		e.refuse(pp, err)
		return pp
	}
	pp.item = it
	pp.res.TransactionID, pp.res.Queue, pp.res.Offset = it.TransactionID, it.Queue, -1
	// Encoded here, on the caller's goroutine, once: a batch's body is
	// then the items side by side, and a resend sends the same bytes.
	if pp.enc, err = json.Marshal(it); err != nil {
		e.refuse(pp, fmt.Errorf("%w: %v", ErrInvalidPayload, err))
		return pp
	}
	pp.size = len(pp.enc)
	if pp.size > e.cfg.maxBytes {
		e.refuse(pp, fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, pp.size, e.cfg.maxBytes))
		return pp
	}
	if err := e.admit(ctx, pp, partKeyOf(p.queue, p.partition)); err != nil {
		e.refuse(pp, err)
	}
	return pp
}

// check checks the view's names.
func (p *Producer) check() error {
	if err := checkName(queueName, p.queue); err != nil {
		return err
	}
	return checkOptionalName(partitionName, p.partition)
}

// Resume ends the pause of the view's partition (see Producer): pushes to
// it are buffered and sent again. It does nothing on a partition that is
// not paused.
func (p *Producer) Resume() {
	e := p.e
	k := partKeyOf(p.queue, p.partition)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ps := e.parts[k]; ps != nil && ps.paused != nil {
		ps.paused = nil
		if !ps.running && len(ps.buf) == 0 {
			delete(e.parts, k)
		}
	}
}

// Flush sends every message buffered when it is called, without waiting
// for batch delays, and waits until each has its outcome or ctx ends. It
// returns nil when all of them were stored, else a *ProducerError that
// counts those not stored and those whose outcome is unknown (a message
// still buffered when ctx ended counts as not stored, one on the wire as
// unknown; both are still sent). While a Flush is under way no batch waits
// for its delay; messages pushed meanwhile are sent but not waited for.
func (p *Producer) Flush(ctx context.Context) error {
	e := p.e
	e.mu.Lock()
	e.flushes++
	snap := e.snapshot()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.flushes--
		e.mu.Unlock()
	}()
	return e.await(ctx, snap)
}

// Close stops the producer: later pushes fail with ErrClosed, and what is
// buffered is sent at once. It waits until every message has its outcome
// and returns nil when all were stored, else a *ProducerError (see Flush).
// When ctx ends first, the sends on the wire are cut (their messages'
// outcome is unknown), a batch waiting to be sent again stops (ErrClosed,
// and ErrNotSent if none of its sends reached the broker), and the
// messages not sent yet fail with ErrClosed and ErrNotSent;
// Close then returns once the producer's goroutines have ended, none of
// which outlives it. Close is safe to call more than once; a later call
// reports on the messages still held then (none, once an earlier Close
// returned).
func (p *Producer) Close(ctx context.Context) error {
	e := p.e
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.flushes++ // never undone: a closed producer sends at once
		if e.room != nil {
			close(e.room)
			e.room = nil
		}
	}
	snap := e.snapshot()
	e.mu.Unlock()
	err := e.await(ctx, snap)
	if ctx.Err() == nil {
		e.wg.Wait()
		e.cancel()
		return err
	}
	// Cut what is on the wire, wait for the goroutines, and count again
	// now that every message has its outcome.
	e.cancel()
	e.wg.Wait()
	err = e.await(context.Background(), snap)
	if pe, ok := errors.AsType[*ProducerError](err); ok {
		pe.Err = ctx.Err()
	}
	return err
}

// snapshot returns the messages held, and wakes every worker so that
// delays are skipped. e.mu is held.
func (e *producer) snapshot() []*PendingPush {
	var out []*PendingPush
	for _, ps := range e.parts {
		out = append(out, ps.sending...)
		out = append(out, ps.buf...)
		if len(ps.buf) > 0 {
			ps.wake()
		}
	}
	return out
}

// await waits for the outcome of snap or for ctx, and counts the failures.
func (e *producer) await(ctx context.Context, snap []*PendingPush) error {
	var ctxErr error
	for _, pp := range snap {
		select {
		case <-pp.done:
			continue
		default:
		}
		if ctxErr != nil {
			continue
		}
		select {
		case <-pp.done:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	var pe ProducerError
	var first *PendingPush // the earliest pushed of the failures
	e.mu.Lock()
	for _, pp := range snap {
		switch pp.state {
		case stateBuffered, stateNotStored:
			pe.NotStored++
		case stateSending, stateUnknown:
			pe.Unknown++
		default:
			continue
		}
		if first == nil || pp.seq < first.seq {
			first = pp
		}
	}
	if first != nil {
		pe.Err = first.err
	}
	e.mu.Unlock()
	if ctxErr != nil {
		pe.Err = ctxErr
	}
	if pe.NotStored+pe.Unknown == 0 && ctxErr == nil {
		return nil
	}
	return &pe
}

// refuse settles a message refused before it was buffered.
func (e *producer) refuse(pp *PendingPush, err error) {
	pp.err, pp.state = err, stateNotStored
	close(pp.done)
	if f := e.cfg.onResult; f != nil {
		f(pp.res, err)
	}
}

// admit waits for room, then buffers pp in its partition.
func (e *producer) admit(ctx context.Context, pp *PendingPush, k partKey) error {
	e.mu.Lock()
	for {
		if e.closed {
			e.mu.Unlock()
			return errProducerClosed
		}
		if ps := e.parts[k]; ps != nil && ps.paused != nil {
			e.mu.Unlock()
			return &PartitionPausedError{Queue: k.queue, Partition: k.partition, Cause: ps.paused}
		}
		if e.count < e.cfg.maxMsgs && e.bytes+pp.size <= e.cfg.maxBytes {
			break
		}
		if e.cfg.failFast {
			e.mu.Unlock()
			return fmt.Errorf("%w: %d messages, %d bytes held", ErrBufferFull, e.count, e.bytes)
		}
		if err := ctx.Err(); err != nil {
			e.mu.Unlock()
			return err
		}
		if e.room == nil {
			e.room = make(chan struct{})
		}
		room := e.room
		e.waiters++
		e.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
		}
		e.mu.Lock()
		e.waiters--
	}
	e.count++
	e.bytes += pp.size
	e.seq++
	pp.seq = e.seq
	ps := e.parts[k]
	if ps == nil {
		ps = &partState{key: k, kick: make(chan struct{}, 1)}
		e.parts[k] = ps
	}
	pp.at = time.Now()
	ps.buf = append(ps.buf, pp)
	ps.bufBytes += pp.size
	if !ps.running {
		ps.running = true
		e.wg.Add(1)
		go e.work(ps)
	} else if len(ps.sending) == 0 && e.ready(ps) {
		ps.wake()
	}
	e.mu.Unlock()
	return nil
}

func (ps *partState) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// ready reports whether ps's buffer should go now. e.mu is held.
func (e *producer) ready(ps *partState) bool {
	return e.cfg.delay == 0 || e.flushes > 0 || len(ps.buf) >= e.cfg.count || ps.bufBytes >= e.cfg.bytes ||
		time.Since(ps.since()) >= e.cfg.delay
}

// since is when ps's delay started: when its oldest buffered message came,
// or when its last batch was settled if that was later (the callers of
// that batch then have the delay to push again and join the next one).
func (ps *partState) since() time.Time {
	if t := ps.buf[0].at; t.After(ps.freed) {
		return t
	}
	return ps.freed
}

// take removes the next batch from ps's buffer: at most n messages and
// size bytes, but at least one message when first is set. e.mu is held.
func (e *producer) take(ps *partState, n, size int, first bool) []*PendingPush {
	k, bytes := 0, 0
	for k < len(ps.buf) && k < n {
		s := ps.buf[k].size
		if (k > 0 || !first) && bytes+s > size {
			break
		}
		bytes += s
		k++
	}
	if k == 0 {
		return nil
	}
	batch := make([]*PendingPush, k)
	copy(batch, ps.buf)
	clear(ps.buf[:k])
	ps.buf = ps.buf[k:]
	if len(ps.buf) == 0 {
		ps.buf = nil
	}
	ps.bufBytes -= bytes
	for _, pp := range batch {
		pp.state = stateSending
	}
	ps.sending = batch
	return batch
}

// segment is one partition's batch in a push request.
type segment struct {
	ps    *partState
	batch []*PendingPush
}

// gather adds to segs (which holds the batch of the partition whose worker
// sends) the batches of other partitions that are ready and have none on
// the wire, while the request stays within the batch count and bytes: one
// request carries the batches of several partitions, each partition still
// having at most one batch on the wire. e.mu is held.
func (e *producer) gather(segs []segment) []segment {
	n, size := 0, 0
	for _, pp := range segs[0].batch {
		n++
		size += pp.size
	}
	for _, q := range e.parts {
		if n >= e.cfg.count || size >= e.cfg.bytes {
			break
		}
		if q == segs[0].ps || len(q.sending) > 0 || len(q.buf) == 0 || q.paused != nil || !e.ready(q) {
			continue
		}
		batch := e.take(q, e.cfg.count-n, e.cfg.bytes-size, false)
		if batch == nil {
			continue
		}
		for _, pp := range batch {
			n++
			size += pp.size
		}
		segs = append(segs, segment{q, batch})
	}
	return segs
}

// work serves one partition: it sends its batches one after the other
// (with ready batches of other partitions in the same request) and ends
// when its buffer is empty and none of its batches is on the wire.
func (e *producer) work(ps *partState) {
	defer e.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		e.mu.Lock()
		if len(ps.sending) > 0 {
			// Another worker's request carries this partition's batch:
			// its finish kicks this worker.
			e.mu.Unlock()
			<-ps.kick
			continue
		}
		if len(ps.buf) == 0 {
			ps.running = false
			if ps.paused == nil {
				delete(e.parts, ps.key)
			}
			e.mu.Unlock()
			return
		}
		if !e.ready(ps) && e.ctx.Err() == nil {
			wait := e.cfg.delay - time.Since(ps.since())
			e.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-ps.kick:
				if !timer.Stop() {
					<-timer.C
				}
			}
			continue
		}
		e.mu.Unlock()
		// Take a slot first and the batches then, so that what comes
		// while the slots are busy joins this request.
		select {
		case e.slots <- struct{}{}:
		case <-e.ctx.Done():
			e.mu.Lock()
			if len(ps.sending) == 0 && len(ps.buf) > 0 {
				e.take(ps, len(ps.buf), int(^uint(0)>>1), true)
				batch := ps.sending
				e.mu.Unlock()
				e.settleAll(ps, batch, outcome{err: errProducerClosed, state: stateNotStored})
			} else {
				e.mu.Unlock()
			}
			continue
		}
		e.mu.Lock()
		if len(ps.sending) > 0 || len(ps.buf) == 0 {
			// Another worker's request took this partition's batch.
			e.mu.Unlock()
			<-e.slots
			continue
		}
		segs := []segment{{ps, e.take(ps, e.cfg.count, e.cfg.bytes, true)}}
		if len(e.slots) == cap(e.slots) {
			// The last free slot: the other ready partitions, which
			// would otherwise wait for a slot, go in this request.
			// While slots are free each partition sends its own, so
			// that the broker serves them side by side.
			segs = e.gather(segs)
		}
		e.mu.Unlock()
		e.send(segs)
		<-e.slots
	}
}

// send sends one push request of the segments' batches and settles their
// messages. Each segment is reported to PushHook as a batch of its own.
func (e *producer) send(segs []segment) {
	if err := e.ctx.Err(); err != nil {
		for _, sg := range segs {
			e.settleAll(sg.ps, sg.batch, outcome{err: errProducerClosed, state: stateNotStored})
		}
		return
	}
	var items []wire.PushItem
	size := len(`{"items":[]}`)
	for _, sg := range segs {
		for _, pp := range sg.batch {
			items = append(items, pp.item)
			size += len(pp.enc) + 1
		}
	}
	body := make([]byte, 0, size)
	body = append(body, `{"items":[`...)
	for i := range segs {
		for j, pp := range segs[i].batch {
			if i > 0 || j > 0 {
				body = append(body, ',')
			}
			body = append(body, pp.enc...)
		}
	}
	body = append(body, "]}"...)
	hooks := e.c.hooks
	start := hooks.now()
	var res []PushResult
	var buffered []bool
	oldest := segs[0].batch[0].at
	for _, sg := range segs[1:] {
		if sg.batch[0].at.Before(oldest) {
			oldest = sg.batch[0].at
		}
	}
	resp, err := e.deliver(body, oldest, pushKey(items[0].Queue, items[0].Partition))
	if err == nil {
		res, buffered, err = decodePushAnswer(resp.status, resp.body, items)
	}
	off := 0
	for _, sg := range segs {
		k := len(sg.batch)
		part := sg.batch[0].item.Partition
		if res == nil {
			hooks.pushed(e.ctx, sg.ps.key.queue, part, k, start, nil, err)
			e.settleAll(sg.ps, sg.batch, classify(err))
			continue
		}
		outs := make([]outcome, k)
		seg := make([]PushResult, k)
		var failed []int
		var cause error
		for i := range k {
			r := res[off+i]
			r.Index = i
			seg[i] = r
			r.Index = 0
			o := outcome{res: r, state: stateStored}
			switch {
			case r.Stored():
			case buffered != nil && buffered[off+i]:
				o.err, o.state = outcomeUnknown(&PushError{Results: []PushResult{r}, Failed: []int{0}}), stateUnknown
			default:
				o.err, o.state = &PushError{Results: []PushResult{r}, Failed: []int{0}}, stateNotStored
			}
			if o.err != nil {
				failed = append(failed, i)
				if cause == nil {
					cause = o.err
				}
			}
			outs[i] = o
		}
		var segErr error
		if failed != nil {
			segErr = &PushError{Results: seg, Failed: failed}
		}
		hooks.pushed(e.ctx, sg.ps.key.queue, part, k, start, seg, segErr)
		e.finish(sg.ps, sg.batch, outs, cause)
		off += k
	}
}

// deliver sends one push request, and sends it again after each failure
// that may pass until the delivery timeout, counted from since (when its
// oldest message was buffered): the producer's one retry layer
// for its batches (each send is a single attempt of the transport, which
// therefore retries nothing of it). The waits are the client's Backoff,
// with the broker's Retry-After. It returns the answer, or the failure:
// an error matching ErrOutcomeUnknown when any attempt may have stored the
// batch, ErrDeliveryTimeout when the time ran out, and ErrClosed when a
// Close whose ctx ended stopped it.
func (e *producer) deliver(body []byte, since time.Time, key string) (*response, error) {
	pol := e.c.cfg.retry
	lo := cmp.Or(pol.MinBackoff, transport.DefaultMinBackoff)
	hi := cmp.Or(pol.MaxBackoff, max(transport.DefaultMaxBackoff, lo))
	deadline := since.Add(e.cfg.deliver)
	var maybe bool // an attempt before the last one may have stored it
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		resp, err := e.c.do(e.ctx, call{method: http.MethodPost, path: wire.RoutePush.Path(), raw: body, attempts: 1, key: key})
		if err == nil {
			return resp, nil
		}
		if !e.passing(err) {
			return nil, sentBefore(err, maybe)
		}
		maybe = maybe || classify(err).state == stateUnknown
		wait := transport.Backoff(lo, hi, attempt-1, retryAfterOf(err))
		if time.Until(deadline) < wait {
			return nil, sentBefore(&deliveryTimeoutError{timeout: e.cfg.deliver, attempts: attempt, err: sentBefore(err, maybe)}, false)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-e.ctx.Done():
			return nil, sentBefore(&closedSending{err}, maybe)
		}
	}
}

// passing reports whether a push that failed with err may pass when sent
// again: the transport's rule (network failures, 408, 429, most 5xx), while
// the producer and its client are open.
func (e *producer) passing(err error) bool {
	if e.ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return false
	}
	if be, ok := errors.AsType[*BrokerError](err); ok {
		return be.Temporary()
	}
	return transport.RetryableErr(err)
}

// sentBefore is err, the failure of a batch's last attempt, when no earlier
// attempt may have stored the batch (maybe false); else an error matching
// ErrOutcomeUnknown that keeps err's text but not what it matches, as the
// last attempt's "not sent" or "not applied" is not the batch's.
func sentBefore(err error, maybe bool) error {
	if !maybe || classify(err).state == stateUnknown {
		return err
	}
	return outcomeUnknown(fmt.Errorf("queen: an earlier attempt may have reached the broker; the last one failed: %v", err))
}

// outcome is what a message of a batch is settled with.
type outcome struct {
	res   PushResult
	err   error
	state pushState
}

// classify turns the failure of a whole batch into its messages' outcome:
// not stored when the request surely was not applied (refused with a 4xx,
// or a 503, 501 or 507 that says it was not applied; never sent; the
// client closed), unknown otherwise (a network failure after the request
// may have been sent, a 500, 502 or 504, an answer that cannot be read),
// with an error that then matches ErrOutcomeUnknown.
func classify(err error) outcome {
	if errors.Is(err, ErrOutcomeUnknown) {
		return outcome{err: err, state: stateUnknown}
	}
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrNotSent) {
		return outcome{err: err, state: stateNotStored}
	}
	if be, ok := errors.AsType[*BrokerError](err); ok && be.Status >= 400 && !transport.MayHaveApplied(be.Status, be.Body) {
		return outcome{err: err, state: stateNotStored}
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		err = outcomeUnknown(err)
	}
	return outcome{err: err, state: stateUnknown}
}

// settleAll settles every message of batch with o (keeping each one's
// result).
func (e *producer) settleAll(ps *partState, batch []*PendingPush, o outcome) {
	outs := make([]outcome, len(batch))
	for i, pp := range batch {
		outs[i] = outcome{res: pp.res, err: o.err, state: o.state}
	}
	e.finish(ps, batch, outs, o.err)
}

// finish publishes the outcomes of batch, frees their room, and on a
// failure (cause non-nil) fails the partition's buffered messages: with a
// *PartitionFailedError, or under WithPauseOnFailure a
// *PartitionPausedError, pausing it. A closed client or producer does not
// pause: the buffered messages fail with that error.
func (e *producer) finish(ps *partState, batch []*PendingPush, outs []outcome, cause error) {
	e.mu.Lock()
	for i, pp := range batch {
		pp.res, pp.err, pp.state = outs[i].res, outs[i].err, outs[i].state
	}
	var failed []*PendingPush
	if cause != nil {
		var ferr error
		switch {
		case e.ctx.Err() != nil: // a Close whose ctx ended
			ferr = errProducerClosed
		case errors.Is(cause, ErrClosed): // the client or the producer
			ferr = cause
		case e.cfg.pause:
			ps.paused = cause
			ferr = &PartitionPausedError{Queue: ps.key.queue, Partition: ps.key.partition, Cause: cause}
		default:
			ferr = &PartitionFailedError{Queue: ps.key.queue, Partition: ps.key.partition, Cause: cause}
		}
		failed = ps.buf
		ps.buf, ps.bufBytes = nil, 0
		for _, pp := range failed {
			pp.err, pp.state = ferr, stateNotStored
		}
	}
	f := e.cfg.onResult
	if f == nil {
		e.release(ps)
	}
	n, size := 0, 0
	for _, list := range [][]*PendingPush{batch, failed} {
		for _, pp := range list {
			n++
			size += pp.size
		}
	}
	e.count -= n
	e.bytes -= size
	if e.waiters > 0 && e.room != nil {
		close(e.room)
		e.room = nil
	}
	e.mu.Unlock()
	for _, list := range [][]*PendingPush{batch, failed} {
		for _, pp := range list {
			close(pp.done)
			if f != nil {
				f(pp.res, pp.err)
			}
		}
	}
	if f != nil {
		// The partition stayed busy (ps.sending set) while the callbacks
		// ran without the lock: its next batch goes only now, so that its
		// callbacks come after these ones.
		e.mu.Lock()
		e.release(ps)
		e.mu.Unlock()
	}
}

// release ends ps's batch on the wire: its next batch may go. e.mu is held.
func (e *producer) release(ps *partState) {
	ps.sending = nil
	if e.cfg.delay > 0 {
		ps.freed = time.Now()
	}
	ps.wake() // its worker, if another worker's request carried the batch
}
