package queen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/internal/wire"
)

// The loop's retries: one layer for each kind of request, the loop's own.
// Each call of consumeBroker is one attempt (the transport does not
// retry it), so that the loop sees and reports (OnLoopError) every failure.
//
//   - pop: again after retryBackoff, until the loop stops (the outage,
//     consume_fetch.go);
//   - ack: again after retryBackoff while the failure is transient, with
//     what completed meanwhile: while the loop runs until it goes, after
//     a stop for up to settleTimeout (acked, consume_settle.go); each
//     attempt has settleTimeout;
//   - renew: again at the next tick (consume_lease.go): a renewal extends
//     the lease by three ticks, so two may fail in a row;
//   - the queue's settings: maxRuleReads answers (ruleFor,
//     consume_failures.go); a read that fails on the way is no answer,
//     and the next failure after a backoff (ruleBackoffMin doubling to
//     ruleBackoffMax) reads again.
const (
	brokerDownMin = 50 * time.Millisecond  // the first pause after a failure
	brokerDownMax = 200 * time.Millisecond // the longest: the loop resumes within about 0.2 s of a broker's restart
	settleTimeout = 15 * time.Second       // one ack attempt; how long a failing ack is sent again after a stop
	renewTimeout  = 10 * time.Second       // one renewal
	ruleTimeout   = 5 * time.Second        // one read of the queue's settings
	maxRuleReads  = 2
	// The pause after a read of the queue's settings that failed on the
	// way, before a failure reads them again.
	ruleBackoffMin = time.Second
	ruleBackoffMax = 30 * time.Second
)

// retryBackoff is the pause between the failed attempts of one request:
// brokerDownMin doubling to brokerDownMax, both within the Client's
// RetryPolicy, jittered and honouring Retry-After (transport.Backoff).
type retryBackoff struct {
	lo, hi   time.Duration
	failures int // in a row
}

func newRetryBackoff(p RetryPolicy) retryBackoff {
	b := retryBackoff{lo: brokerDownMin, hi: brokerDownMax}
	if p.MinBackoff > 0 {
		b.lo = min(p.MinBackoff, brokerDownMax)
	}
	if p.MaxBackoff > 0 {
		b.hi = min(p.MaxBackoff, brokerDownMax)
	}
	b.hi = max(b.hi, b.lo)
	return b
}

// failed counts one more failure and returns the pause before the next
// attempt.
func (b *retryBackoff) failed(err error) time.Duration {
	b.failures++
	return transport.Backoff(b.lo, b.hi, b.failures-1, retryAfterOf(err))
}

// reset ends a run of failures and says how many it had.
func (b *retryBackoff) reset() int {
	n := b.failures
	b.failures = 0
	return n
}

// consumeBroker is all the consume engine asks of a broker: four calls,
// each one attempt (the loop's retries, above). The engine is written
// against it alone, so that each of its parts is tested against a fake
// (consume_fake_test.go), with no HTTP.
type consumeBroker interface {
	// pop sends one pop, its batch capped to max when max > 0, and returns
	// the messages it leased (none: an empty result, not an error).
	// nowait: the broker answers at once, even when the pop is one that
	// waits for messages (consume_fetch.go says when).
	pop(ctx context.Context, max int, nowait bool) (*popResult, error)
	// settle sends outcomes (of any of the loop's pops) in one ack
	// request and returns the broker's answer per outcome (nil when it
	// gave none). A broker that refuses some of them answers with an
	// *AckError.
	settle(ctx context.Context, acks []Settlement) ([]AckResult, error)
	// retryRule reads the queue's retryLimit, retryDelay, leaseTime and
	// dead-letter flag. failed, when not nil, is a message that failed: a
	// broker whose queue view lacks them (0.15.1) is asked through it. A
	// queue the broker does not know is an error matching errQueueUnknown.
	retryRule(ctx context.Context, failed *Message) (retryRule, error)
	// renew extends a lease to secs seconds from now (never shortening
	// it). alive false: the broker says the lease is gone.
	renew(ctx context.Context, leaseID string, secs int) (alive bool, err error)
}

// clientBroker is the consumeBroker of a Client: the pop path of Pop
// (which decides what each pop carries: the group's start point as the
// broker's generation needs it, a batch on a broker that does not size
// pops),
// SettleBatch and the lease route.
type clientBroker struct {
	c                       *Client
	req                     *popRequest
	queue, partition, group string
	conflation              bool
}

func newClientBroker(qb *QueueBuilder) (*clientBroker, error) {
	req, err := qb.popRequest()
	if err != nil {
		return nil, err
	}
	if _, err := qb.c.popQuery(req, true, 0, false); err != nil {
		return nil, err
	}
	return &clientBroker{c: qb.c, req: req, queue: qb.queue, partition: qb.partition, group: qb.group, conflation: qb.conflation}, nil
}

// pop reports each pop to the Client's hooks (PopHook), as Pop does.
func (b *clientBroker) pop(ctx context.Context, max int, nowait bool) (*popResult, error) {
	start := b.c.hooks.now()
	res, err := b.sendPop(ctx, max, nowait)
	var msgs []*Message
	if err == nil {
		msgs = res.messages
	}
	b.c.hooks.popped(ctx, b.queue, b.partition, b.group, b.req.longPollWait(nowait), start, msgs, err)
	return res, err
}

func (b *clientBroker) sendPop(ctx context.Context, max int, nowait bool) (*popResult, error) {
	withSub, err := b.c.withSubscription(ctx, b.req)
	if err != nil {
		return nil, err
	}
	query, err := b.c.popQuery(b.req, withSub, max, nowait)
	if err != nil {
		return nil, err
	}
	res, err := b.c.popWith(ctx, b.req, query, b.conflation, 1, nowait)
	if err != nil {
		return nil, err
	}
	b.c.popAnswered(b.req, withSub, res)
	return res, nil
}

// settle sends one ack request; the sender reports it to the hooks
// (sendAcks) once it got an answer.
func (b *clientBroker) settle(ctx context.Context, acks []Settlement) ([]AckResult, error) {
	res, _, _, err := b.c.settleBatch(ctx, acks, AckOptions{ConsumerGroup: b.group}, 1)
	return res, err
}

// errQueueUnknown: the broker does not know the queue (yet).
var errQueueUnknown = errors.New("queen: the broker does not know the queue")

// errNoRetryLimit: the broker's view of the queue has no retryLimit.
var errNoRetryLimit = errors.New("queen: the broker's view of the queue has no retryLimit")

// transientRuleError says whether a read of the queue's settings failed
// on the way (no answer about the queue: read again later), rather than
// answered (an unknown queue, a view without retryLimit, a refusal that
// asking again cannot change).
func transientRuleError(err error) bool {
	switch {
	case errors.Is(err, errQueueUnknown), errors.Is(err, errNoRetryLimit), errors.Is(err, ErrClosed):
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true // one read's timeout
	}
	if be, ok := errors.AsType[*BrokerError](err); ok {
		return retryableStatus(be.Status)
	}
	return transport.RetryableErr(err)
}

// retryRule reads the queue's view (GET /api/v1/resources/queues/{queue});
// a 0.15.1 broker leaves the options out of it, and the view of a message
// (GET /api/v1/messages/{partitionId}/{transactionId}, its queueConfig) is
// asked instead, when there is a failed message to ask about.
func (b *clientBroker) retryRule(ctx context.Context, failed *Message) (retryRule, error) {
	var row wire.QueueRow
	_, err := b.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteQueue.Path(b.queue), attempts: 1}, &row)
	// 2.x answers 404; 0.15.1 answers 200 {"error":"Queue not found"}.
	if be, ok := errors.AsType[*BrokerError](err); ok && unknownQueue(be) {
		return retryRule{}, fmt.Errorf("%w: %s: %w", errQueueUnknown, b.queue, err)
	}
	if err != nil {
		return retryRule{}, err
	}
	q, _ := queueFromWire(&row)
	cfg := q.Config
	if cfg.RetryLimit == nil && failed != nil && failed.PartitionID != "" && failed.TransactionID != "" {
		var view struct {
			QueueConfig struct {
				LeaseTime  *int `json:"leaseTime"`
				RetryLimit *int `json:"retryLimit"`
				RetryDelay *int `json:"retryDelay"`
			} `json:"queueConfig"`
		}
		path := wire.RouteMessage.Path(failed.PartitionID, failed.TransactionID)
		if _, err := b.c.doObject(ctx, call{method: http.MethodGet, path: path, attempts: 1}, &view); err != nil {
			return retryRule{}, err
		}
		cfg.RetryLimit = view.QueueConfig.RetryLimit
		if v := view.QueueConfig.LeaseTime; v != nil {
			cfg.LeaseTime = Ptr(time.Duration(*v) * time.Second)
		}
		if v := view.QueueConfig.RetryDelay; v != nil {
			cfg.RetryDelay = Ptr(time.Duration(*v) * time.Millisecond)
		}
	}
	return ruleOf(cfg)
}

// ruleOf reads a retryRule out of a queue's configuration.
func ruleOf(cfg QueueConfig) (retryRule, error) {
	if cfg.RetryLimit == nil {
		return retryRule{}, errNoRetryLimit
	}
	r := retryRule{known: true, limit: max(*cfg.RetryLimit, 0)}
	if cfg.RetryDelay != nil {
		r.delay = max(*cfg.RetryDelay, 0)
	}
	if cfg.LeaseTime != nil {
		r.lease = max(*cfg.LeaseTime, 0)
	}
	// Off only when the view says so for both flags (a 2.x queue);
	// a view without them (0.15.1, which always dead-letters) is on.
	r.dlqOff = cfg.DeadLetterQueue != nil && !*cfg.DeadLetterQueue &&
		cfg.DLQAfterMaxRetries != nil && !*cfg.DLQAfterMaxRetries
	return r, nil
}

// renew reports each renewal, and a lost lease, to the Client's hooks. It
// goes with the key of the loop's pops, as their acks do: a loop pinned
// to a partition renews where it pops.
func (b *clientBroker) renew(ctx context.Context, leaseID string, secs int) (bool, error) {
	res, err := b.c.renewKeyed(ctx, leaseID, secs, b.queue, b.group, b.req.route, 1)
	if err != nil {
		return false, err
	}
	return res.Success, nil
}

// retryableStatus says whether a broker's answer of that status may change
// if the request is sent again: the client's one rule, transport.Retryable.
func retryableStatus(status int) bool { return transport.Retryable(status) }
