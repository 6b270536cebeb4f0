package queen

import (
	"context"
	"fmt"
	"net/url"
)

// consumeBroker is all the consume engine asks of a broker: three calls.
// The engine is written against it alone, so that each of its parts is
// tested against a fake (consume_fake_test.go), with no HTTP.
type consumeBroker interface {
	// pop sends one pop, its batch capped to max when max > 0, and returns
	// the messages it leased (none: an empty result, not an error). It is
	// one attempt: the engine retries, so that it sees (and reports) every
	// failure.
	pop(ctx context.Context, max int) (*popResult, error)
	// settle sends the outcomes of one pop in one ack request. A broker
	// that refuses some of them answers with an *AckError.
	settle(ctx context.Context, acks []Settlement) error
	// renew extends a lease to secs seconds from now (never shortening
	// it). alive false: the broker says the lease is gone.
	renew(ctx context.Context, leaseID string, secs int) (alive bool, err error)
}

// clientBroker is the consumeBroker of a Client: the pop of a builder,
// SettleBatch and the lease route.
type clientBroker struct {
	c          *Client
	req        *popRequest
	vals       url.Values // the encoded pop query, for pops the Limit does not cap
	group      string
	conflation bool
}

func newClientBroker(qb *QueueBuilder) (*clientBroker, error) {
	req, err := qb.popRequest()
	if err != nil {
		return nil, err
	}
	vals, err := req.query.Values()
	if err != nil {
		return nil, fmt.Errorf("queen: encode pop query: %w", err)
	}
	return &clientBroker{c: qb.c, req: req, vals: vals, group: qb.group, conflation: qb.conflation}, nil
}

func (b *clientBroker) pop(ctx context.Context, max int) (*popResult, error) {
	vals := b.vals
	if max > 0 {
		vals = b.capped(max)
	}
	return b.c.popQuery(ctx, b.req, vals, b.conflation, 1)
}

// capped is the pop query with its batch capped to n (what is left of the
// Limit), so that nothing is popped only to be given back.
func (b *clientBroker) capped(n int) url.Values {
	q := b.req.query
	switch {
	case q.Batch != nil && *q.Batch <= n:
		return b.vals
	case q.Batch == nil && n >= autopilotMaxBatch:
		return b.vals
	case q.Batch == nil:
		// The batch becomes a pin; autopilot still sizes the partitions
		// if they are not set (with both set no autopilot flag travels).
		q.Autopilot = q.Autopilot && q.Partitions == nil
	}
	q.Batch = &n
	vals, err := q.Values()
	if err != nil { // cannot happen: the same struct encoded once already
		return b.vals
	}
	return vals
}

func (b *clientBroker) settle(ctx context.Context, acks []Settlement) error {
	_, err := b.c.SettleBatch(ctx, acks, AckOptions{ConsumerGroup: b.group})
	return err
}

func (b *clientBroker) renew(ctx context.Context, leaseID string, secs int) (bool, error) {
	res, err := b.c.renewLease(ctx, leaseID, secs)
	if err != nil {
		return false, err
	}
	return res.Success, nil
}
