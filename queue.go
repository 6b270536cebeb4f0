package queen

import (
	"context"
	"fmt"
	"net/http"

	"github.com/queen-go/queen/internal/wire"
)

// QueueConfig holds the options of a queue, as the broker's configure route
// takes them. A nil field is not sent: the broker keeps its current value
// (or its default for a new queue). Use Ptr to set one:
//
//	queen.QueueConfig{RetryLimit: queen.Ptr(5), DeadLetterQueue: queen.Ptr(true)}
type QueueConfig struct {
	// LeaseTime is how long a pop leases its messages, in seconds.
	LeaseTime *int
	// RetryLimit is how many failed acks the broker takes for a partition
	// and consumer group before a failed ack dead-letters its message (or
	// drops it when the queue has no dead-letter queue). Both broker
	// generations count per partition and group, not per message: each
	// failed ack adds one, and the count goes back to zero only when a
	// leased batch of that partition is finished (every message of the
	// lease acked, none failed). A failed ack ends its lease unfinished, so
	// failures of different messages add up across the leases that follow
	// one another: with RetryLimit 2 and Batch(10), messages 1, 4 and 7 of
	// one partition failing once each dead-letter message 7 at its first
	// failure, with retryCount 2. Use Retry (StatusRetry) for a failure
	// that should not count, or Batch(1), whose leases end with each
	// message.
	RetryLimit *int
	// RetryDelay is how long a failed message waits before it comes back, in
	// milliseconds.
	RetryDelay *int
	// Priority orders queues of one namespace/task for discovery pops.
	Priority *int
	// DelayedProcessing hides each new message for that many seconds.
	DelayedProcessing *int
	// WindowBuffer holds back a partition's messages until it has been quiet
	// for that many seconds.
	WindowBuffer *int
	// MaxSize caps the number of messages the queue holds.
	MaxSize *int
	// TTL drops messages older than that many seconds.
	TTL *int
	// RetentionSeconds and CompletedRetentionSeconds say how long messages
	// (pending, and completed) are kept; RetentionEnabled turns retention on.
	RetentionSeconds          *int
	CompletedRetentionSeconds *int
	RetentionEnabled          *bool
	// DeadLetterQueue keeps messages whose failed ack found the retries
	// spent (see RetryLimit: that may be a message's first failure), and
	// those acked dlq, in the queue's dead-letter queue.
	DeadLetterQueue *bool
	// DLQAfterMaxRetries dead-letters a message whose failed ack finds
	// the partition's RetryLimit spent (see RetryLimit for how the broker
	// counts).
	DLQAfterMaxRetries *bool
	// EncryptionEnabled stores payloads encrypted.
	EncryptionEnabled *bool
	// MaxWaitTimeSeconds is the age in seconds at which messages are dropped
	// (on 2.x for every group, leased ones included, with no dead letter).
	MaxWaitTimeSeconds *int
	// MinPopWaitTime lets a waiting pop hold an under-full batch for up to
	// that many milliseconds so that it takes more messages at once (2.x;
	// the broker clamps it to 0..60000).
	MinPopWaitTime *int
	// DedupWindowSeconds is how long a repeated transaction id is answered
	// "duplicate" in its partition (2.x; default one hour). 0 turns
	// deduplication off, and with it the promise that a retried push is
	// never stored twice.
	DedupWindowSeconds *int
	// RetentionSinkHold names the data-lake sink whose progress holds back
	// retention (2.x): letters, digits, '.', '_' and '-', at most 64; ""
	// turns the hold off. Any other name fails Execute with
	// ErrInvalidOption.
	RetentionSinkHold *string
	// RetentionSinkHoldMaxSeconds caps how long that sink may hold
	// retention (2.x): 60 to 31536000 seconds, else Execute fails with
	// ErrInvalidOption.
	RetentionSinkHoldMaxSeconds *int
	// Namespace and Task tag the queue for discovery pops (Client.Namespace).
	Namespace string
	Task      string
}

// Ptr returns a pointer to v, for the optional fields of QueueConfig.
func Ptr[T any](v T) *T { return &v }

func (q *QueueConfig) wire() *wire.QueueOptions {
	return &wire.QueueOptions{
		LeaseTime: q.LeaseTime, RetryLimit: q.RetryLimit, RetryDelay: q.RetryDelay, Priority: q.Priority,
		DelayedProcessing: q.DelayedProcessing, WindowBuffer: q.WindowBuffer, MaxSize: q.MaxSize, TTL: q.TTL,
		RetentionSeconds: q.RetentionSeconds, CompletedRetentionSeconds: q.CompletedRetentionSeconds,
		RetentionEnabled: q.RetentionEnabled, DeadLetterQueue: q.DeadLetterQueue, DLQAfterMaxRetries: q.DLQAfterMaxRetries,
		EncryptionEnabled: q.EncryptionEnabled, MaxWaitTimeSeconds: q.MaxWaitTimeSeconds,
		MinPopWaitTime: q.MinPopWaitTime, DedupWindowSeconds: q.DedupWindowSeconds,
		RetentionSinkHold: q.RetentionSinkHold, RetentionSinkHoldMaxSeconds: q.RetentionSinkHoldMaxSeconds,
	}
}

// Bounds of the retention sink options; the broker refuses the whole
// configure outside them.
const (
	maxSinkHoldName       = 64
	minSinkHoldMaxSeconds = 60
	maxSinkHoldMaxSeconds = 31536000
)

// validate checks the options the broker refuses rather than clamps.
func (q *QueueConfig) validate() error {
	if h := q.RetentionSinkHold; h != nil {
		ok := len(*h) <= maxSinkHoldName
		for _, r := range *h {
			ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		}
		if !ok {
			return fmt.Errorf("%w: RetentionSinkHold %q: letters, digits, '.', '_' and '-', at most %d", ErrInvalidOption, *h, maxSinkHoldName)
		}
	}
	if s := q.RetentionSinkHoldMaxSeconds; s != nil && (*s < minSinkHoldMaxSeconds || *s > maxSinkHoldMaxSeconds) {
		return fmt.Errorf("%w: RetentionSinkHoldMaxSeconds %d not in %d..%d", ErrInvalidOption, *s, minSinkHoldMaxSeconds, maxSinkHoldMaxSeconds)
	}
	return nil
}

// queueConfigFromWire builds a QueueConfig from a broker's answer.
func queueConfigFromWire(o wire.QueueOptions, ns, task *string) QueueConfig {
	c := QueueConfig{
		LeaseTime: o.LeaseTime, RetryLimit: o.RetryLimit, RetryDelay: o.RetryDelay, Priority: o.Priority,
		DelayedProcessing: o.DelayedProcessing, WindowBuffer: o.WindowBuffer, MaxSize: o.MaxSize, TTL: o.TTL,
		RetentionSeconds: o.RetentionSeconds, CompletedRetentionSeconds: o.CompletedRetentionSeconds,
		RetentionEnabled: o.RetentionEnabled, DeadLetterQueue: o.DeadLetterQueue, DLQAfterMaxRetries: o.DLQAfterMaxRetries,
		EncryptionEnabled: o.EncryptionEnabled, MaxWaitTimeSeconds: o.MaxWaitTimeSeconds,
		MinPopWaitTime: o.MinPopWaitTime, DedupWindowSeconds: o.DedupWindowSeconds,
		RetentionSinkHold: o.RetentionSinkHold, RetentionSinkHoldMaxSeconds: o.RetentionSinkHoldMaxSeconds,
	}
	if ns != nil {
		c.Namespace = *ns
	}
	if task != nil {
		c.Task = *task
	}
	return c
}

// Config sets the options that Create sends.
func (b *QueueBuilder) Config(cfg QueueConfig) *QueueBuilder { b.config = &cfg; return b }

// CreateBuilder is a pending create-or-configure of a queue.
type CreateBuilder struct {
	qb      *QueueBuilder
	replace bool
}

// Create prepares the creation of the queue, or the update of its options
// if it exists. On a 2.x broker options not given keep their value (merge);
// a 0.15.1 broker always replaces, so send the full set there if you need
// the same result on both. Send it with Execute.
func (b *QueueBuilder) Create() *CreateBuilder { return &CreateBuilder{qb: b} }

// Replace makes the configure replace every option (those not given go back
// to the broker's defaults) instead of merging.
func (cb *CreateBuilder) Replace() *CreateBuilder { cb.replace = true; return cb }

// configureBody is the body of POST /api/v1/configure as this client sends
// it: wire.ConfigureRequest, except that the namespace is a pointer so that
// an empty one can be sent when nothing else would be. A 0.15.1 broker
// fails a configure that has neither a namespace, a task nor a known option
// (and creates the queue all the same); a 2.x broker ignores an empty
// top-level namespace when "options" is present, so there it changes
// nothing.
type configureBody struct {
	Queue     string             `json:"queue"`
	Namespace *string            `json:"namespace,omitempty"`
	Task      string             `json:"task,omitempty"`
	Options   *wire.QueueOptions `json:"options"`
	Mode      string             `json:"mode,omitempty"`
}

// QueueInfo is a queue's configuration as the broker reports it.
type QueueInfo struct {
	// Name is the queue.
	Name string
	// Config is the queue's configuration after the call, as the broker
	// reports it (every option it knows, defaults included).
	Config QueueConfig
}

// Execute sends POST /api/v1/configure and returns the queue's resulting
// configuration. An empty queue name (ErrEmptyQueue) or a retention sink
// option the broker would refuse (ErrInvalidOption) fails before any
// request.
func (cb *CreateBuilder) Execute(ctx context.Context) (QueueInfo, error) {
	b := cb.qb
	if err := b.checkCreate(); err != nil {
		return QueueInfo{}, err
	}
	req := configureBody{Queue: b.queue, Options: &wire.QueueOptions{}}
	var ns string
	if b.config != nil {
		req.Options = b.config.wire()
		ns, req.Task = b.config.Namespace, b.config.Task
	}
	if ns != "" || (req.Task == "" && *req.Options == (wire.QueueOptions{})) {
		req.Namespace = &ns
	}
	if cb.replace {
		req.Mode = wire.ConfigureReplace
	}
	var out wire.ConfigureResponse
	resp, err := b.c.doJSON(ctx, call{method: http.MethodPost, path: wire.RouteConfigure.Path(), body: req}, &out)
	if err != nil {
		return QueueInfo{}, err
	}
	if out.Error != "" || !out.Configured {
		// 0.15.1 answers its failures with HTTP 200 and {"error": ...}.
		return QueueInfo{}, resp.refusal(http.MethodPost, wire.RouteConfigure.Path(),
			orDefault(out.Error, "configure answer does not say configured"))
	}
	name := out.Queue
	if name == "" {
		name = b.queue
	}
	return QueueInfo{Name: name, Config: queueConfigFromWire(out.Options, out.Namespace, out.Task)}, nil
}

// DeleteBuilder is a pending deletion of a queue.
type DeleteBuilder struct{ qb *QueueBuilder }

// Delete prepares the deletion of the queue with all its messages and
// consumer-group positions. Send it with Execute.
func (b *QueueBuilder) Delete() *DeleteBuilder { return &DeleteBuilder{qb: b} }

// DeleteResult says what a delete did.
type DeleteResult struct {
	// Deleted is true when the queue was removed; Existed false when there
	// was no such queue (not an error).
	Deleted, Existed bool
}

// Execute sends DELETE /api/v1/resources/queues/{queue}.
func (d *DeleteBuilder) Execute(ctx context.Context) (DeleteResult, error) {
	b := d.qb
	if err := checkName(queueName, b.queue); err != nil {
		return DeleteResult{}, err
	}
	var out struct {
		wire.DeleteQueueResponse
		Error string `json:"error"`
	}
	path := wire.RouteQueue.Path(b.queue)
	resp, err := b.c.doJSON(ctx, call{method: http.MethodDelete, path: path}, &out)
	if err != nil {
		return DeleteResult{}, err
	}
	if out.Error != "" {
		// A broker error answered with HTTP 200 (0.15.1).
		return DeleteResult{}, resp.refusal(http.MethodDelete, path, out.Error)
	}
	return DeleteResult{Deleted: out.Deleted, Existed: out.Existed}, nil
}
