package queen

import (
	"context"
)

// consumeBroker is all the consume engine asks of a broker: three calls.
// The engine is written against it alone, so that each of its parts is
// tested against a fake (consume_fake_test.go), with no HTTP.
type consumeBroker interface {
	// pop sends one pop, its batch capped to max when max > 0, and returns
	// the messages it leased (none: an empty result, not an error). It is
	// one attempt: the engine retries, so that it sees (and reports) every
	// failure. nowait: the broker answers at once, even when the pop is
	// one that waits for messages (consume_fetch.go says when).
	pop(ctx context.Context, max int, nowait bool) (*popResult, error)
	// settle sends the outcomes of one pop in one ack request. A broker
	// that refuses some of them answers with an *AckError.
	settle(ctx context.Context, acks []Settlement) error
	// renew extends a lease to secs seconds from now (never shortening
	// it). alive false: the broker says the lease is gone.
	renew(ctx context.Context, leaseID string, secs int) (alive bool, err error)
}

// clientBroker is the consumeBroker of a Client: the pop path of Pop
// (which decides what each pop carries: the group's start point only until
// the group is registered, a batch on a broker that does not size pops),
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

// settle sends one ack request; the settler reports the whole settlement
// (its retries included) to the hooks once.
func (b *clientBroker) settle(ctx context.Context, acks []Settlement) error {
	_, _, _, err := b.c.settleBatch(ctx, acks, AckOptions{ConsumerGroup: b.group})
	return err
}

// renew reports each renewal, and a lost lease, to the Client's hooks.
func (b *clientBroker) renew(ctx context.Context, leaseID string, secs int) (bool, error) {
	res, err := b.c.renewLeaseOf(ctx, leaseID, secs, b.queue, b.group)
	if err != nil {
		return false, err
	}
	return res.Success, nil
}
