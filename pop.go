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

// popMargin is added to a long poll's wait for the HTTP deadline, so that
// the broker answers before the client gives up.
const popMargin = 5 * time.Second

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
// after 1.1 s to 1.7 s; a host that does not answer at all takes at most
// 4 attempts of the wait plus 5 s each.
//
// A mistyped queue name is not an error: on a 2.x broker a pop of a queue
// that does not exist creates it, with the broker's default configuration,
// and answers empty (a waiting pop waits its whole timeout); a pop pinned
// to a partition (Partition) creates nothing. A 0.15.1 broker creates no
// queue on a pop and answers empty. The broker cannot be told not to
// create it; Admin.GetQueue tells whether a queue exists.
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

// longPollWait is how long the broker may hold the pop open: zero when it
// does not wait (nowait: sent as a pop that does not, see popQuery).
func (r *popRequest) longPollWait(nowait bool) time.Duration {
	if !r.wait || nowait {
		return 0
	}
	return time.Duration(r.waitMs) * time.Millisecond
}

// call is the request of a pop with the encoded query. A pop leases what it
// takes, so it is a once call: it is sent again only when it surely did
// not reach the broker (a refused connection, a 429, a 503 that is not
// outcome_unknown), and a failure after it may have reached the broker is
// an error matching ErrOutcomeUnknown, never a second pop that would
// answer "empty" while the first claim holds the messages (see Pop). A
// waiting pop's attempts get its wait plus popMargin each; a pop sent
// without waiting (nowait), the client's usual timeout.
func (r *popRequest) call(query string, nowait bool) call {
	cl := call{method: http.MethodGet, path: r.path, rawQuery: query, once: true, key: r.route}
	if r.wait && !nowait && !r.discover {
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
	// date is the answer's Date header (a pinned pop's only; zero when
	// absent): the broker's clock, in whole seconds.
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

// popWith sends one pop of r with the encoded query and decodes its answer.
// attempts, when positive, bounds the attempts (the consume loop retries
// on its own, and so sees every failure). nowait: the query asks the
// broker not to wait (see popQuery), whatever r says.
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

// The hot path (pop answers, the loop's acks) reads broker JSON with
// github.com/go-json-experiment/json (the API that becomes
// encoding/json/v2): encoding/json reads a pop of 100 messages (each with
// its Data map) too slowly for the consume loop to keep up with a bare
// net/http loop; the v2 decoder does (docs/BENCHMARKS.md).
//
// readWire reads body into v with v2's defaults first: a body without
// duplicate names and with valid UTF-8 (what a broker that stores JSONB
// sends) takes the decoder's fast path for Data's map[string]any, which
// it cannot take while duplicate names are allowed. A body that the
// defaults refuse is read again, after reset, as leniently as
// encoding/json reads it (the last of duplicate names wins, invalid UTF-8
// becomes U+FFFD), so that no answer encoding/json would read is refused.
func readWire(body []byte, v any, reset func()) error {
	if err := jsonv2.Unmarshal(body, v); err == nil {
		return nil
	}
	reset()
	return jsonv2.Unmarshal(body, v, lenientJSON)
}

// lenientJSON are the options of readWire's second reading.
var lenientJSON = jsonv2.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// decodePop reads a 200 pop body of either broker generation.
func (c *Client) decodePop(body []byte, path string, conflation bool) (*popResult, error) {
	// Room for the messages up front (a pop of 100 would else grow the
	// slice seven times).
	size := bytes.Count(body, []byte(`"transactionId"`))
	pr := wire.PopResponse{Messages: make([]wire.PopMessage, 0, size)}
	if err := readWire(body, &pr, func() { pr = wire.PopResponse{Messages: make([]wire.PopMessage, 0, size)} }); err != nil {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Body: body,
			Message: "undecodable pop answer: " + err.Error()}
	}
	if !pr.Success && pr.Error != "" && !wire.EmptyPopError(pr.Error) {
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
