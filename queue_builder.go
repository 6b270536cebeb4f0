package queen

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// SubscriptionMode says where a new consumer group starts reading. The
// broker keeps the start point of the pop that registers the group on a
// queue; later the group moves with a seek.
type SubscriptionMode string

const (
	// SubscriptionModeNew starts a new group after everything already in the
	// queue: it reads only what is pushed later. The broker's default.
	SubscriptionModeNew SubscriptionMode = "new"
	// SubscriptionModeAll starts a new group at the oldest kept message.
	SubscriptionModeAll SubscriptionMode = "all"
)

// Limits of the pop options.
const (
	// MaxPartitions is the most partitions one pop may take.
	MaxPartitions = 64
	// MaxTimeoutMillis is the longest long poll the broker allows.
	MaxTimeoutMillis = 60000
	// DefaultTimeoutMillis is the long-poll wait when TimeoutMillis is not set.
	DefaultTimeoutMillis = 30000
)

// QueueBuilder names a queue (and optionally a partition) and collects the
// options of a pop or a consume loop. Its setters return the builder, so
// calls chain:
//
//	msgs, err := client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Pop(ctx)
//
// The setters only record a value: a later call of the same setter
// replaces an earlier one, and each operation (Pop, Consume, Push, Create,
// Fetch) checks the options it uses when it runs, so an option of one
// operation never breaks another. Names are checked too (see
// ErrInvalidName and MaxNameBytes). Every such error matches
// ErrInvalidArgument and comes before any request.
//
// A builder is not safe for concurrent use while it is being configured;
// Pop may be called again on the same builder.
type QueueBuilder struct {
	c *Client

	queue     string
	partition string
	namespace string
	task      string
	config    *QueueConfig

	group            string
	subMode          SubscriptionMode
	subFrom          string
	batch            int // 0: unset
	partitions       int
	partitionsSet    bool
	wait             bool
	waitSet          bool
	timeoutMs        int
	timeoutSet       bool
	autopilotOff     bool
	conflation       bool
	commitOnDelivery bool
	lease            time.Duration // 0: the queue's LeaseTime

	// consume options
	each           bool
	autoAckOff     bool
	renew          bool
	renewMs        int
	concurrency    int
	concurrencySet bool
	limit          int
	idleMs         int
}

// Queue starts a builder for the queue name.
func (c *Client) Queue(name string) *QueueBuilder {
	return &QueueBuilder{c: c, queue: name}
}

// Namespace starts a builder for a discovery pop across every queue
// configured with this namespace (and, with Task, that task). Pop then uses
// the broker's GET /api/v1/pop route.
func (c *Client) Namespace(namespace string) *QueueBuilder {
	return &QueueBuilder{c: c, namespace: namespace}
}

// Task starts a builder for a discovery pop across every queue configured
// with this task. See Namespace.
func (c *Client) Task(task string) *QueueBuilder {
	return &QueueBuilder{c: c, task: task}
}

// Task narrows a discovery pop (started with Client.Namespace) to a task.
// On a builder of a named queue it fails Pop with ErrInvalidOption.
func (b *QueueBuilder) Task(task string) *QueueBuilder { b.task = task; return b }

// Partition pins the builder to one partition: pushes go there and pops use
// the broker's pinned-partition route. Partitions and autopilot do not apply
// to a pinned pop.
func (b *QueueBuilder) Partition(name string) *QueueBuilder { b.partition = name; return b }

// Group sets the consumer group. Every group gets every message and keeps
// its own position; without a group the pop runs in queue mode, where each
// message goes to one worker.
func (b *QueueBuilder) Group(name string) *QueueBuilder { b.group = name; return b }

// SubscriptionMode sets where the group starts if this is its first pop.
// Without it a named group's pops send SubscriptionModeNew explicitly
// (brokers disagree on the default), or SubscriptionModeAll when
// SubscriptionFrom is set. Queue mode (no Group) always reads everything:
// SubscriptionModeAll is accepted there and not sent, SubscriptionModeNew
// fails Pop with ErrInvalidSubscription.
//
// Which pops carry the start point depends on the broker's generation,
// which the Client asks once (GET /health) before a group's first pop:
//
//   - 2.x: every pop of the group. The broker registers a group on its
//     first queue-wide pop and then keeps that start point whatever later
//     pops carry; a pinned pop (Partition) registers nothing and starts a
//     partition new to the group where the start point it carries says, so
//     each partition of a group read partition by partition starts where
//     the group asked. Such a broker keeps a pinned pop's "new" only in
//     memory, and takes it again at the tail (skipping what was pushed
//     meanwhile) after a restart, for a partition that did not exist yet,
//     or when a queue-wide pop registers the group; so once a pinned pop
//     of a group in mode "new" (or from "now") is answered, the group's
//     pops carry a fixed time instead: the broker's clock at that first
//     pop, rounded down to the second. Up to about a second of what was
//     pushed just before it may then be read, and the group views may
//     show that time rather than "new". The time lasts as long as the
//     Client: a new process picks a new one, so set SubscriptionFrom for a
//     start that outlives it.
//   - 0.15.1: only until the group is registered, since there a "new" sent
//     to a group whose cursor is back at a partition's start skips messages
//     (PROTOCOL.md §16). Before a (queue, group)'s first pop the Client asks
//     the broker (GET /api/v1/consumer-groups/{group}) whether the group has
//     a position on the queue; once it has, or a pop of it was answered,
//     the Client leaves the start point out for as long as it lives. A
//     start time (SubscriptionFrom other than "now") is the exception: the
//     pops that carry the time of the group's first answered pop go on
//     carrying it, since that broker starts each partition the group first
//     reads with a pinned pop by what that pop carries.
//
// If a question fails, the pop fails with its error and nothing is popped.
// To move a group that exists, seek it (Admin.SeekConsumerGroup).
func (b *QueueBuilder) SubscriptionMode(m SubscriptionMode) *QueueBuilder {
	b.subMode = m
	return b
}

// SubscriptionFrom starts a new group at the first message pushed at or
// after ts, an RFC 3339 time such as "2026-10-22T00:00:00Z" (or "now",
// which is like SubscriptionModeNew). It travels on pops as
// SubscriptionMode does (see there). Without a Group, or with a value that
// is not a time, Pop fails with ErrInvalidSubscription.
func (b *QueueBuilder) SubscriptionFrom(ts string) *QueueBuilder { b.subFrom = ts; return b }

// Batch sets the most messages one pop takes (the total across partitions),
// 1 to MaxBatch (10000). Left unset, the broker sizes it (autopilot); on a
// broker that does not (no autopilot echo on its answers, such as 0.15.1,
// which would hand out one message a pop), the Client asks for LegacyBatch
// from then on. A Batch set here is never changed. Batch(0) means unset.
func (b *QueueBuilder) Batch(n int) *QueueBuilder {
	b.batch = n
	return b
}

// Partitions lets one pop take messages from up to n partitions (1 to
// MaxPartitions, 64), with Batch as the total. All of them share one lease.
func (b *QueueBuilder) Partitions(n int) *QueueBuilder {
	b.partitions, b.partitionsSet = n, true
	return b
}

// Wait sets whether a pop waits (long polls) for messages instead of
// returning empty. The default is true, for up to TimeoutMillis.
func (b *QueueBuilder) Wait(wait bool) *QueueBuilder { b.wait, b.waitSet = wait, true; return b }

// TimeoutMillis sets how long a waiting pop waits, in milliseconds
// (default 30000, at most 60000).
func (b *QueueBuilder) TimeoutMillis(ms int) *QueueBuilder {
	b.timeoutMs, b.timeoutSet = ms, true
	return b
}

// Autopilot turns the broker's sizing of pops on (the default) or off. With
// it on, the broker chooses Batch and Partitions when they are not set; a
// value you set is never changed. Off, a pop takes one message from one
// partition unless Batch/Partitions say otherwise.
func (b *QueueBuilder) Autopilot(on bool) *QueueBuilder { b.autopilotOff = !on; return b }

// Conflation(true) hands the group only the newest message of each
// partition; an ack retires everything older. It needs a Group, cannot be
// combined with CommitOnDelivery, and is decided by the group's first pop.
func (b *QueueBuilder) Conflation(on bool) *QueueBuilder { b.conflation = on; return b }

// CommitOnDelivery(true) moves the group's cursor as the messages are
// handed out: no lease, nothing to ack, at-most-once. Pop only: a consume
// loop refuses it.
func (b *QueueBuilder) CommitOnDelivery(on bool) *QueueBuilder { b.commitOnDelivery = on; return b }

// LeaseTime overrides the queue's LeaseTime for the messages of the pops
// of this builder (2.x brokers; 0.15.1 ignores it). It travels in whole
// seconds, rounded up as QueueConfig's durations are (1500*time.Millisecond
// leases for 2 s); zero, the default, keeps the queue's LeaseTime. A
// negative one, or one the broker cannot store, fails Pop and Consume with
// ErrInvalidOption.
func (b *QueueBuilder) LeaseTime(d time.Duration) *QueueBuilder { b.lease = d; return b }

// Each makes a consume loop call its handler once per message, in partition
// order, instead of once per batch.
func (b *QueueBuilder) Each() *QueueBuilder { b.each = true; return b }

// AutoAck sets whether a consume loop acks for the handler (the default,
// true). With false the handler acks itself; a handler that returns an error
// is still nacked, so its partition is not stuck until the lease runs out.
func (b *QueueBuilder) AutoAck(on bool) *QueueBuilder { b.autoAckOff = !on; return b }

// RenewLease(true, ms) renews the lease of a consume loop's pops every ms
// milliseconds, from the pop's answer until its ack (the grace period
// after a stop included); ms must be at least MinRenewMillis (250), else
// the consume loop fails with ErrInvalidOption. Each renewal extends the
// lease to about three intervals from now (3·ms, rounded up to whole
// seconds; it never shortens a lease): a live handler keeps its lease as
// long as it runs, even if two renewals in a row fail, while the messages
// of a worker that died come back about three intervals after its last
// renewal, or when the lease it got at the pop runs out if that is later.
// Choose ms well below the queue's lease time; RenewLease(true, 1000) on a
// queue with a 3 s lease gets a dead worker's messages back within about
// 3 s.
func (b *QueueBuilder) RenewLease(on bool, everyMillis int) *QueueBuilder {
	b.renew, b.renewMs = on, everyMillis
	return b
}

// Concurrency runs up to n handlers of a consume loop at once, each on its
// own partitions, never two on one partition (default 1). However the pops
// are sized (the autopilot may give one pop every ready partition), the
// partitions of a pop are handled side by side by free handlers; a new pop
// is sent only for a free handler, so at most n pops are in flight or being
// handled. A pop held for the queue's RetryDelay after a failure (see
// ConsumeBuilder.OnError) occupies no handler but is not settled yet: with
// such pops the loop holds at most 2n pops, and pops no more until a hold
// ends. Each pop is still settled with one batch ack. n must be at
// least 1, else the consume loop fails with ErrInvalidOption.
func (b *QueueBuilder) Concurrency(n int) *QueueBuilder {
	b.concurrency, b.concurrencySet = n, true
	return b
}

// Limit stops a consume loop after n messages, counted across all slots
// (0, the default: no limit; negative fails the loop with ErrInvalidOption).
func (b *QueueBuilder) Limit(n int) *QueueBuilder {
	b.limit = n
	return b
}

// IdleMillis stops a consume loop after ms milliseconds with nothing to do
// (no message in any slot); 0, the default, never. Negative fails the loop
// with ErrInvalidOption.
func (b *QueueBuilder) IdleMillis(ms int) *QueueBuilder {
	b.idleMs = ms
	return b
}

// popRequest is a validated pop: its path and query.
type popRequest struct {
	path     string
	queue    string
	query    wire.PopQuery // with the group's start point, if any
	wait     bool
	waitMs   int
	discover bool
	pinned   bool   // the pop names its partition
	route    string // routing key (popKey)
	// encoded caches the encoded query without a cap, by variant: bit 0
	// with the start point, bit 1 with an explicit batch for a broker that
	// does not size pops, bit 2 not waiting, bit 3 with a fixed start time
	// (see popQuery).
	encoded [16]atomic.Pointer[encodedQuery]
}

// popRequest validates the options and builds the wire request. It sends
// nothing; every error matches ErrInvalidArgument.
func (b *QueueBuilder) popRequest() (*popRequest, error) {
	if err := b.checkPop(); err != nil {
		return nil, err
	}
	discover := b.queue == "" && (b.namespace != "" || b.task != "")
	r := &popRequest{wait: true, waitMs: DefaultTimeoutMillis, discover: discover, queue: b.queue}
	if b.waitSet {
		r.wait = b.wait
	}
	if b.timeoutSet {
		r.waitMs = b.timeoutMs
	}
	q := &r.query
	q.ConsumerGroup = b.group
	if b.group != "" {
		// Brokers disagree on the default mode (2.x "new", 0.15.1 "all"),
		// so a named group's start point always names one; which pops
		// carry it is subscription.go's rule. With a start time and no mode,
		// "all": should a broker let the mode win over the time, the group
		// reads more (from the start) rather than skipping what it asked for.
		q.SubscriptionMode = string(b.subMode)
		if q.SubscriptionMode == "" {
			q.SubscriptionMode = string(SubscriptionModeNew)
			if b.subFrom != "" {
				q.SubscriptionMode = string(SubscriptionModeAll)
			}
		}
		q.SubscriptionFrom = b.subFrom
	}
	q.Wait = &r.wait
	if r.wait {
		q.Timeout = &r.waitMs
	}
	q.AutoAck = b.commitOnDelivery
	q.Conflation = b.conflation
	q.LeaseSeconds = int(ceilUnits(b.lease, time.Second)) // checked by checkPop

	pinned := b.partition != "" && !discover
	r.pinned = pinned
	b.sizing(q, pinned)

	switch {
	case discover:
		r.path = wire.RoutePopDiscover.Path()
		q.Namespace, q.Task = b.namespace, b.task
		r.route = popKey(discoverKey(b.namespace), b.task, b.group)
	case pinned:
		r.path = wire.RoutePopPartition.Path(b.queue, b.partition)
		r.route = popKey(b.queue, b.partition, b.group)
	default:
		r.path = wire.RoutePopQueue.Path(b.queue)
		r.route = popKey(b.queue, "", b.group)
	}
	return r, nil
}

// sizing applies the autopilot rule of the wire protocol: unset knobs are
// omitted and autopilot=true is sent; set knobs are pins; with both set no
// autopilot flag travels. Autopilot off always sends a batch (1 when unset).
func (b *QueueBuilder) sizing(q *wire.PopQuery, pinned bool) {
	batch, parts := b.batch, b.partitions
	if pinned {
		// One partition by definition; the broker ignores partitions and
		// autopilot on this route.
		if b.batch != 0 {
			q.Batch = &batch
		} else if b.autopilotOff {
			one := 1
			q.Batch = &one
		}
		return
	}
	if b.autopilotOff {
		if b.batch == 0 {
			batch = 1
		}
		q.Batch = &batch
		if b.partitionsSet && parts > 1 {
			q.Partitions = &parts
		}
		return
	}
	if b.batch != 0 {
		q.Batch = &batch
	}
	if b.partitionsSet {
		q.Partitions = &parts
	}
	// A conflating pop is exempt from autopilot on the broker.
	q.Autopilot = !(b.batch != 0 && b.partitionsSet) && !b.conflation
}

// String describes the builder for logs.
func (b *QueueBuilder) String() string {
	var sb strings.Builder
	sb.WriteString("queue=" + b.queue)
	if b.partition != "" {
		sb.WriteString(" partition=" + b.partition)
	}
	if b.group != "" {
		sb.WriteString(" group=" + b.group)
	}
	return sb.String()
}
