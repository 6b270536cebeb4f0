package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/queen-go/queen/internal/wire"
)

// AckStatus is the outcome of a message, as the broker knows it.
type AckStatus string

const (
	// StatusCompleted: done; the group's cursor moves past the message.
	StatusCompleted AckStatus = "completed"
	// StatusFailed: spend one retry; the message and what follows it in its
	// partition come back after the queue's retryDelay. The broker counts
	// the retries per partition and group, across the leases that did not
	// finish, not per message (see QueueConfig.RetryLimit): the failed ack
	// that finds them spent dead-letters its message, which may be that
	// message's first failure. A consume loop counts per message instead,
	// and sends retry or dlq (see ConsumeBuilder.OnError).
	StatusFailed AckStatus = "failed"
	// StatusRetry: give the message back at once without spending a retry.
	StatusRetry AckStatus = "retry"
	// StatusDLQ: dead-letter the message at once.
	StatusDLQ AckStatus = "dlq"
)

func (s AckStatus) valid() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusRetry, StatusDLQ:
		return true
	}
	return false
}

// AckOptions qualify an ack.
type AckOptions struct {
	// ConsumerGroup is the group the message was popped for. Empty means the
	// message's own group (queue mode when it has none).
	ConsumerGroup string
	// Error is the reason of a failed or dead-lettered message; the broker
	// stores it on the dead-letter row.
	Error string
}

// AckResult is the broker's answer for one acknowledged message.
type AckResult struct {
	// TransactionID names the message.
	TransactionID string
	// Success is false when the broker refused the ack (for example a lease
	// that expired or belongs to another pop).
	Success bool
	// Error is the broker's reason for a refusal.
	Error string
	// LeaseReleased is true when this ack ended the lease of its partition.
	LeaseReleased bool
	// DLQ is true when the message was dead-lettered.
	DLQ bool
	// Noop is true when the message had already been settled (2.x).
	Noop bool
}

// AckError is returned when the broker refused one or more acks of a
// request. Results holds every result, in request order.
type AckError struct {
	// Results holds one result per ack, in request order; those with
	// Success false were refused.
	Results []AckResult
}

// Error counts the refused acks and names the first of them.
func (e *AckError) Error() string {
	n, first := 0, ""
	for _, r := range e.Results {
		if !r.Success {
			if n == 0 {
				first = r.TransactionID + ": " + r.Error
			}
			n++
		}
	}
	return fmt.Sprintf("queen: broker refused %d of %d acks (first %s)", n, len(e.Results), first)
}

// Ack settles one message: ok true acks it completed, false acks it failed
// (one retry spent; it comes back after the queue's retryDelay, or is
// dead-lettered if the partition's retries are spent: they are counted per
// partition and group, not per message, see StatusFailed). opts.Error is
// stored as the failure reason. A refusal by the broker (a lost lease,
// say) is an *AckError; the result is returned either way.
func (c *Client) Ack(ctx context.Context, msg *Message, ok bool, opts AckOptions) (AckResult, error) {
	st := StatusCompleted
	if !ok {
		st = StatusFailed
	}
	return c.Settle(ctx, msg, st, opts)
}

// Settle acks one message with any of the four outcomes: completed, failed,
// retry or dlq (with opts.Error as the reason).
func (c *Client) Settle(ctx context.Context, msg *Message, status AckStatus, opts AckOptions) (AckResult, error) {
	res, err := c.SettleBatch(ctx, []Settlement{{Message: msg, Status: status, Error: opts.Error}}, opts)
	if len(res) == 1 {
		return res[0], err
	}
	return AckResult{}, err
}

// Settlement is one message's outcome in a batch ack.
type Settlement struct {
	// Message is the popped message to settle.
	Message *Message
	// Status is its outcome: completed, failed, retry or dlq.
	Status AckStatus
	// Error is the reason of a failed or dead-lettered message.
	Error string
}

// SettleBatch settles many messages in one request and returns one result
// per message, in order. All of them must belong to one consumer group
// (opts.ConsumerGroup, or else the messages' own). Give a partition's
// outcomes in partition order: the broker settles them in that order. When
// the broker refuses some items the error is an *AckError and the results
// are returned too.
//
// To settle a whole lease after a failure, list the messages of the
// partition that were not handled after the failed one as StatusRetry in
// the same batch (retry spends no retry): a 0.15.1 broker keeps the lease
// after a failed that dead-letters, and messages left out of the ack would
// wait for the lease to expire (PROTOCOL.md §16). The consume loop does so.
func (c *Client) SettleBatch(ctx context.Context, acks []Settlement, opts AckOptions) ([]AckResult, error) {
	start := c.hooks.now()
	res, group, sent, err := c.settleBatch(ctx, acks, opts, 0)
	if sent {
		c.hooks.settled(ctx, group, nil, acks, res, start, err)
	}
	return res, err
}

// settleBatch is SettleBatch without hooks; it also returns the group the
// acks were sent for, and whether a request was sent (false: refused
// before the wire). attempts > 0 bounds the transport's attempts.
func (c *Client) settleBatch(ctx context.Context, acks []Settlement, opts AckOptions, attempts int) (res []AckResult, group string, sent bool, err error) {
	if len(acks) == 0 {
		return nil, "", false, ErrNoMessages
	}
	if err := checkOptionalName(groupName, opts.ConsumerGroup); err != nil {
		return nil, "", false, err
	}
	group = opts.ConsumerGroup
	items := make([]wire.AckItem, len(acks))
	for i, a := range acks {
		if a.Message == nil || a.Message.TransactionID == "" || a.Message.PartitionID == "" {
			return nil, "", false, fmt.Errorf("ack %d: %w: %s", i, ErrNotAckable, notAckable(a.Message))
		}
		if !a.Status.valid() {
			return nil, "", false, fmt.Errorf("ack %d: %w: %q", i, ErrUnknownStatus, a.Status)
		}
		if opts.ConsumerGroup == "" {
			switch g := messageGroup(a.Message); {
			case i == 0:
				group = g
			case g != group:
				return nil, "", false, fmt.Errorf("%w: one batch ack takes one consumer group; got %q and %q",
					ErrInvalidOption, group, g)
			}
		}
		items[i] = wire.AckItem{
			TransactionID: a.Message.TransactionID,
			PartitionID:   a.Message.PartitionID,
			LeaseID:       a.Message.LeaseID,
			Status:        string(a.Status),
			Error:         a.Error,
		}
	}
	// The single ack route for one message, the batch route otherwise;
	// the body is written with the hot path's JSON library (see readWire).
	cl := call{method: http.MethodPost, path: wire.RouteAckBatch.Path(), key: ackKey(acks[0].Message, opts.ConsumerGroup), attempts: attempts}
	var raw []byte
	if len(items) == 1 {
		cl.path = wire.RouteAck.Path()
		raw, err = jsonv2.Marshal(wire.AckRequest{AckItem: items[0], ConsumerGroup: group})
	} else {
		raw, err = jsonv2.Marshal(wire.AckBatchRequest{ConsumerGroup: group, Acknowledgments: items})
	}
	if err != nil {
		return nil, group, false, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	cl.raw = raw
	resp, err := c.do(ctx, cl)
	if err != nil {
		return nil, group, true, err
	}
	res, err = decodeAcks(resp.body, cl.path, items)
	return res, group, true, err
}

// messageGroup is the group to send for a message: empty for queue mode.
func messageGroup(m *Message) string {
	if m.ConsumerGroup == wire.QueueModeGroup {
		return ""
	}
	return m.ConsumerGroup
}

// decodeAcks reads an ack answer: an array of results on both broker
// generations, or an object with an error (0.15.1 answers some failures
// with HTTP 200 and an object).
func decodeAcks(body []byte, path string, items []wire.AckItem) ([]AckResult, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		return nil, objectForResults(http.StatusOK, path, body, "ack")
	}
	// What the client reads of each result (wire.AckResult), with room for
	// all of them up front; not the transactionId each echoes: results come
	// in request order, and each names the message of its position.
	type ackReply struct {
		Success       bool   `json:"success"`
		Error         string `json:"error"`
		LeaseReleased bool   `json:"leaseReleased"`
		DLQ           bool   `json:"dlq"`
		Noop          bool   `json:"noop"`
	}
	out := make([]ackReply, 0, len(items))
	if err := readWire(body, &out, func() { out = make([]ackReply, 0, len(items)) }); err != nil {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: "undecodable ack answer: " + err.Error()}
	}
	if len(out) != len(items) {
		return nil, &BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: fmt.Sprintf("ack answer has %d results for %d acks", len(out), len(items))}
	}
	res := make([]AckResult, len(items))
	failed := false
	// Results come in request order on both generations; position is trusted
	// over "index" so that a malformed answer cannot leave a slot unset.
	for i, o := range out {
		r := AckResult{TransactionID: items[i].TransactionID, Success: o.Success, Error: o.Error, LeaseReleased: o.LeaseReleased, DLQ: o.DLQ, Noop: o.Noop}
		if !r.Success {
			failed = true
			if r.Error == "" {
				r.Error = "refused"
			}
		}
		res[i] = r
	}
	if failed {
		return res, &AckError{Results: res}
	}
	return res, nil
}

// objectForResults is the refusal of a POST whose answer should be an
// array of results but is an object: the broker's error envelope (which
// 0.15.1 sends with HTTP 200), or else an object naming no error.
func objectForResults(status int, path string, body []byte, what string) *BrokerError {
	var eb wire.ErrorBody
	_ = json.Unmarshal(body, &eb)
	return &BrokerError{Status: status, Method: http.MethodPost, Path: path, Body: body, Code: eb.Code,
		Message: orDefault(eb.Error, what+" answered with an object instead of results")}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// RenewResult is the outcome of one lease renewal.
type RenewResult struct {
	// LeaseID is the renewed lease.
	LeaseID string
	// Success is false when the lease had already expired or been released:
	// its messages may now be with another worker.
	Success bool
	// ExpiresAt is the lease's new expiry (zero when unknown).
	ExpiresAt time.Time
	// Error is the broker's reason for a failure.
	Error string
}

// DefaultRenewal is how far Renew extends a lease.
const DefaultRenewal = time.Minute

// Renew extends the leases of msgs by DefaultRenewal from now (never
// shortening them): one request per distinct lease id, which covers every
// partition of that pop. Success is read from the broker's answer; a lease
// that could not be renewed gives a result with Success false and an error
// matching ErrLeaseLost. A broker failure (any *BrokerError, including an
// error object answered with HTTP 200) says nothing about the lease and
// is returned as such.
func (c *Client) Renew(ctx context.Context, msgs ...*Message) ([]RenewResult, error) {
	return c.RenewFor(ctx, DefaultRenewal, msgs...)
}

// RenewFor is Renew with the extension d (rounded up to whole seconds).
func (c *Client) RenewFor(ctx context.Context, d time.Duration, msgs ...*Message) ([]RenewResult, error) {
	if len(msgs) == 0 {
		return nil, ErrNoMessages
	}
	if d <= 0 {
		return nil, fmt.Errorf("%w: renew duration %v must be positive", ErrInvalidOption, d)
	}
	secs := int(ceilUnits(d, time.Second))
	var leases []string
	seen := map[string]bool{}
	for i, m := range msgs {
		if m == nil || m.LeaseID == "" {
			return nil, fmt.Errorf("message %d: %w: %s", i, ErrNotAckable, noLease(m))
		}
		if !seen[m.LeaseID] {
			seen[m.LeaseID] = true
			leases = append(leases, m.LeaseID)
		}
	}
	var out []RenewResult
	var lost []string
	for _, l := range leases {
		first := msgs[slices.IndexFunc(msgs, func(m *Message) bool { return m.LeaseID == l })]
		r, err := c.renewKeyed(ctx, l, secs, first.Queue, messageGroup(first), ackKey(first, ""), 0)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if !r.Success {
			lost = append(lost, l)
		}
	}
	if len(lost) > 0 {
		return out, fmt.Errorf("%w: %s", ErrLeaseLost, strings.Join(lost, ", "))
	}
	return out, nil
}

// renewLeaseOf extends one lease id, of queue and group, by secs seconds,
// and tells the hooks (RenewHook, and LeaseLostHook when the lease is
// lost). attempts > 0 bounds the transport's attempts.
func (c *Client) renewLeaseOf(ctx context.Context, leaseID string, secs int, queue, group string, attempts int) (RenewResult, error) {
	return c.renewKeyed(ctx, leaseID, secs, queue, group, popKey(queue, "", group), attempts)
}

// renewKeyed is renewLeaseOf with the routing key of the renewal.
func (c *Client) renewKeyed(ctx context.Context, leaseID string, secs int, queue, group, key string, attempts int) (RenewResult, error) {
	start := c.hooks.now()
	res, err := c.sendRenew(ctx, leaseID, secs, key, attempts)
	c.hooks.renewed(ctx, queue, group, leaseID, time.Duration(secs)*time.Second, start, res, err)
	return res, err
}

// sendRenew sends the renewal of one lease id, with the routing key, and
// reads its answer.
func (c *Client) sendRenew(ctx context.Context, leaseID string, secs int, key string, attempts int) (RenewResult, error) {
	path := wire.RouteLeaseExtend.Path(leaseID)
	resp, err := c.do(ctx, call{method: http.MethodPost, path: path, body: wire.RenewRequest{Seconds: secs}, key: key, attempts: attempts})
	if err != nil {
		return RenewResult{LeaseID: leaseID}, err
	}
	if be := errorObject(resp, http.MethodPost, path); be != nil {
		// An error object that does not name the lease is the broker's
		// error envelope (0.15.1 sends them with HTTP 200), not a verdict
		// on the lease: the call failed, the lease may well be alive.
		var verdict struct {
			LeaseID *string `json:"leaseId"`
		}
		if json.Unmarshal(resp.body, &verdict) == nil && verdict.LeaseID == nil {
			return RenewResult{LeaseID: leaseID}, be
		}
	}
	return decodeRenew(resp.body, leaseID, path)
}

// decodeRenew reads the 2.x object or the 0.15.1 array answer
// (wire.Generation.RenewArray): either, whatever the broker.
func decodeRenew(body []byte, leaseID, path string) (RenewResult, error) {
	body = bytes.TrimSpace(body)
	var rr wire.RenewResponse
	if len(body) > 0 && body[0] == '[' {
		var arr []wire.RenewResponse
		if err := json.Unmarshal(body, &arr); err != nil || len(arr) == 0 {
			return RenewResult{LeaseID: leaseID}, &BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
				Message: "undecodable renew answer"}
		}
		rr = arr[0]
	} else if err := json.Unmarshal(body, &rr); err != nil {
		return RenewResult{LeaseID: leaseID}, &BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: "undecodable renew answer: " + err.Error()}
	}
	r := RenewResult{LeaseID: leaseID, Success: rr.Success}
	for _, ts := range []*string{rr.NewExpiresAt, rr.ExpiresAt, rr.LeaseExpiresAt} {
		if ts != nil && *ts != "" {
			r.ExpiresAt = parseBrokerTime(*ts)
			break
		}
	}
	if rr.Error != nil {
		r.Error = *rr.Error
	}
	if !r.Success && r.Error == "" {
		r.Error = "lease not renewed"
	}
	return r, nil
}
