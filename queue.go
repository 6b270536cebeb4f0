package queen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// QueueConfig holds the options of a queue, as the broker's configure route
// takes them.
//
// Every option is a pointer, and a pointer has three states that the
// broker tells apart: nil is not sent (a 2.x broker keeps the queue's
// current value, or its default for a new queue; 0.15.1 always replaces),
// a pointer to zero sends zero (DedupWindow zero turns deduplication off),
// and a pointer to a value sends it. Set one with Ptr (or the built-in
// new, which takes an expression since Go 1.26):
//
//	queen.QueueConfig{RetryLimit: queen.Ptr(5), DeadLetterQueue: queen.Ptr(true), Retention: queen.Ptr(7 * 24 * time.Hour)}
//
// (A zero duration is queen.Ptr(time.Duration(0)): queen.Ptr(0) is an *int
// and does not compile there.)
//
// Pointers rather than an option type of this package: they are what
// encoding/json and the Go SDKs of other brokers use for "optional", they
// need nothing but Ptr, a nil check reads them, and the broker's answers
// (QueueInfo.Config, Admin.GetQueue) come back in the same form. Namespace
// and Task are plain strings: a broker reads an empty one as not given,
// so they have only two states.
//
// Durations travel in the broker's unit, whole seconds or whole
// milliseconds depending on the option, rounded up the way RenewFor
// rounds: 1500*time.Millisecond is sent as 2 seconds for LeaseTime, and a
// positive duration is never sent as zero. Execute fails with
// ErrInvalidOption before any request for a negative duration, or one
// whose count of the broker's units does not fit in a 32-bit integer
// (0.15.1 keeps each in a 32-bit column). The broker's answers are whole
// units and read back exactly.
type QueueConfig struct {
	// LeaseTime is how long a pop leases its messages (whole seconds on
	// the wire).
	LeaseTime *time.Duration
	// RetryLimit is how many failures a message may have and still come
	// back: a consume loop dead-letters a message at its RetryLimit + 1st
	// failure, counting each message's own failures (see
	// ConsumeBuilder.OnError, and where that ends). The broker itself
	// counts otherwise, which is what raw StatusFailed acks (Client.Ack,
	// Settle, SettleBatch) get: both generations count failed acks per
	// partition and consumer group, not per message, and reset the count
	// only when a leased batch of that partition is finished (every
	// message acked, none failed; 2.x also when the count dead-letters).
	// A failed ack ends its lease unfinished, so failures of different
	// messages add up: with RetryLimit 2 and Batch(10), messages 1, 4 and 7
	// failing once each dead-letter message 7 at its first failure, with
	// retryCount 2; on 0.15.1, after a dead-letter, the partition's next
	// failed ack dead-letters at once, Batch(1) included.
	RetryLimit *int
	// RetryDelay is how long a failed message waits before it comes back
	// (whole milliseconds on the wire).
	RetryDelay *time.Duration
	// Priority orders queues of one namespace/task for discovery pops.
	Priority *int
	// DelayedProcessing hides each new message for that long (whole
	// seconds on the wire).
	DelayedProcessing *time.Duration
	// WindowBuffer holds back a partition's messages until it has been
	// quiet for that long (whole seconds on the wire).
	WindowBuffer *time.Duration
	// MaxSize caps the number of messages the queue holds.
	MaxSize *int
	// TTL drops messages older than that (whole seconds on the wire).
	TTL *time.Duration
	// Retention is how long pending messages are kept (whole seconds on
	// the wire); RetentionEnabled turns retention on.
	Retention *time.Duration
	// CompletedRetention is how long completed messages are kept (whole
	// seconds on the wire).
	CompletedRetention *time.Duration
	// RetentionEnabled turns retention (Retention, CompletedRetention) on.
	RetentionEnabled *bool
	// DeadLetterQueue keeps messages whose retries are spent (see
	// RetryLimit), and those acked dlq, in the queue's dead-letter queue.
	// On 2.x with it and DLQAfterMaxRetries off, a message whose retries
	// are spent is dropped.
	DeadLetterQueue *bool
	// DLQAfterMaxRetries dead-letters a message whose retries are spent
	// (see RetryLimit for who counts them, and how).
	DLQAfterMaxRetries *bool
	// EncryptionEnabled stores payloads encrypted.
	EncryptionEnabled *bool
	// MaxWaitTime is the age at which messages are dropped (on 2.x for
	// every group, leased ones included, with no dead letter; whole
	// seconds on the wire).
	MaxWaitTime *time.Duration
	// MinPopWaitTime lets a waiting pop hold an under-full batch for up to
	// that long so that it takes more messages at once (2.x; whole
	// milliseconds on the wire; the broker clamps it to at most a minute).
	MinPopWaitTime *time.Duration
	// DedupWindow is how long a repeated transaction id is answered
	// "duplicate" in its partition (2.x; default one hour; whole seconds
	// on the wire). Zero turns deduplication off, and with it the promise
	// that a retried push is never stored twice.
	DedupWindow *time.Duration
	// RetentionSinkHold names the data-lake sink whose progress holds back
	// retention (2.x): letters, digits, '.', '_' and '-', at most 64; ""
	// turns the hold off. Any other name fails Execute with
	// ErrInvalidOption.
	RetentionSinkHold *string
	// RetentionSinkHoldMax caps how long that sink may hold retention
	// (2.x; whole seconds on the wire): from a minute to 365 days after
	// rounding, else Execute fails with ErrInvalidOption.
	RetentionSinkHoldMax *time.Duration
	// Namespace and Task tag the queue for discovery pops (Client.Namespace).
	Namespace string
	Task      string
}

// Ptr returns a pointer to v, for the optional fields of QueueConfig.
func Ptr[T any](v T) *T { return &v }

// A duration option of QueueConfig: its name, its broker's unit, its field
// and its field on the wire.
type durationOption struct {
	name string
	unit time.Duration
	d    **time.Duration
	wire **int
}

// durations pairs each duration option of q with its field of o, in the
// broker's unit (the one table of those units).
func (q *QueueConfig) durations(o *wire.QueueOptions) []durationOption {
	return []durationOption{
		{"LeaseTime", time.Second, &q.LeaseTime, &o.LeaseTime},
		{"RetryDelay", time.Millisecond, &q.RetryDelay, &o.RetryDelay},
		{"DelayedProcessing", time.Second, &q.DelayedProcessing, &o.DelayedProcessing},
		{"WindowBuffer", time.Second, &q.WindowBuffer, &o.WindowBuffer},
		{"TTL", time.Second, &q.TTL, &o.TTL},
		{"Retention", time.Second, &q.Retention, &o.RetentionSeconds},
		{"CompletedRetention", time.Second, &q.CompletedRetention, &o.CompletedRetentionSeconds},
		{"MaxWaitTime", time.Second, &q.MaxWaitTime, &o.MaxWaitTimeSeconds},
		{"MinPopWaitTime", time.Millisecond, &q.MinPopWaitTime, &o.MinPopWaitTime},
		{"DedupWindow", time.Second, &q.DedupWindow, &o.DedupWindowSeconds},
		{"RetentionSinkHoldMax", time.Second, &q.RetentionSinkHoldMax, &o.RetentionSinkHoldMaxSeconds},
	}
}

// ceilUnits is the one rounding rule of durations sent to the broker: d in
// whole units, rounded up, so that a positive duration is never sent as
// zero. RenewFor and QueueBuilder.LeaseTime use it too. d must not be
// negative.
func ceilUnits(d, unit time.Duration) int64 {
	n := d / unit
	if d%unit != 0 {
		n++
	}
	return int64(n)
}

// maxBrokerUnits is the largest count of units a broker stores for a
// duration option: its columns are 32-bit integers.
const maxBrokerUnits = math.MaxInt32

// brokerUnits converts the duration option name to the broker's unit by
// ceilUnits, refusing with ErrInvalidOption a negative duration or one
// that the broker cannot store.
func brokerUnits(name string, d, unit time.Duration) (int, error) {
	if d < 0 {
		return 0, fmt.Errorf("%w: %s %v must not be negative", ErrInvalidOption, name, d)
	}
	n := ceilUnits(d, unit)
	if n > maxBrokerUnits {
		return 0, fmt.Errorf("%w: %s %v is more than the broker stores (%v)", ErrInvalidOption, name, d, time.Duration(maxBrokerUnits)*unit)
	}
	return int(n), nil
}

// wire converts q to the broker's options and units; nil fields stay nil.
// It refuses what validate refuses of the durations.
func (q *QueueConfig) wire() (*wire.QueueOptions, error) {
	o := &wire.QueueOptions{
		RetryLimit: q.RetryLimit, Priority: q.Priority, MaxSize: q.MaxSize,
		RetentionEnabled: q.RetentionEnabled, DeadLetterQueue: q.DeadLetterQueue, DLQAfterMaxRetries: q.DLQAfterMaxRetries,
		EncryptionEnabled: q.EncryptionEnabled, RetentionSinkHold: q.RetentionSinkHold,
	}
	for _, f := range q.durations(o) {
		if *f.d == nil {
			continue
		}
		n, err := brokerUnits(f.name, **f.d, f.unit)
		if err != nil {
			return nil, err
		}
		*f.wire = &n
	}
	return o, nil
}

// Bounds of the retention sink options; the broker refuses the whole
// configure outside them.
const (
	maxSinkHoldName = 64
	minSinkHoldMax  = time.Minute
	maxSinkHoldMax  = 365 * 24 * time.Hour
)

// validate checks what Execute refuses before any request: a negative
// duration or one the broker cannot store, and the options the broker
// refuses rather than clamps.
func (q *QueueConfig) validate() error {
	for _, f := range q.durations(&wire.QueueOptions{}) {
		if *f.d != nil {
			if _, err := brokerUnits(f.name, **f.d, f.unit); err != nil {
				return err
			}
		}
	}
	if h := q.RetentionSinkHold; h != nil {
		ok := len(*h) <= maxSinkHoldName
		for _, r := range *h {
			ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		}
		if !ok {
			return fmt.Errorf("%w: RetentionSinkHold %q: letters, digits, '.', '_' and '-', at most %d", ErrInvalidOption, *h, maxSinkHoldName)
		}
	}
	if d := q.RetentionSinkHoldMax; d != nil {
		// The bounds are whole seconds: compare what is sent.
		if s := time.Duration(ceilUnits(*d, time.Second)) * time.Second; s < minSinkHoldMax || s > maxSinkHoldMax {
			return fmt.Errorf("%w: RetentionSinkHoldMax %v not in %v..%v", ErrInvalidOption, *d, minSinkHoldMax, maxSinkHoldMax)
		}
	}
	return nil
}

// queueConfigFromWire builds a QueueConfig from a broker's answer, its
// whole units read back as durations.
func queueConfigFromWire(o wire.QueueOptions, ns, task *string) QueueConfig {
	c := QueueConfig{
		RetryLimit: o.RetryLimit, Priority: o.Priority, MaxSize: o.MaxSize,
		RetentionEnabled: o.RetentionEnabled, DeadLetterQueue: o.DeadLetterQueue, DLQAfterMaxRetries: o.DLQAfterMaxRetries,
		EncryptionEnabled: o.EncryptionEnabled, RetentionSinkHold: o.RetentionSinkHold,
	}
	for _, f := range c.durations(&o) {
		if n := *f.wire; n != nil {
			d := time.Duration(*n) * f.unit
			*f.d = &d
		}
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
// configuration. An empty queue name (ErrEmptyQueue), a negative duration
// or one the broker cannot store, or a retention sink option the broker
// would refuse (ErrInvalidOption) fails before any request.
func (cb *CreateBuilder) Execute(ctx context.Context) (QueueInfo, error) {
	b := cb.qb
	err := b.checkCreate()
	if err != nil {
		return QueueInfo{}, err
	}
	req := configureBody{Queue: b.queue, Options: &wire.QueueOptions{}}
	var ns string
	if b.config != nil {
		if req.Options, err = b.config.wire(); err != nil {
			return QueueInfo{}, err
		}
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
	// A 0.15.1 broker answers deleted:true for a queue it did not have
	// (existed:false): nothing was removed.
	return DeleteResult{Deleted: out.Deleted && out.Existed, Existed: out.Existed}, nil
}
