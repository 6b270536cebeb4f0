package queen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// popMargin is added to a long poll's wait for the HTTP deadline, so that
// the broker answers before the client gives up.
const popMargin = 5 * time.Second

// emptyPopErrors are 0.15.1 answers (HTTP 200, success:false) that mean "no
// messages", not a failure.
var emptyPopErrors = map[string]bool{
	"no_available_partition": true,
	"partition_not_found":    true,
	"lease_held":             true,
}

// Pop takes one batch of messages and leases them to the caller, who acks
// each (Client.Ack) before the lease runs out. It returns an empty slice,
// not an error, when there is nothing to take (after waiting, unless
// Wait(false)). Bad options fail before any request with an error matching
// ErrInvalidArgument. A conflating pop answered by a broker that does not
// conflate fails with ErrConflationUnsupported and hands out nothing; a
// namespace/task pop against a broker without that route (0.15.1) fails
// with an error matching ErrNotSupported (and *BrokerError).
//
// A pop leases what it takes, so it is never sent twice once it may have
// reached the broker. It is retried (within the RetryPolicy's attempts)
// only when the broker surely did not serve it: a connection that could
// not be made, a 429, a 503 (unless its code is outcome_unknown). When its
// answer is lost (the connection failed, or ctx ended, after the request
// may have been received) or the broker answered a 5xx that may follow a
// claim (500, 502, 504), Pop returns an error matching ErrOutcomeUnknown
// that wraps the cause (errors.As finds the *BrokerError or the network
// error): messages may be leased to that lost claim until the lease
// expires, and are delivered again then. Nothing is lost; pop again, and
// expect them back after the lease time.
//
// A waiting pop (Wait(true), the default) is bounded like every other
// call: on a dead broker it returns the network error after
// RetryPolicy.MaxAttempts attempts. With the default policy (4 attempts,
// backoff from 200 ms) a broker that refuses connections fails the pop
// after 1.1 s to 1.7 s (measured 1.2 s to 1.6 s); a host that does not
// answer at all takes at most 4 attempts of the wait plus 5 s each.
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
	b.c.hooks.popped(ctx, b.queue, b.partition, r.query.ConsumerGroup, r.longPollWait(), start, msgs, err)
	if err != nil {
		return nil, err
	}
	return msgs, nil
}

// longPollWait is how long the broker may hold the pop open: zero when it
// does not wait.
func (r *popRequest) longPollWait() time.Duration {
	if !r.wait {
		return 0
	}
	return time.Duration(r.waitMs) * time.Millisecond
}

// call is the request of a pop with the query vals. A pop leases what it
// takes, so it is a once call: it is sent again only when it surely did
// not reach the broker (a refused connection, a 429, a 503 that is not
// outcome_unknown), and a failure after it may have reached the broker is
// an error matching ErrOutcomeUnknown, never a second pop that would
// answer "empty" while the first claim holds the messages (see Pop). A
// waiting pop's attempts get its wait plus popMargin each.
func (r *popRequest) call(vals url.Values) call {
	cl := call{method: http.MethodGet, path: r.path, query: vals, once: true}
	if r.wait && !r.discover {
		cl.timeout = time.Duration(r.waitMs)*time.Millisecond + popMargin
	}
	return cl
}

// popResult is one decoded pop answer.
type popResult struct {
	messages  []*Message
	leaseID   string
	partition string // of an answer without messages: the claimed partition
	autopilot *wire.AutopilotEcho
}

func (c *Client) pop(ctx context.Context, r *popRequest, conflation bool) (*popResult, error) {
	withSub, err := c.withSubscription(ctx, r)
	if err != nil {
		return nil, err
	}
	vals, err := c.popValues(r, withSub, 0)
	if err != nil {
		return nil, err
	}
	res, err := c.popWith(ctx, r, vals, conflation)
	if err != nil {
		return nil, err
	}
	c.popAnswered(r, withSub, res)
	return res, nil
}

// popWith sends one pop of r with the query vals and decodes its answer.
func (c *Client) popWith(ctx context.Context, r *popRequest, vals url.Values, conflation bool) (*popResult, error) {
	resp, err := c.do(ctx, r.call(vals))
	if err != nil {
		var be *BrokerError
		if r.discover && errors.As(err, &be) && routeMissing(be) {
			// 0.15.1 has no discovery route.
			return nil, fmt.Errorf("%w: namespace/task pop (GET %s answered %d): %w", ErrNotSupported, r.path, be.Status, err)
		}
		return nil, err
	}
	if resp.status == http.StatusNoContent || len(resp.body) == 0 {
		return &popResult{}, nil
	}
	if !conflation {
		if res, ok := decodePopFast(resp.body); ok {
			return res, nil
		}
	}
	return c.decodePop(resp.body, r.path, conflation)
}

// decodePop reads a 200 pop body of either broker generation.
func (c *Client) decodePop(body []byte, path string, conflation bool) (*popResult, error) {
	var pr wire.PopResponse
	if err := json.Unmarshal(body, &pr); err != nil {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Body: body,
			Message: "undecodable pop answer: " + err.Error()}
	}
	if !pr.Success && pr.Error != "" && !emptyPopErrors[pr.Error] {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Body: body, Message: pr.Error}
	}
	// A broker that conflates echoes it on every answer with a body, empty
	// ones included. Checked before the 0.15.1 "empty" answers too: such a
	// broker ignores conflation and would hand out the whole backlog next.
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
	res := &popResult{autopilot: pr.Autopilot}
	if pr.LeaseID != nil {
		res.leaseID = *pr.LeaseID
	}
	if len(pr.Messages) == 0 {
		res.partition = pr.Partition // for the warning of an empty claim
		return res, nil
	}
	res.messages = make([]*Message, len(pr.Messages))
	for i := range pr.Messages {
		res.messages[i] = messageFromWire(&pr.Messages[i], pr.Queue, res.leaseID)
	}
	return res, nil
}
