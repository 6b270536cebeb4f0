package queen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/queen-go/queen/internal/wire"
)

// popMargin: the broker answers a long poll before the client gives up.
const popMargin = 5 * time.Second

// Pop takes one batch of messages and leases them to the caller, who acks
// each (Client.Ack) before the lease runs out; nothing to take is an empty
// slice. Bad options fail with ErrInvalidArgument before any request; a
// broker that cannot conflate, ErrConflationUnsupported; a discovery pop on
// 0.15.1, ErrNotSupported.
//
// A pop is never sent twice once it may have reached the broker: a lost
// answer is an error matching ErrOutcomeUnknown, and its messages come back
// after their lease (docs/RETRIES.md, "The transport"). A pop of a queue
// that does not exist answers empty; 2.x creates it unless the pop is
// pinned (Admin.GetQueue tells whether a queue exists).
func (b *QueueBuilder) Pop(ctx context.Context) ([]*Message, error) {
	r, err := b.popRequest()
	if err != nil {
		return nil, err
	}
	start := b.c.hooks.now()
	res, err := b.c.pop(ctx, r, b.conflation)
	var msgs []*Message
	if err == nil {
		msgs = res.messages
	}
	b.c.hooks.popped(ctx, b.queue, b.partition, r.query.ConsumerGroup, r.longPollWait(false), start, msgs, err)
	if err != nil {
		return nil, err
	}
	return msgs, nil
}

func (r *popRequest) longPollWait(nowait bool) time.Duration {
	if !r.wait || nowait {
		return 0
	}
	return time.Duration(r.waitMs) * time.Millisecond
}

// call is a once call: a second pop would answer empty while the first
// claim holds the messages.
func (r *popRequest) call(query string, nowait bool) call {
	cl := call{method: http.MethodGet, path: r.path, rawQuery: query, once: true, key: r.route}
	if r.wait && !nowait && !r.discover {
		cl.timeout = time.Duration(r.waitMs)*time.Millisecond + popMargin
	}
	return cl
}

type popResult struct {
	messages  []*Message
	leaseID   string
	partition string // of an answer without messages: the claimed partition
	autopilot *wire.AutopilotEcho
	// date is a pinned pop's Date header: the broker's clock, in seconds.
	date time.Time
}

func (c *Client) pop(ctx context.Context, r *popRequest, conflation bool) (*popResult, error) {
	withSub, err := c.withSubscription(ctx, r)
	if err != nil {
		return nil, err
	}
	query, err := c.popQuery(r, withSub, 0, false)
	if err != nil {
		return nil, err
	}
	res, err := c.popWith(ctx, r, query, conflation, 0, false)
	if err != nil {
		return nil, err
	}
	c.popAnswered(r, withSub, res)
	return res, nil
}

// popWith: attempts, when positive, bounds the attempts; nowait, the query
// asks the broker not to wait whatever r says.
func (c *Client) popWith(ctx context.Context, r *popRequest, query string, conflation bool, attempts int, nowait bool) (*popResult, error) {
	cl := r.call(query, nowait)
	cl.attempts = attempts
	resp, err := c.do(ctx, cl)
	if err != nil {
		var be *BrokerError
		if r.discover && errors.As(err, &be) && routeMissing(be) {
			// A generation without the discovery route answers 404
			// (wire.Generation.Serves: 0.15.1).
			return nil, fmt.Errorf("%w: namespace/task pop (GET %s answered %d): %w", ErrNotSupported, r.path, be.Status, err)
		}
		return nil, err
	}
	res := &popResult{}
	if resp.status != http.StatusNoContent && len(resp.body) > 0 {
		if res, err = c.decodePop(resp.body, r.path, conflation); err != nil {
			return nil, err
		}
	}
	for _, m := range res.messages {
		m.route = r.route
	}
	if r.pinned {
		if d, err := http.ParseTime(resp.header.Get("Date")); err == nil {
			res.date = d
		}
	}
	return res, nil
}

// readWire decodes with encoding/json/v2's strict defaults, whose fast path
// the hot path needs (docs/BENCHMARKS.md), then, after reset, as leniently
// as encoding/json would, so that no answer it reads is refused.
func readWire(body []byte, v any, reset func()) error {
	if err := jsonv2.Unmarshal(body, v); err == nil {
		return nil
	}
	reset()
	return jsonv2.Unmarshal(body, v, lenientJSON)
}

var lenientJSON = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

func (c *Client) decodePop(body []byte, path string, conflation bool) (*popResult, error) {
	size := bytes.Count(body, []byte(`"transactionId"`))
	pr := wire.PopResponse{Messages: make([]wire.PopMessage, 0, size)}
	if err := readWire(body, &pr, func() { pr = wire.PopResponse{Messages: make([]wire.PopMessage, 0, size)} }); err != nil {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Body: body,
			Message: "undecodable pop answer: " + err.Error()}) // a 2xx the client cannot read
	}
	if !pr.Success && pr.Error != "" && !wire.EmptyPopError(pr.Error) {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Body: body, Message: pr.Error}
	}
	// Checked before the 0.15.1 "empty" answers too: a broker without the
	// echo would hand out the whole backlog next.
	if conflation {
		if pr.Conflation == nil && pr.ConflationConflict == nil {
			return nil, fmt.Errorf("%w: answer to %s carries no conflation echo (%d messages withheld)",
				ErrConflationUnsupported, path, len(pr.Messages))
		}
		if pr.ConflationConflict != nil && *pr.ConflationConflict {
			c.log.Warn("queen: conflation policy of the group differs from the request; the group's stored policy applies",
				"path", path, "group", pr.ConsumerGroup)
		}
	}
	if !pr.Success && pr.Error != "" {
		return &popResult{}, nil // no_available_partition & co: nothing to take
	}
	res := &popResult{autopilot: pr.Autopilot, leaseID: pr.LeaseID}
	if len(pr.Messages) == 0 {
		res.partition = pr.Partition // for the warning of an empty claim
		return res, nil
	}
	res.messages = make([]*Message, len(pr.Messages))
	all := make([]Message, len(pr.Messages))
	for i := range pr.Messages {
		m := &all[i]
		fromReply(m, &pr.Messages[i], pr.Queue, res.leaseID)
		res.messages[i] = m
	}
	return res, nil
}
