package queen

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// SubscriptionMode says where a new consumer group starts reading; a group
// that exists moves only with a seek.
type SubscriptionMode string

const (
	SubscriptionModeNew SubscriptionMode = "new" // only what is pushed later
	SubscriptionModeAll SubscriptionMode = "all" // from the oldest kept message
)

// Limits of the pop options.
const (
	MaxPartitions        = 64    // the most partitions one pop may take
	MaxTimeoutMillis     = 60000 // the longest long poll the broker allows
	DefaultTimeoutMillis = 30000 // the long poll when TimeoutMillis is not set
)

// QueueBuilder names a queue (and optionally a partition) and collects the
// options of a pop or a consume loop; its setters chain:
//
//	msgs, err := client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Pop(ctx)
//
// A QueueBuilder is a value: every setter returns a changed copy and
// leaves b unchanged, so a builder kept (in a struct field, say) may be
// shared by goroutines and derived from, and a setter whose result is
// dropped does nothing. Setters only record (the last call wins); each
// operation reads the builder it was called on and checks the options and
// names it uses when it runs, failing with ErrInvalidArgument before any
// request. Pop may be called again.
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

// Namespace starts a builder for a discovery pop (GET /api/v1/pop) across
// the queues configured with this namespace (and, with Task, that task).
func (c *Client) Namespace(namespace string) *QueueBuilder {
	return &QueueBuilder{c: c, namespace: namespace}
}

// Task starts a builder for a discovery pop across the queues configured
// with this task.
func (c *Client) Task(task string) *QueueBuilder {
	return &QueueBuilder{c: c, task: task}
}

// Task narrows a discovery pop (started with Client.Namespace) to a task.
// On a builder of a named queue it fails Pop with ErrInvalidOption.
func (b *QueueBuilder) Task(task string) *QueueBuilder {
	cp := *b
	cp.task = task
	return &cp
}

// Partition returns a copy of b pinned to one partition for pushes and
// pops (Partitions and autopilot then do not apply); b is unchanged.
func (b *QueueBuilder) Partition(name string) *QueueBuilder {
	cp := *b
	cp.partition = name
	return &cp
}

// Group sets the consumer group: every group gets every message. Without
// one, queue mode: each message goes to one worker.
func (b *QueueBuilder) Group(name string) *QueueBuilder {
	cp := *b
	cp.group = name
	return &cp
}

// SubscriptionMode sets where the group starts if this is its first pop
// (default SubscriptionModeNew, or SubscriptionModeAll with
// SubscriptionFrom). Without a Group, SubscriptionModeNew fails Pop with
// ErrInvalidSubscription. Before a group's first pop the Client may ask the
// broker (GET /health; on 0.15.1 the group's view): if that fails, the pop
// fails and nothing is popped. On 2.x, once a pinned pop of a group in mode
// "new" is answered, its pops carry that time instead (up to a second
// before it may be read again). Which pops carry the start point, on each
// generation: docs/ARCHITECTURE.md.
func (b *QueueBuilder) SubscriptionMode(m SubscriptionMode) *QueueBuilder {
	cp := *b
	cp.subMode = m
	return &cp
}

// SubscriptionFrom starts a new group at the first message pushed at or
// after ts, an RFC 3339 time such as "2026-10-22T00:00:00Z", or "now".
// Without a Group, or if ts is not a time, Pop fails with
// ErrInvalidSubscription.
func (b *QueueBuilder) SubscriptionFrom(ts string) *QueueBuilder {
	cp := *b
	cp.subFrom = ts
	return &cp
}

// Batch sets the most messages one pop takes across partitions, 1 to
// MaxBatch; 0 leaves it to the broker's autopilot (LegacyBatch on a broker
// without one, such as 0.15.1).
func (b *QueueBuilder) Batch(n int) *QueueBuilder {
	cp := *b
	cp.batch = n
	return &cp
}

// Partitions lets one pop take messages from up to n partitions (1 to
// MaxPartitions) under one lease, Batch in all.
func (b *QueueBuilder) Partitions(n int) *QueueBuilder {
	cp := *b
	cp.partitions, cp.partitionsSet = n, true
	return &cp
}

// Wait sets whether a pop long polls for up to TimeoutMillis (default
// true) instead of returning empty.
func (b *QueueBuilder) Wait(wait bool) *QueueBuilder {
	cp := *b
	cp.wait, cp.waitSet = wait, true
	return &cp
}

// TimeoutMillis sets how long a waiting pop waits (default
// DefaultTimeoutMillis, at most MaxTimeoutMillis).
func (b *QueueBuilder) TimeoutMillis(ms int) *QueueBuilder {
	cp := *b
	cp.timeoutMs, cp.timeoutSet = ms, true
	return &cp
}

// Autopilot turns on (the default) or off the broker's choice of Batch
// and Partitions when they are not set. Off, the default is one message.
func (b *QueueBuilder) Autopilot(on bool) *QueueBuilder {
	cp := *b
	cp.autopilotOff = !on
	return &cp
}

// Conflation(true) hands the group only the newest message of each
// partition; an ack retires everything older. It needs a Group, excludes
// CommitOnDelivery, and is decided by the group's first pop.
func (b *QueueBuilder) Conflation(on bool) *QueueBuilder {
	cp := *b
	cp.conflation = on
	return &cp
}

// CommitOnDelivery(true) moves the cursor as messages are handed out: no
// lease, no ack, at-most-once. Pop only.
func (b *QueueBuilder) CommitOnDelivery(on bool) *QueueBuilder {
	cp := *b
	cp.commitOnDelivery = on
	return &cp
}

// LeaseTime overrides the queue's LeaseTime for this builder's pops, in
// whole seconds rounded up (2.x; 0.15.1 ignores it); 0 keeps the queue's. A
// negative or too large one fails Pop and Consume with ErrInvalidOption.
func (b *QueueBuilder) LeaseTime(d time.Duration) *QueueBuilder {
	cp := *b
	cp.lease = d
	return &cp
}

// Each makes a consume loop call its handler once per message, in partition
// order, instead of once per batch.
func (b *QueueBuilder) Each() *QueueBuilder {
	cp := *b
	cp.each = true
	return &cp
}

// AutoAck sets whether a consume loop acks for the handler (default true).
// With false the handler acks itself; an error it returns is still the
// loop's to handle (retried in place, then dead-lettered).
func (b *QueueBuilder) AutoAck(on bool) *QueueBuilder {
	cp := *b
	cp.autoAckOff = !on
	return &cp
}

// RenewLease(true, ms) renews a consume loop's leases every ms
// milliseconds (at least MinRenewMillis, else ErrInvalidOption) until the
// answer to their last ack, each time to about 3·ms from now
// (docs/CONSUME.md, "Lease renewal").
func (b *QueueBuilder) RenewLease(on bool, everyMillis int) *QueueBuilder {
	cp := *b
	cp.renew, cp.renewMs = on, everyMillis
	return &cp
}

// Concurrency runs up to n handlers of a consume loop at once (default 1,
// under 1 ErrInvalidOption), never two on one partition; at most n pops are
// in flight or handled, 2n with pops whose failed message waits for its
// retry (docs/CONSUME.md, "Pops").
func (b *QueueBuilder) Concurrency(n int) *QueueBuilder {
	cp := *b
	cp.concurrency, cp.concurrencySet = n, true
	return &cp
}

// Limit stops a consume loop after n handler calls in all (a retry in
// place is one), once their outcomes are settled (0: no limit; negative:
// ErrInvalidOption).
func (b *QueueBuilder) Limit(n int) *QueueBuilder {
	cp := *b
	cp.limit = n
	return &cp
}

// IdleMillis stops a consume loop after ms milliseconds with no message in
// hand, counted once a pop was answered (or failed): a first pop slower
// than ms is waited for (0: never; negative: ErrInvalidOption).
func (b *QueueBuilder) IdleMillis(ms int) *QueueBuilder {
	cp := *b
	cp.idleMs = ms
	return &cp
}

type popRequest struct {
	path     string
	queue    string
	query    wire.PopQuery // with the group's start point, if any
	wait     bool
	waitMs   int
	discover bool
	pinned   bool   // the pop names its partition
	route    string // routing key (popKey)
	// encoded caches the encoded query by variant bits (popQuery).
	encoded [16]atomic.Pointer[encodedQuery]
}

// popRequest sends nothing; every error matches ErrInvalidArgument.
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
		// Brokers disagree on the default mode (2.x "new", 0.15.1 "all").
		// With a time, "all": should a broker let the mode win, the group
		// reads more rather than skipping what it asked for.
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

// sizing: unset knobs are omitted with autopilot=true; with both set no
// autopilot flag travels; autopilot off always sends a batch.
func (b *QueueBuilder) sizing(q *wire.PopQuery, pinned bool) {
	batch, parts := b.batch, b.partitions
	if pinned {
		// The broker ignores partitions and autopilot on this route.
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
