package queen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/internal/wire"
)

// A Producer pushes messages one at a time and sends them in batches: each
// Push returns at once with a *PendingPush; the messages of one queue and
// partition go out together when they reach the batch count or bytes or
// have waited the batch delay, in at most WithMaxInflight requests at once.
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
// What it promises (in full in docs/PRODUCER.md):
//
//   - Order within a partition: its next batch goes once the one before it
//     is settled, its messages in push order.
//   - An outage is ridden out: a batch that may pass is sent again until
//     WithDeliveryTimeout; a send a node of several did not take goes to
//     the next at once; while the broker is down (every URL resting) one
//     batch at a time probes it, and when it answers every batch goes
//     (docs/RETRIES.md, "The producer").
//   - A batch that fails for good fails its partition's messages buffered
//     behind it (*PartitionFailedError); with WithPauseOnFailure the
//     partition pauses until Resume (*PartitionPausedError).
//   - Nothing silent: every message's outcome reaches its PendingPush: a
//     PushResult when stored, else an error: matching ErrNotSent or
//     ErrOutcomeUnknown, or a *BrokerError or *PushError (not stored);
//     PendingPush.State gives it as data.
//   - No double store: a message keeps its transaction id on every resend,
//     as long as the broker remembers ids (2.x: the queue's DedupWindow).
//   - Bounded memory: WithBufferLimit; a Push's ctx bounds only its wait
//     for room.
//   - PushHook is called once per batch.
//
// A Producer is safe for concurrent use; Queue and Partition return views
// that share it. Close it before its client.
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

// Defaults of the producer options, named by their With functions.
const (
	DefaultBatchCount      = 100
	DefaultBatchBytes      = 1 << 20
	DefaultBufferMessages  = 10000
	DefaultBufferBytes     = 64 << 20
	DefaultMaxInflight     = 4
	DefaultDeliveryTimeout = time.Minute
)

// WithBatchCount sets the most messages in one batch (default
// DefaultBatchCount, at most MaxBatch).
func WithBatchCount(n int) ProducerOption {
	return func(c *producerConfig) { c.count, c.countSet = n, true }
}

// WithBatchBytes sets the most bytes (encoded payloads and ids) in one
// batch (default DefaultBatchBytes); a larger message goes alone.
func WithBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) { c.bytes, c.bytesSet = n, true }
}

// WithBatchDelay sets how long a batch may wait for more messages once its
// partition is free to send (default 0: at once). See docs/PRODUCER.md.
func WithBatchDelay(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.delay = d }
}

// WithBufferLimit bounds the messages and bytes the producer holds,
// buffered or being sent (defaults DefaultBufferMessages and
// DefaultBufferBytes). A larger message fails with ErrMessageTooLarge.
func WithBufferLimit(messages, bytes int) ProducerOption {
	return func(c *producerConfig) { c.maxMsgs, c.maxBytes, c.limitsSet = messages, bytes, true }
}

// WithFailWhenFull makes a Push that finds the buffer full fail at once with
// ErrBufferFull, instead of waiting for room.
func WithFailWhenFull() ProducerOption {
	return func(c *producerConfig) { c.failFast = true }
}

// WithMaxInflight sets how many push requests may be on the wire at once
// (default DefaultMaxInflight); a partition has at most one batch there.
func WithMaxInflight(n int) ProducerOption {
	return func(c *producerConfig) { c.inflight = n }
}

// WithDeliveryTimeout bounds how long, from the Push of a batch's oldest
// message, a batch that failed in a way that may pass is sent again
// (default DefaultDeliveryTimeout; not RetryPolicy's MaxAttempts). Then
// it fails with an error matching ErrDeliveryTimeout and
// the last failure's (ErrNotSent, ErrOutcomeUnknown or a *BrokerError).
// On 2.x keep the queue's DedupWindow at least this long (docs/RETRIES.md).
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.deliver = d }
}

// WithPauseOnFailure makes a batch that fails for good pause its
// partition until Resume: the messages behind it and later pushes there
// fail with a *PartitionPausedError.
func WithPauseOnFailure() ProducerOption {
	return func(c *producerConfig) { c.pause = true }
}

// WithOnResult sets a function called once with every message's outcome,
// as its PendingPush gives it, in push order within a partition. It must be
// safe for concurrent use and return soon: the partition's next batch waits
// for it. A Push from it should not wait for room (docs/PRODUCER.md).
func WithOnResult(f func(PushResult, error)) ProducerOption {
	return func(c *producerConfig) { c.onResult = f }
}

// Errors of a Producer.
var (
	ErrBufferFull      = errors.New("queen: producer buffer is full")                      // under WithFailWhenFull
	ErrPartitionPaused = errors.New("queen: partition paused after a failed batch")        // by *PartitionPausedError
	ErrDeliveryTimeout = errors.New("queen: producer delivery timeout")                    // see WithDeliveryTimeout
	ErrMessageTooLarge = newArgError("message is larger than the producer's buffer limit") // see WithBufferLimit
)

// errProducerClosed matches ErrClosed and ErrNotSent.
var errProducerClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string { return "queen: producer is closed" }
func (*closedError) Is(target error) bool {
	return target == ErrClosed || target == ErrNotSent
}

// closedSending: a batch stopped between two sends by a Close whose ctx
// ended.
type closedSending struct{ last error }

func (e *closedSending) Error() string {
	return "queen: producer is closed; last send: " + strings.TrimPrefix(e.last.Error(), "queen: ")
}
func (e *closedSending) Unwrap() error        { return e.last }
func (e *closedSending) Is(target error) bool { return target == ErrClosed }

// PartitionPausedError is the error of a message not sent because its
// partition is paused (WithPauseOnFailure) until Producer.Resume.
type PartitionPausedError struct {
	Queue, Partition string // Partition "Default" for the default one
	Cause            error  // the failure of the batch that paused it
}

// Error names the partition and the failure that paused it.
func (e *PartitionPausedError) Error() string {
	return fmt.Sprintf("queen: partition %q of queue %q is paused after a failed batch (%v); message not sent",
		e.Partition, e.Queue, e.Cause)
}

// Is matches ErrPartitionPaused and ErrNotSent.
func (e *PartitionPausedError) Is(target error) bool {
	return target == ErrPartitionPaused || target == ErrNotSent
}

// Unwrap returns Cause without its answer: errors.As finds the batch's
// *BrokerError and errors.Is its ErrDeliveryTimeout, but whether the batch
// may have been applied is Cause's alone.
func (e *PartitionPausedError) Unwrap() error { return unanswered(e.Cause) }

// PartitionFailedError is the error of a message not sent because a batch
// ahead of it in its partition failed for good. It matches ErrNotSent.
type PartitionFailedError struct {
	Queue, Partition string // Partition "Default" for the default one
	Cause            error  // the failure of the batch ahead
}

// Error names the partition and the batch's failure.
func (e *PartitionFailedError) Error() string {
	return fmt.Sprintf("queen: message not sent: an earlier batch of partition %q of queue %q failed (%v)",
		e.Partition, e.Queue, e.Cause)
}

// Is matches ErrNotSent.
func (e *PartitionFailedError) Is(target error) bool { return target == ErrNotSent }

// Unwrap returns Cause without its answer: errors.As finds the batch's
// *BrokerError and errors.Is its ErrDeliveryTimeout, but whether the batch
// may have been applied is Cause's alone.
func (e *PartitionFailedError) Unwrap() error { return unanswered(e.Cause) }

// errStillBuffered is the last failure of a batch still answered
// "buffered" at its delivery timeout.
var errStillBuffered = errors.New("queen: still buffered by the broker")

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
// were not stored: it lists them by state, each list in push order (each
// message's own error is in its PendingPush), and answers "was it
// applied?" for them all: ErrOutcomeUnknown when one may have been stored
// (Unknown or Pending not empty), else ErrNotSent when every one matches
// ErrNotSent, else neither (the broker refused one).
type ProducerError struct {
	NotStored []*PendingPush // surely not stored: PushNotStored
	Unknown   []*PendingPush // may have been stored: PushUnknown
	// Pending are still buffered or being sent (PushPending) when Flush's
	// ctx ended; they are still sent.
	Pending []*PendingPush
	Err     error // ctx's error if it ended first, else the earliest pushed failure
}

// Error gives the counts and Err.
func (e *ProducerError) Error() string {
	s := fmt.Sprintf("queen: producer: %d messages not stored, %d with outcome unknown", len(e.NotStored), len(e.Unknown))
	if len(e.Pending) > 0 {
		s += fmt.Sprintf(", %d pending", len(e.Pending))
	}
	return s + ": " + e.Err.Error()
}

// Is matches ErrOutcomeUnknown or ErrNotSent as ProducerError says.
func (e *ProducerError) Is(target error) bool {
	switch target {
	case ErrOutcomeUnknown:
		return len(e.Unknown)+len(e.Pending) > 0
	case ErrNotSent:
		if len(e.Unknown)+len(e.Pending) > 0 || len(e.NotStored) == 0 {
			return false
		}
		for _, pp := range e.NotStored {
			if !errors.Is(pp.err, ErrNotSent) {
				return false
			}
		}
		return true
	}
	return false
}

// Unwrap returns Err without its answer, which is one message's (see Is).
func (e *ProducerError) Unwrap() error { return unanswered(e.Err) }

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
	state pushState // guarded by the producer's mu; final once done is closed
}

// PushState is where a Producer's message stands: its PendingPush's
// answer as data.
type PushState uint8

const (
	// PushPending: buffered or being sent, no outcome yet.
	PushPending PushState = iota
	// PushStored: stored (queued or duplicate); Wait returns its
	// PushResult and nil.
	PushStored
	// PushNotStored: surely not stored; its error matches ErrNotSent (no
	// send of it reached the broker) or is the broker's refusal.
	PushNotStored
	// PushUnknown: may have been stored; its error matches
	// ErrOutcomeUnknown. Push it again with the same transaction id (an
	// Item) to be sure it is stored once.
	PushUnknown
)

// String names the state: "pending", "stored", "not stored" or "unknown".
func (s PushState) String() string {
	switch s {
	case PushPending:
		return "pending"
	case PushStored:
		return "stored"
	case PushNotStored:
		return "not stored"
	case PushUnknown:
		return "unknown"
	}
	return "PushState(" + strconv.Itoa(int(s)) + ")"
}

// State returns the message's state: PushPending until Done is closed,
// then its outcome, which does not change.
func (p *PendingPush) State() PushState {
	select {
	case <-p.done:
	default:
		return PushPending
	}
	switch p.state {
	case stateStored:
		return PushStored
	case stateUnknown:
		return PushUnknown
	}
	return PushNotStored
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

// Wait waits for the message's outcome or ctx: its PushResult and nil when
// stored (queued or duplicate), else the error with the broker's answer
// for it, if any. When ctx ends first it returns ctx.Err() and the message
// is still sent.
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

type partKey struct{ queue, partition string }

func partKeyOf(queue, partition string) partKey {
	if partition == "" {
		partition = "Default"
	}
	return partKey{queue, partition}
}

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

type producer struct {
	c     *Client
	cfg   producerConfig
	clock clock    // the wall clock but in tests (export_test.go)
	down  downtime // the broker not answering: sends wait for a probe's turn

	ctx    context.Context // the sends'; cancelled by a Close whose ctx ended
	cancel context.CancelFunc
	slots  chan struct{} // WithMaxInflight
	wg     sync.WaitGroup
	// retrying counts the batches between a failed send and their
	// outcome: the first of a run logs its failure at Warn, the last its
	// success, the others at Debug (one pair of lines per episode).
	retrying atomic.Int32

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

// Producer returns a batching producer for any queue (name it with
// Producer.Queue). Options out of range fail with ErrInvalidOption.
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
	e := &producer{c: c, cfg: cfg, clock: wallClock{}, ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.inflight),
		parts: map[partKey]*partState{}}
	e.down.init(e)
	return &Producer{e: e}, nil
}

// Producer returns a batching producer for the builder's queue and
// partition: see Client.Producer. A bad name fails here.
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

// Queue returns a view of the producer that pushes to queue name.
func (p *Producer) Queue(name string) *Producer { return &Producer{e: p.e, queue: name} }

// Partition returns a view of the producer that pushes to partition name.
func (p *Producer) Partition(name string) *Producer {
	return &Producer{e: p.e, queue: p.queue, partition: name}
}

// Push buffers one message (what QueueBuilder.Push takes) and returns at
// once, or at the buffer's limit once there is room or ctx ends; ctx never
// bounds the send. A message refused before buffering (bad input,
// ErrClosed, a paused partition, ErrBufferFull, ctx) gives a PendingPush
// already done with that error.
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
	// Encoded once: a resend sends the same bytes.
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

func (p *Producer) check() error {
	if err := checkName(queueName, p.queue); err != nil {
		return err
	}
	return checkOptionalName(partitionName, p.partition)
}

// Resume ends the pause of the view's partition (WithPauseOnFailure); on
// a partition not paused it does nothing.
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

// Flush sends what is buffered now without delay and waits until each of
// those messages has its outcome or ctx ends: nil when all were stored, else
// a *ProducerError. Messages pushed meanwhile are not waited for.
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

// Close refuses later pushes (ErrClosed), sends what is buffered and waits
// like Flush. When ctx ends first, sends are cut and unsent messages fail
// with ErrClosed and ErrNotSent; no goroutine outlives Close. It is safe to
// call more than once (docs/PRODUCER.md).
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
	e.cancel()
	e.wg.Wait()
	err = e.await(context.Background(), snap)
	if pe, ok := errors.AsType[*ProducerError](err); ok {
		pe.Err = ctx.Err()
	}
	return err
}

// snapshot returns the messages held and wakes every worker. e.mu is held.
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
	slices.SortFunc(snap, func(a, b *PendingPush) int { return cmp.Compare(a.seq, b.seq) })
	var pe ProducerError
	e.mu.Lock()
	for _, pp := range snap {
		switch pp.state {
		case stateBuffered, stateSending:
			pe.Pending = append(pe.Pending, pp)
			continue
		case stateNotStored:
			pe.NotStored = append(pe.NotStored, pp)
		case stateUnknown:
			pe.Unknown = append(pe.Unknown, pp)
		default:
			continue
		}
		if pe.Err == nil { // the earliest pushed failure
			pe.Err = pp.err
		}
	}
	e.mu.Unlock()
	if ctxErr != nil {
		pe.Err = ctxErr
	}
	if pe.Err == nil {
		return nil
	}
	return &pe
}

func (e *producer) refuse(pp *PendingPush, err error) {
	pp.err, pp.state = err, stateNotStored
	close(pp.done)
	if f := e.cfg.onResult; f != nil {
		f(pp.res, err)
	}
}

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
	pp.at = e.clock.Now()
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

// ready: e.mu is held.
func (e *producer) ready(ps *partState) bool {
	return e.cfg.delay == 0 || e.flushes > 0 || len(ps.buf) >= e.cfg.count || ps.bufBytes >= e.cfg.bytes ||
		e.clock.Now().Sub(ps.since()) >= e.cfg.delay
}

// since is when ps's delay started: its oldest message, or its last
// settled batch if later.
func (ps *partState) since() time.Time {
	if t := ps.buf[0].at; t.After(ps.freed) {
		return t
	}
	return ps.freed
}

// take removes at most n messages and size bytes (at least one when first)
// from ps's buffer. e.mu is held.
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

type segment struct {
	ps    *partState
	batch []*PendingPush
}

// gather adds to segs the ready batches of partitions with none on the
// wire, within the batch count and bytes. e.mu is held.
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

// work serves one partition until its buffer is empty and nothing of it
// is on the wire.
func (e *producer) work(ps *partState) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(ps.sending) > 0 {
			// Another worker's request carries it; its finish kicks us.
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
			wait := e.cfg.delay - e.clock.Now().Sub(ps.since())
			e.mu.Unlock()
			c, stop := e.clock.After(wait)
			select {
			case <-c:
			case <-ps.kick:
			}
			stop()
			continue
		}
		e.mu.Unlock()
		// The slot first: what comes while slots are busy joins this request.
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
			e.mu.Unlock()
			<-e.slots
			continue
		}
		segs := []segment{{ps, e.take(ps, e.cfg.count, e.cfg.bytes, true)}}
		if len(e.slots) == cap(e.slots) {
			// The last free slot carries the other ready partitions.
			segs = e.gather(segs)
		}
		e.mu.Unlock()
		e.send(segs)
		<-e.slots
	}
}

// send reports each segment to PushHook as a batch of its own.
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
	oldest := segs[0].batch[0].at
	for _, sg := range segs[1:] {
		if sg.batch[0].at.Before(oldest) {
			oldest = sg.batch[0].at
		}
	}
	res, buffered, err := e.deliver(body, items, oldest)
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
				if dt, ok := err.(*deliveryTimeoutError); ok {
					o.err = &deliveryTimeoutError{timeout: dt.timeout, attempts: dt.attempts, err: o.err}
				}
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

// deliver is the producer's one retry layer: each send is one transport
// attempt. A send not sent (a refused connection, say) begins an outage
// (see downtime), whose probes pace the next sends; an answer that may pass (a
// 503, say) is sent again after the client's backoff. A 0.15.1
// "buffered" answer is sent again too: the unique (partition,
// transactionId) index makes the broker's later replay of its file a
// duplicate (server/src/services/file_buffer.cpp).
func (e *producer) deliver(body []byte, items []wire.PushItem, since time.Time) ([]PushResult, []bool, error) {
	pol := e.c.cfg.retry
	lo := cmp.Or(pol.MinBackoff, transport.DefaultMinBackoff)
	hi := cmp.Or(pol.MaxBackoff, max(transport.DefaultMaxBackoff, lo))
	deadline := since.Add(e.cfg.deliver)
	key := pushKey(items[0].Queue, items[0].Partition)
	var (
		maybe    bool // an attempt before the last one may have stored it
		res      []PushResult
		buffered []bool
		err      error // the last send's failure
	)
	// stop ends the batch before its next send, at its delivery timeout
	// or at a Close whose ctx ended, after sent sends.
	stop := func(sent int, timedOut bool) ([]PushResult, []bool, error) {
		switch {
		case buffered != nil && timedOut: // each buffered message fails as unknown, past its timeout
			return res, buffered, &deliveryTimeoutError{timeout: e.cfg.deliver, attempts: sent, err: errStillBuffered}
		case buffered != nil:
			return res, buffered, nil
		case sent == 0 && timedOut:
			return nil, nil, &deliveryTimeoutError{timeout: e.cfg.deliver, err: &notSentError{errNoTurn}}
		case sent == 0:
			return nil, nil, errProducerClosed
		case timedOut:
			return nil, nil, sentBefore(&deliveryTimeoutError{timeout: e.cfg.deliver, attempts: sent, err: sentBefore(err, maybe)}, false)
		}
		return nil, nil, sentBefore(&closedSending{err}, maybe)
	}
	counted := false // in e.retrying
	defer func() {
		if counted {
			e.retrying.Add(-1)
		}
	}()
	for attempt := 1; ; attempt++ {
		probe, werr := e.down.turn(e.ctx, deadline, attempt == 1)
		if werr != nil {
			return stop(attempt-1, werr == errPastDeadline)
		}
		var resp *response
		resp, err = e.c.do(e.ctx, call{method: http.MethodPost, path: wire.RoutePush.Path(), raw: body, attempts: 1, key: key})
		_, answered := errors.AsType[*BrokerError](err)
		answered = answered || err == nil
		notSent := errors.Is(err, ErrNotSent) && e.passing(err)
		if notSent && !probe && !e.c.tr.AllResting() {
			// One URL of several refused it: the next send goes to another
			// one, at once. The broker is down only when every URL rests.
			e.c.log.Debug("queen: producer: push not sent to one broker URL; sending it to the next", "queue", items[0].Queue,
				"partition", items[0].Partition, "err", err)
			attempt--
			continue
		}
		e.down.report(probe, answered, notSent, err)
		res, buffered = nil, nil
		if err != nil && e.ctx.Err() != nil { // cut by a Close whose ctx ended
			return nil, nil, sentBefore(&closedSending{err}, maybe)
		}
		if err == nil {
			res, buffered, err = decodePushAnswer(resp.status, resp.body, items)
			if res == nil || buffered == nil {
				if attempt > 1 {
					level := slog.LevelDebug
					if counted && e.retrying.Add(-1) == 0 {
						level = slog.LevelWarn // the last batch of the episode
					}
					counted = false
					e.c.log.Log(context.Background(), level, "queen: producer: push sent again succeeds", "queue", items[0].Queue,
						"partition", items[0].Partition, "messages", len(items), "attempts", attempt)
				}
				return res, buffered, err
			}
			err = nil // some of it buffered: send it again
		} else if !e.passing(err) {
			return nil, nil, sentBefore(err, maybe)
		}
		if attempt == 1 {
			cause := "buffered by the broker, not stored yet"
			if err != nil {
				cause = err.Error()
			}
			level := slog.LevelDebug
			if counted = true; e.retrying.Add(1) == 1 {
				level = slog.LevelWarn // the first batch of the episode
			}
			e.c.log.Log(context.Background(), level, "queen: producer: push failed; sending it again until the delivery timeout", "queue", items[0].Queue,
				"partition", items[0].Partition, "messages", len(items), "deliveryTimeout", e.cfg.deliver, "err", cause)
		}
		maybe = maybe || buffered != nil || classify(err).state == stateUnknown
		if notSent {
			continue // the next send waits for its turn (downtime.turn)
		}
		wait := transport.Backoff(lo, hi, attempt-1, retryAfterOf(err))
		if deadline.Sub(e.clock.Now()) < wait {
			return stop(attempt, true)
		}
		c, stopTimer := e.clock.After(wait)
		select {
		case <-c:
			stopTimer()
		case <-e.ctx.Done():
			stopTimer()
			return stop(attempt, false)
		}
	}
}

// errNoTurn is the failure of a batch whose delivery timeout passed
// while it waited for a probe's turn, before any send of its own.
var errNoTurn = errors.New("queen: producer: the broker did not answer the probes meanwhile")

// probeEvery is how often, at most, a producer whose broker is down sends
// a batch to see whether it is back.
const probeEvery = 250 * time.Millisecond

// downtime is what a producer knows of a broker that is down (a send was
// not sent: its connection refused, say): while it lasts one batch at a
// time is sent as a probe, at most every probeEvery, and the others wait;
// the first answer (whatever its status) ends it and they all go at once.
type downtime struct {
	e       *producer
	mu      sync.Mutex
	down    bool
	probing bool          // a probe is on the wire
	next    time.Time     // no probe starts before
	changed chan struct{} // closed and replaced when down or probing changes
	since   time.Time     // when it began
	probes  int
}

func (o *downtime) init(e *producer) {
	o.e, o.changed = e, make(chan struct{})
}

// errPastDeadline ends a wait for a probe's turn at the batch's delivery
// timeout.
var errPastDeadline = errors.New("queen: producer: delivery timeout")

// turn returns when a batch may be sent: at once while the broker
// answers; during an outage, when the batch is the next probe (probe
// true) or the outage ends. It fails with errPastDeadline once deadline
// has passed (for a batch's first send, which goes even late, only
// during an outage), and with ctx's error when ctx ends.
func (o *downtime) turn(ctx context.Context, deadline time.Time, first bool) (probe bool, err error) {
	for {
		o.mu.Lock()
		now := o.e.clock.Now()
		if (o.down || !first) && !now.Before(deadline) {
			o.mu.Unlock()
			return false, errPastDeadline
		}
		if !o.down {
			o.mu.Unlock()
			return false, nil
		}
		if !o.probing && !now.Before(o.next) {
			o.probing, o.next = true, now.Add(probeEvery)
			o.probes++
			o.mu.Unlock()
			return true, nil
		}
		wait := deadline.Sub(now)
		if !o.probing {
			wait = min(wait, o.next.Sub(now))
		}
		changed := o.changed
		o.mu.Unlock()
		c, stop := o.e.clock.After(wait)
		select {
		case <-c:
		case <-changed:
		case <-ctx.Done():
			stop()
			return false, ctx.Err()
		}
		stop()
	}
}

// report records a send's outcome: an answer ends the outage, a send not
// sent that may pass (notSent) begins it. probe says whether the send was
// the outage's probe.
func (o *downtime) report(probe, answered, notSent bool, err error) {
	o.mu.Lock()
	was, now := o.down, o.e.clock.Now()
	switch {
	case answered && o.down:
		o.down = false
	case notSent && !o.down:
		o.down, o.next, o.since, o.probes = true, now.Add(probeEvery), now, 0
	}
	if probe || was != o.down {
		o.probing = o.probing && !probe
		close(o.changed)
		o.changed = make(chan struct{})
	}
	down, since, probes := o.down, o.since, o.probes
	o.mu.Unlock()
	switch {
	case was && !down:
		o.e.c.log.Warn("queen: producer: the broker answers again; sending every batch", "after", now.Sub(since), "probes", probes)
	case !was && down:
		o.e.c.log.Warn("queen: producer: the broker is down; sending one batch at a time to probe it", "every", probeEvery, "err", err)
	}
}

// passing: the transport's rule, while producer and client are open.
func (e *producer) passing(err error) bool {
	if e.ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return false
	}
	if be, ok := errors.AsType[*BrokerError](err); ok {
		return be.Temporary()
	}
	return transport.RetryableErr(err)
}

// sentBefore: when an earlier attempt may have stored the batch, the last
// attempt's ErrNotSent is not the batch's, so only err's text is kept.
func sentBefore(err error, maybe bool) error {
	if !maybe || classify(err).state == stateUnknown {
		return err
	}
	return outcomeUnknown(fmt.Errorf("queen: an earlier attempt may have reached the broker; the last one failed: %v", err))
}

type outcome struct {
	res   PushResult
	err   error
	state pushState
}

// classify: not stored only when the request surely was not applied.
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
	return outcome{err: outcomeUnknown(err), state: stateUnknown}
}

func (e *producer) settleAll(ps *partState, batch []*PendingPush, o outcome) {
	outs := make([]outcome, len(batch))
	for i, pp := range batch {
		outs[i] = outcome{res: pp.res, err: o.err, state: o.state}
	}
	e.finish(ps, batch, outs, o.err)
}

// finish settles batch; on a failure it fails (or pauses) the partition's
// buffered messages, except that a closed client or producer never pauses.
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
		// ps.sending stayed set while the callbacks ran: the next batch's
		// callbacks come after these.
		e.mu.Lock()
		e.release(ps)
		e.mu.Unlock()
	}
}

// release ends ps's batch on the wire: its next batch may go. e.mu is held.
func (e *producer) release(ps *partState) {
	ps.sending = nil
	if e.cfg.delay > 0 {
		ps.freed = e.clock.Now()
	}
	ps.wake() // its worker, if another worker's request carried the batch
}

// clock is the producer's time: the wall clock, or a test's.
type clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed, and a
	// function that lets the time go (call it once done with the channel).
	After(d time.Duration) (<-chan time.Time, func())
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
