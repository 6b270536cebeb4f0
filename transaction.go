package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/queen-go/queen/internal/wire"
)

// ErrRolledBack is matched (errors.Is) by the *TransactionError a rolled
// back transaction returns.
var ErrRolledBack = errors.New("queen: transaction rolled back")

// TransactionBuilder collects acks and pushes that the broker applies all
// or nothing, sent with Commit:
//
//	_, err := client.Transaction().
//		Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "billing"}).
//		Queue("invoices").Partition(msg.Partition).Push(invoice).
//		Commit(ctx)
//
// Unlike the other builders, a TransactionBuilder is not a value but an
// accumulator: Ack and TransactionPush.Push add an operation to it and
// return it, so each call counts, as a statement too. It is not safe for
// concurrent use. The first bad input is returned by Commit before any
// request.
type TransactionBuilder struct {
	c   *Client
	ops []txnOp
	err error
}

type txnOp struct {
	ack   *wire.TxnOp     // type "ack", ready to send
	items []wire.PushItem // type "push"
	key   string          // routing key of an ack (ackKey)
}

// Transaction starts an empty transaction.
func (c *Client) Transaction() *TransactionBuilder {
	return &TransactionBuilder{c: c}
}

// Ack adds the settlement of msg with status. At most one AckOptions:
// ConsumerGroup (default: the message's) and Error. The ack carries the
// message's lease id: an expired or released lease rolls back the whole
// transaction. A message without a lease fails Commit with ErrNotAckable.
func (t *TransactionBuilder) Ack(msg *Message, status AckStatus, opts ...AckOptions) *TransactionBuilder {
	n := len(t.ops)
	switch {
	case len(opts) > 1:
		t.fail(fmt.Errorf("transaction op %d: %w: Ack takes at most one AckOptions, got %d", n, ErrInvalidOption, len(opts)))
		return t
	case msg == nil:
		t.fail(fmt.Errorf("transaction op %d: %w: nil message", n, ErrNotAckable))
		return t
	case msg.TransactionID == "" || msg.PartitionID == "":
		t.fail(fmt.Errorf("transaction op %d: %w: %s", n, ErrNotAckable, notAckable(msg)))
		return t
	case msg.LeaseID == "":
		t.fail(fmt.Errorf("transaction op %d: %w: message %s has no lease (popped with commit on delivery?)",
			n, ErrNotAckable, msg.TransactionID))
		return t
	case !status.valid():
		t.fail(fmt.Errorf("transaction op %d: %w: %q", n, ErrUnknownStatus, status))
		return t
	}
	var o AckOptions
	if len(opts) == 1 {
		o = opts[0]
	}
	group := o.ConsumerGroup
	if group == "" {
		group = messageGroup(msg)
	}
	t.ops = append(t.ops, txnOp{ack: &wire.TxnOp{
		Type:          wire.TxnAck,
		TransactionID: msg.TransactionID,
		PartitionID:   msg.PartitionID,
		LeaseID:       msg.LeaseID,
		ConsumerGroup: group,
		Status:        string(status),
		Error:         o.Error,
	}, key: ackKey(msg, group)})
	return t
}

// Queue names the queue of the next Push, which returns the builder:
//
//	tx.Queue("invoices").Partition("customer-42").Push(a, b)
func (t *TransactionBuilder) Queue(name string) *TransactionPush {
	return &TransactionPush{tx: t, queue: name}
}

// TransactionPush is a push being added to a transaction
// (TransactionBuilder.Queue). It is a value: Partition and TraceID return
// a changed copy and leave p unchanged; Push adds to the transaction.
type TransactionPush struct {
	tx        *TransactionBuilder
	queue     string
	partition string
	traceID   string
}

// Partition returns a copy of p that pushes to partition name (default:
// the broker's "Default" partition); p is unchanged.
func (p *TransactionPush) Partition(name string) *TransactionPush {
	cp := *p
	cp.partition = name
	return &cp
}

// TraceID sets the trace id (a UUID) of the pushed messages that carry none
// of their own; both generations keep it.
func (p *TransactionPush) TraceID(id string) *TransactionPush {
	cp := *p
	cp.traceID = id
	return &cp
}

// Push adds one message per payload (what QueueBuilder.Push takes) and
// returns the builder. Transaction ids are fixed now, so committing the
// same builder again cannot store a message twice.
func (p *TransactionPush) Push(payloads ...any) *TransactionBuilder {
	t := p.tx
	n := len(t.ops)
	nameErr := checkName(queueName, p.queue)
	if nameErr == nil {
		nameErr = checkOptionalName(partitionName, p.partition)
	}
	switch {
	case nameErr != nil:
		t.fail(fmt.Errorf("transaction op %d: %w", n, nameErr))
		return t
	case len(payloads) == 0:
		t.fail(fmt.Errorf("transaction op %d: %w: push needs at least one payload", n, ErrNoMessages))
		return t
	}
	if p.traceID != "" {
		if err := checkTraceID(p.traceID); err != nil {
			t.fail(fmt.Errorf("transaction op %d: %w", n, err))
			return t
		}
	}
	items := make([]wire.PushItem, len(payloads))
	for i, pl := range payloads {
		it, err := pushItem(p.queue, p.partition, p.traceID, "", pl)
		if err != nil {
			t.fail(fmt.Errorf("transaction op %d item %d: %w", n, i, err))
			return t
		}
		items[i] = it
	}
	t.ops = append(t.ops, txnOp{items: items})
	return t
}

// fail keeps the first validation error for Commit.
func (t *TransactionBuilder) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// request builds the body: the operations in order and the acks' distinct
// lease ids, in order of first use.
func (t *TransactionBuilder) request() (wire.TxnRequest, error) {
	if t.err != nil {
		return wire.TxnRequest{}, t.err
	}
	if len(t.ops) == 0 {
		return wire.TxnRequest{}, ErrEmptyTransaction
	}
	req := wire.TxnRequest{Operations: make([]wire.TxnOp, 0, len(t.ops))}
	seen := map[string]bool{}
	for _, op := range t.ops {
		if op.ack != nil {
			req.Operations = append(req.Operations, *op.ack)
			if !seen[op.ack.LeaseID] {
				seen[op.ack.LeaseID] = true
				req.RequiredLeases = append(req.RequiredLeases, op.ack.LeaseID)
			}
			continue
		}
		req.Operations = append(req.Operations, wire.TxnOp{Type: wire.TxnPush, Items: op.items})
	}
	return req, nil
}

// key is the routing key of the transaction: its first operation's.
func (t *TransactionBuilder) key() string {
	if op := t.ops[0]; op.ack != nil {
		return op.key
	}
	return pushKey(t.ops[0].items[0].Queue, t.ops[0].items[0].Partition)
}

// TransactionOpType says what a transaction result is about.
type TransactionOpType string

const (
	TransactionPushOp TransactionOpType = "push" // one pushed message
	TransactionAckOp  TransactionOpType = "ack"  // one ack
)

// TransactionOpResult is the broker's answer for one pushed message or one
// ack of a transaction. A push of n payloads has n results.
type TransactionOpResult struct {
	Index         int               `json:"index"` // in the broker's answer
	Type          TransactionOpType `json:"type"`
	Success       bool              `json:"success"`
	TransactionID string            `json:"transactionId,omitempty"`
	MessageID     string            `json:"messageId,omitempty"` // a push's; the original one for a duplicate
	Queue         string            `json:"queue,omitempty"`
	PartitionID   string            `json:"partitionId,omitempty"` // a push's, 0.15.1 only
	// Duplicate: the pushed message was already stored; nothing new was.
	Duplicate bool   `json:"duplicate,omitempty"`
	DLQ       bool   `json:"dlq,omitempty"` // the ack dead-lettered its message
	Error     string `json:"error,omitempty"`
}

// TransactionResult is the outcome of Commit.
type TransactionResult struct {
	TransactionID string `json:"transactionId,omitempty"`
	// Committed: every operation was applied; false: none was.
	Committed bool   `json:"committed"`
	Reason    string `json:"reason,omitempty"` // a rollback's code ("rejected_ack", ...); not from 0.15.1
	Error     string `json:"error,omitempty"`
	// FailedIndex is the result (2.x: the operation) that caused the
	// rollback; -1 when unknown.
	FailedIndex int `json:"failedIndex"`
	// Results holds one result per pushed message and per ack, in order,
	// when the broker reports them (a 2.x rollback does not). After a
	// rollback a result's Success says only whether that operation alone
	// passed.
	Results []TransactionOpResult `json:"results"`
}

// TransactionError is the error of a rolled back transaction: nothing of it
// was applied. It matches ErrRolledBack.
type TransactionError struct {
	Result *TransactionResult // also returned by Commit
}

// Error describes the refusal.
func (e *TransactionError) Error() string {
	r := e.Result
	s := "queen: transaction rolled back"
	if r.TransactionID != "" {
		s += " (" + r.TransactionID + ")"
	}
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	if r.Error != "" && r.Error != r.Reason {
		s += ": " + r.Error
	}
	if r.FailedIndex >= 0 {
		s += fmt.Sprintf(" (operation %d)", r.FailedIndex)
	}
	return s
}

// Is reports whether target is ErrRolledBack.
func (e *TransactionError) Is(target error) bool { return target == ErrRolledBack }

// Commit sends the transaction (POST /api/v1/transaction) and returns the
// result. A rollback (an ack whose lease is gone, say) applied nothing and
// is a *TransactionError matching ErrRolledBack, with the same result. An
// empty transaction (ErrEmptyTransaction) or an invalid operation fails
// before any request.
//
// Commit is sent again only when the broker surely did not apply it
// (connection refused, 429, 503). Otherwise an open outcome (a lost
// answer, a 5xx that may follow applying it, an unreadable answer) matches
// ErrOutcomeUnknown with no result: check the pushed and acked messages
// before doing the work again. Committing the same builder again never
// stores its messages twice, but is refused after an applied first commit.
func (t *TransactionBuilder) Commit(ctx context.Context) (*TransactionResult, error) {
	req, err := t.request()
	if err != nil {
		return nil, err
	}
	resp, err := t.c.do(ctx, call{method: http.MethodPost, path: wire.RouteTransaction.Path(), body: req, once: true, key: t.key()})
	if err != nil {
		return nil, err
	}
	return decodeTransaction(resp.body, req)
}

// decodeTransaction reads both generations: a rollback is 200 with success
// false and a reason (2.x) or an error, or an error object alone (0.15.1).
func decodeTransaction(body []byte, req wire.TxnRequest) (*TransactionResult, error) {
	body = bytes.TrimSpace(body)
	// Success shadows the embedded bool so that an absent verdict shows.
	var out struct {
		wire.TxnResponse
		Success *bool `json:"success"`
	}
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &out) != nil {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: wire.RouteTransaction.Path(),
			Body: body, Message: "undecodable transaction answer"})
	}
	if out.Success == nil && out.Error == "" {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: wire.RouteTransaction.Path(),
			Body: body, Message: "transaction answer says neither success nor error"})
	}
	res := &TransactionResult{
		TransactionID: out.TransactionID,
		Committed:     out.Success != nil && *out.Success,
		Reason:        out.Reason,
		Error:         out.Error,
		FailedIndex:   -1,
		Results:       make([]TransactionOpResult, 0, len(out.Results)),
	}
	if out.FailedIndex != nil {
		res.FailedIndex = *out.FailedIndex
	}
	// One result per pushed item and per ack, in request order: fill what
	// the broker left out when the counts agree.
	type origin struct {
		typ   TransactionOpType
		txn   string
		queue string
	}
	var flat []origin
	for _, op := range req.Operations {
		if op.Type == wire.TxnAck {
			flat = append(flat, origin{TransactionAckOp, op.TransactionID, ""})
			continue
		}
		for _, it := range op.Items {
			flat = append(flat, origin{TransactionPushOp, it.TransactionID, it.Queue})
		}
	}
	aligned := len(flat) == len(out.Results)
	for i, r := range out.Results {
		o := TransactionOpResult{
			Index: r.Index, Type: TransactionOpType(r.Type), Success: r.Success, TransactionID: r.TransactionID,
			MessageID: r.MessageID, Queue: r.QueueName, PartitionID: r.PartitionID, Duplicate: r.Duplicate, DLQ: r.DLQ,
		}
		if r.Error != nil {
			o.Error = *r.Error
		}
		if aligned {
			if o.Type == "" {
				o.Type = flat[i].typ
			}
			if o.TransactionID == "" {
				o.TransactionID = flat[i].txn
			}
			if o.Queue == "" {
				o.Queue = flat[i].queue
			}
		}
		res.Results = append(res.Results, o)
	}
	if !res.Committed {
		if res.FailedIndex < 0 {
			for i, r := range res.Results {
				if !r.Success {
					res.FailedIndex = i
					break
				}
			}
		}
		if res.Error == "" && res.Reason == "" {
			res.Error = "rolled back without a reason"
		}
		return res, &TransactionError{Result: res}
	}
	return res, nil
}
