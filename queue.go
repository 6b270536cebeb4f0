package queen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// QueueConfig holds the options of a queue (POST /api/v1/configure). A nil
// option is not sent (2.x keeps the current value; 0.15.1 replaces), a
// pointer to zero sends zero; set one with Ptr:
//
//	queen.QueueConfig{RetryLimit: queen.Ptr(5), DeadLetterQueue: queen.Ptr(true), Retention: queen.Ptr(7 * 24 * time.Hour)}
//
// Durations travel in whole seconds, or milliseconds where said, rounded
// up; a negative one, or one over 2^31-1 units, fails Execute with
// ErrInvalidOption before any request.
type QueueConfig struct {
	LeaseTime *time.Duration // how long a pop leases its messages
	// RetryLimit is how many failures a message may have and still come
	// back. A consume loop counts each message's failures; the broker, for
	// raw StatusFailed acks, counts per partition and group
	// (docs/RETRIES.md).
	RetryLimit        *int
	RetryDelay        *time.Duration // before a failed message comes back (milliseconds)
	Priority          *int           // orders queues of one namespace/task for discovery pops
	DelayedProcessing *time.Duration // hides each new message for that long
	// WindowBuffer holds back a partition's messages until it has been
	// quiet for that long.
	WindowBuffer       *time.Duration
	MaxSize            *int           // messages the queue holds at most
	TTL                *time.Duration // stored and reported; no broker applies it
	Retention          *time.Duration // how long messages are kept, pending ones too
	CompletedRetention *time.Duration // how long completed messages are kept
	RetentionEnabled   *bool          // turns Retention and CompletedRetention on
	// DeadLetterQueue keeps messages whose retries are spent, and those
	// acked dlq, in the dead-letter queue; with it and DLQAfterMaxRetries
	// both off, 2.x drops them.
	DeadLetterQueue    *bool
	DLQAfterMaxRetries *bool // dead-letters a message whose retries are spent
	EncryptionEnabled  *bool
	// MaxWaitTime is the age at which messages are dropped (2.x: for every
	// group, leased ones included, with no dead letter).
	MaxWaitTime *time.Duration
	// MinPopWaitTime lets a waiting pop hold an under-full batch that long
	// (2.x; milliseconds; at most a minute).
	MinPopWaitTime *time.Duration
	// DedupWindow is how long a repeated transaction id is answered
	// "duplicate" (2.x; default one hour). Zero turns deduplication off,
	// and with it the promise that a retried push is never stored twice.
	DedupWindow *time.Duration
	// RetentionSinkHold names the sink whose progress holds back retention
	// (2.x): letters, digits, '.', '_', '-', at most 64; "" turns it off.
	RetentionSinkHold *string
	// RetentionSinkHoldMax caps that hold (2.x): a minute to 365 days.
	RetentionSinkHoldMax *time.Duration
	// Namespace and Task tag the queue for discovery pops (Client.Namespace).
	Namespace string
	Task      string
}

// Ptr returns a pointer to v, for the optional fields of QueueConfig.
func Ptr[T any](v T) *T { return &v }

type durationOption struct {
	name string
	unit time.Duration
	d    **time.Duration
	wire **int
}

// durations is the one table of the duration options and their units.
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

// ceilUnits is the one rounding rule of durations sent to the broker
// (RenewFor and LeaseTime too): up, so a positive d is never sent as zero.
func ceilUnits(d, unit time.Duration) int64 {
	n := d / unit
	if d%unit != 0 {
		n++
	}
	return int64(n)
}

// maxBrokerUnits: 0.15.1 keeps duration options in 32-bit columns.
const maxBrokerUnits = math.MaxInt32

// brokerUnits converts d by ceilUnits, refusing what no broker stores.
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

// wire converts q to the broker's options; nil fields stay nil.
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

// Bounds of the retention sink options: the broker refuses the whole
// configure outside them.
const (
	maxSinkHoldName = 64
	minSinkHoldMax  = time.Minute
	maxSinkHoldMax  = 365 * 24 * time.Hour
)

// validate refuses before any request what the broker would refuse rather
// than clamp.
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
		if s := time.Duration(ceilUnits(*d, time.Second)) * time.Second; s < minSinkHoldMax || s > maxSinkHoldMax {
			return fmt.Errorf("%w: RetentionSinkHoldMax %v not in %v..%v", ErrInvalidOption, *d, minSinkHoldMax, maxSinkHoldMax)
		}
	}
	return nil
}

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
func (b *QueueBuilder) Config(cfg QueueConfig) *QueueBuilder {
	cp := *b
	cp.config = &cfg
	return &cp
}

// CreateBuilder is a pending create-or-configure of a queue. It is a value
// like QueueBuilder: Replace returns a changed copy.
type CreateBuilder struct {
	qb      *QueueBuilder
	replace bool
}

// Create prepares the creation of the queue, or the update of its options:
// on 2.x options not given keep their value. 0.15.1 always replaces: every
// option not given goes back to its default (LeaseTime 300 s, RetryLimit 3,
// RetryDelay 1 s, TTL 1 h, the rest off or 0, Namespace and Task ""), so
// send the full set for the same result on both. What TTL and retention do
// to pending messages: docs/ADMIN.md#ttl-retention-and-defaults. Send it
// with Execute.
func (b *QueueBuilder) Create() *CreateBuilder { return &CreateBuilder{qb: b} }

// Replace returns a copy of cb whose configure replaces every option
// (those not given go back to the broker's defaults) instead of merging;
// cb is unchanged.
func (cb *CreateBuilder) Replace() *CreateBuilder {
	cp := *cb
	cp.replace = true
	return &cp
}

// configureBody is wire.ConfigureRequest with a pointer namespace: an empty
// one is sent when nothing else would be, since 0.15.1 fails a configure
// with no namespace, task or known option (creating the queue all the
// same); 2.x ignores it when "options" is present.
type configureBody struct {
	Queue     string             `json:"queue"`
	Namespace *string            `json:"namespace,omitempty"`
	Task      string             `json:"task,omitempty"`
	Options   *wire.QueueOptions `json:"options"`
	Mode      string             `json:"mode,omitempty"`
}

// QueueInfo is a queue's configuration as the broker reports it.
type QueueInfo struct {
	Name string
	// Config is every option after the call, defaults included.
	Config QueueConfig
}

// Execute sends POST /api/v1/configure and returns the resulting
// configuration. A bad name or option fails before any request
// (ErrEmptyQueue, ErrInvalidName, ErrInvalidOption).
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
	// Deleted: the queue was removed. Existed is false for an unknown
	// queue, which is no error.
	Deleted, Existed bool
}

// Execute sends DELETE /api/v1/resources/queues/{queue}, removing the
// queue's messages, partitions and consumer-group positions.
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
	if out.Error != "" { // 0.15.1 answers failures with 200
		return DeleteResult{}, resp.refusal(http.MethodDelete, path, out.Error)
	}
	// 0.15.1 answers deleted:true, existed:false for an unknown queue.
	return DeleteResult{Deleted: out.Deleted && out.Existed, Existed: out.Existed}, nil
}
