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
	// StatusCompleted: done; the cursor moves past the message.
	StatusCompleted AckStatus = "completed"
	// StatusFailed: spend one retry; the message and the rest of its
	// partition come back after RetryDelay. The broker counts per partition
	// and group, not per message (docs/RETRIES.md).
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
	ConsumerGroup string // empty: the message's own
	Error         string // the reason of a failure, kept on the dead-letter row
}

// AckResult is the broker's answer for one acknowledged message.
type AckResult struct {
	TransactionID string
	Success       bool   // false: refused (a lease expired or another pop's, say)
	Error         string // the broker's reason for a refusal
	LeaseReleased bool   // this ack ended its partition's lease
	// DLQ: this ack filed this message in the dead-letter queue, as the
	// broker answers per message. A failed message released for
	// redelivery, or dropped by a 2.x queue without a dead-letter queue,
	// is not.
	DLQ  bool
	Noop bool // already settled (2.x)
}

// AckError is returned when the broker refused one or more acks of a
// request.
type AckError struct {
	Results []AckResult // one per ack, in request order
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

// Ack settles one message completed (ok) or failed (StatusFailed), with
// opts.Error as the reason. The broker counts a failed ack per partition
// and group, not per message (docs/RETRIES.md): to retry or dead-letter one
// message, SettleBatch it with StatusRetry or StatusDLQ. A refusal (a lost
// lease, say) is an *AckError; the result is returned either way.
func (c *Client) Ack(ctx context.Context, msg *Message, ok bool, opts AckOptions) (AckResult, error) {
	st := StatusCompleted
	if !ok {
		st = StatusFailed
	}
	return c.Settle(ctx, msg, st, opts)
}

// Settle acks one message with any AckStatus (opts.Error as the reason).
func (c *Client) Settle(ctx context.Context, msg *Message, status AckStatus, opts AckOptions) (AckResult, error) {
	res, err := c.SettleBatch(ctx, []Settlement{{Message: msg, Status: status, Error: opts.Error}}, opts)
	if len(res) == 1 {
		return res[0], err
	}
	return AckResult{}, err
}

// Settlement is one message's outcome in a batch ack.
type Settlement struct {
	Message *Message
	Status  AckStatus
	Error   string // the reason of a failed or dead-lettered message
}

// SettleBatch settles messages of one consumer group in one request, in
// the order given (a partition's in partition order), and returns one
// result per message, with an *AckError when some were refused. After a
// failure, settle the partition's unhandled rest as StatusRetry in the same
// batch, or 0.15.1 may keep the lease (docs/RETRIES.md, Pop users).
func (c *Client) SettleBatch(ctx context.Context, acks []Settlement, opts AckOptions) ([]AckResult, error) {
	start := c.hooks.now()
	res, group, sent, err := c.settleBatch(ctx, acks, opts, 0)
	if sent {
		c.hooks.settled(ctx, group, nil, acks, res, start, err)
	}
	return res, err
}

// settleBatch is SettleBatch without hooks; sent false: refused before the
// wire. attempts > 0 bounds the transport's attempts.
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
	// Written with the hot path's JSON library (see readWire).
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
	return res, group, true, resp.answered(err)
}

func messageGroup(m *Message) string {
	if m.ConsumerGroup == wire.QueueModeGroup {
		return ""
	}
	return m.ConsumerGroup
}

// decodeAcks reads an array of results, or a 0.15.1 200 error object.
func decodeAcks(body []byte, path string, items []wire.AckItem) ([]AckResult, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		return nil, objectForResults(http.StatusOK, path, body, "ack")
	}
	// Not the echoed transactionId: each result names its position's message.
	type ackReply struct {
		Success       bool   `json:"success"`
		Error         string `json:"error"`
		LeaseReleased bool   `json:"leaseReleased"`
		DLQ           bool   `json:"dlq"`
		Noop          bool   `json:"noop"`
	}
	out := make([]ackReply, 0, len(items))
	if err := readWire(body, &out, func() { out = make([]ackReply, 0, len(items)) }); err != nil {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: "undecodable ack answer: " + err.Error()}) // a 2xx the client cannot read
	}
	if len(out) != len(items) {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: fmt.Sprintf("ack answer has %d results for %d acks", len(out), len(items))})
	}
	res := make([]AckResult, len(items))
	failed := false
	// Position over "index": a malformed answer cannot leave a slot unset.
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

func objectForResults(status int, path string, body []byte, what string) error {
	var eb wire.ErrorBody
	_ = json.Unmarshal(body, &eb)
	be := &BrokerError{Status: status, Method: http.MethodPost, Path: path, Body: body, Code: eb.Code,
		Message: orDefault(eb.Error, what+" answered with an object instead of results")}
	if eb.Error == "" && eb.Code == "" {
		return outcomeUnknown(be) // a 2xx the client cannot read
	}
	return be
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// RenewResult is the outcome of one lease renewal.
type RenewResult struct {
	LeaseID   string
	Success   bool      // false: expired or released, maybe with another worker
	ExpiresAt time.Time // zero when unknown
	Error     string
}

// DefaultRenewal is how far Renew extends a lease.
const DefaultRenewal = time.Minute

// Renew extends the leases of msgs to DefaultRenewal from now (never
// shortening them), one request per lease id. A lost lease gives Success
// false and an error matching ErrLeaseLost; a *BrokerError says nothing of
// the lease.
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

// renewKeyed renews leaseID with the routing key of the pop that took it
// (see ackKey); attempts > 0 bounds the transport's attempts.
func (c *Client) renewKeyed(ctx context.Context, leaseID string, secs int, queue, group, key string, attempts int) (RenewResult, error) {
	start := c.hooks.now()
	res, err := c.sendRenew(ctx, leaseID, secs, key, attempts)
	c.hooks.renewed(ctx, queue, group, leaseID, time.Duration(secs)*time.Second, start, res, err)
	return res, err
}

func (c *Client) sendRenew(ctx context.Context, leaseID string, secs int, key string, attempts int) (RenewResult, error) {
	path := wire.RouteLeaseExtend.Path(leaseID)
	resp, err := c.do(ctx, call{method: http.MethodPost, path: path, body: wire.RenewRequest{Seconds: secs}, key: key, attempts: attempts})
	if err != nil {
		return RenewResult{LeaseID: leaseID}, err
	}
	if be := errorObject(resp, http.MethodPost, path); be != nil {
		// A 0.15.1 200 error envelope is no verdict on the lease.
		var verdict struct {
			LeaseID *string `json:"leaseId"`
		}
		if json.Unmarshal(resp.body, &verdict) == nil && verdict.LeaseID == nil {
			return RenewResult{LeaseID: leaseID}, resp.answered(be)
		}
	}
	res, err := decodeRenew(resp.body, leaseID, path)
	return res, resp.answered(err)
}

// decodeRenew reads the 2.x object or the 0.15.1 array, whatever the broker.
func decodeRenew(body []byte, leaseID, path string) (RenewResult, error) {
	body = bytes.TrimSpace(body)
	var rr wire.RenewResponse
	if len(body) > 0 && body[0] == '[' {
		var arr []wire.RenewResponse
		if err := json.Unmarshal(body, &arr); err != nil || len(arr) == 0 {
			return RenewResult{LeaseID: leaseID}, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
				Message: "undecodable renew answer"}) // a 2xx the client cannot read
		}
		rr = arr[0]
	} else if err := json.Unmarshal(body, &rr); err != nil {
		return RenewResult{LeaseID: leaseID}, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: path, Body: body,
			Message: "undecodable renew answer: " + err.Error()})
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
