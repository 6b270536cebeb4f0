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
// together or not at all. Create it with Client.Transaction, add operations
// with Ack and Queue(..).Push, and send it with Commit:
//
//	_, err := client.Transaction().
//		Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "billing"}).
//		Queue("invoices").Partition(msg.Partition).Push(invoice).
//		Commit(ctx)
//
// Bad input (a message that cannot be acked, an unknown status, a payload
// that is not JSON) is remembered and returned by Commit before any request
// is sent. A builder is not safe for concurrent use.
type TransactionBuilder struct {
	c   *Client
	ops []txnOp
	err error
}

// txnOp is one operation of the builder, in the order it was added.
type txnOp struct {
	ack   *wire.TxnOp     // type "ack", ready to send
	items []wire.PushItem // type "push"
	key   string          // routing key of an ack (ackKey)
}

// Transaction starts an empty transaction.
func (c *Client) Transaction() *TransactionBuilder {
	return &TransactionBuilder{c: c}
}

// Ack adds the settlement of msg with status (completed, failed, retry or
// dlq; an untyped string constant such as "dlq" converts). At most one
// AckOptions may be given: its ConsumerGroup (default: the message's own
// group) and Error (the reason stored with a failed or dead-lettered
// message). The ack carries the message's lease id, so the broker refuses
// it, and with it the whole transaction, when that lease has expired or
// been released.
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

// Queue names the queue of the next Push. Chain Partition (optional) and
// Push, which returns the transaction builder:
//
//	tx.Queue("invoices").Partition("customer-42").Push(a, b)
func (t *TransactionBuilder) Queue(name string) *TransactionPush {
	return &TransactionPush{tx: t, queue: name}
}

// TransactionPush is a push being added to a transaction. Create it with
// TransactionBuilder.Queue.
type TransactionPush struct {
	tx        *TransactionBuilder
	queue     string
	partition string
	traceID   string
}

// Partition sets the partition of the push (default: the broker's
// "Default" partition).
func (p *TransactionPush) Partition(name string) *TransactionPush { p.partition = name; return p }

// TraceID sets the trace id (a UUID) of the pushed messages that carry none
// of their own. Both broker generations keep a trace id pushed in a
// transaction (see Message.TraceID).
func (p *TransactionPush) TraceID(id string) *TransactionPush { p.traceID = id; return p }

// Push adds one message per payload to the transaction and returns the
// transaction builder. Payloads are what QueueBuilder.Push takes: any value
// that encodes to JSON, json.RawMessage or []byte holding JSON, or an Item
// (or *Item) with its own transaction and trace ids. Every message gets a transaction
// id now (client-made when it has none), so committing the same builder
// again cannot store a message twice.
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

// request builds the wire body: the operations in order and the distinct
// lease ids of the acks, in order of first use.
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
	// TransactionPushOp is the result of one pushed message.
	TransactionPushOp TransactionOpType = "push"
	// TransactionAckOp is the result of one ack.
	TransactionAckOp TransactionOpType = "ack"
)

// TransactionOpResult is the broker's answer for one pushed message or one
// ack of a transaction. A push of n payloads has n results.
type TransactionOpResult struct {
	// Index is the position of the result in the broker's answer.
	Index int `json:"index"`
	// Type says whether this is a pushed message or an ack.
	Type TransactionOpType `json:"type"`
	// Success is the broker's verdict on this operation.
	Success bool `json:"success"`
	// TransactionID is the pushed or acked message's transaction id.
	TransactionID string `json:"transactionId,omitempty"`
	// MessageID is the id of a pushed message (the original one for a
	// duplicate).
	MessageID string `json:"messageId,omitempty"`
	// Queue is the queue of a pushed message.
	Queue string `json:"queue,omitempty"`
	// PartitionID is the partition of a pushed message, when the broker
	// reports it (0.15.1).
	PartitionID string `json:"partitionId,omitempty"`
	// Duplicate is true when the pushed message was already stored (same
	// transaction id in that partition); nothing new was stored.
	Duplicate bool `json:"duplicate,omitempty"`
	// DLQ is true when the ack dead-lettered its message.
	DLQ bool `json:"dlq,omitempty"`
	// Error is the broker's reason for a failed operation.
	Error string `json:"error,omitempty"`
}

// TransactionResult is the outcome of Commit.
type TransactionResult struct {
	// TransactionID is the broker's id of the transaction.
	TransactionID string `json:"transactionId,omitempty"`
	// Committed is true when every operation was applied; false when none
	// was (rolled back).
	Committed bool `json:"committed"`
	// Reason is the broker's code for a rollback ("rejected_ack",
	// "bad_request", ...); 0.15.1 brokers send none.
	Reason string `json:"reason,omitempty"`
	// Error is the broker's message for a rollback.
	Error string `json:"error,omitempty"`
	// FailedIndex is the position in Results (or, from a 2.x broker, the
	// operation) that caused the rollback, when known; -1 otherwise.
	FailedIndex int `json:"failedIndex"`
	// Results holds one result per pushed message and per ack, in order,
	// when the broker reports them (a 2.x rollback reports none). In a
	// rolled back transaction nothing was applied, whatever a result's
	// Success says: it tells only whether that operation alone passed.
	Results []TransactionOpResult `json:"results"`
}

// TransactionError is the error of a rolled back transaction: nothing of it
// was applied. It matches ErrRolledBack.
type TransactionError struct {
	// Result is the full answer, also returned by Commit.
	Result *TransactionResult
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

// Commit sends the transaction (POST /api/v1/transaction). It returns the
// result with Committed true when every operation was applied. When the
// broker rolled it back (an ack whose lease is gone, say), nothing was
// applied and the error is a *TransactionError (errors.As; it also matches
// ErrRolledBack) carrying the same result with the broker's reason.
//
// An empty transaction fails with ErrEmptyTransaction, and any invalid
// operation with its own error, before any request.
//
// A transaction is not safe to send twice (a repeat whose ack's lease was
// settled by the first is refused), so Commit sends it again only when the
// broker surely did not apply it: a failure to connect, and the answers
// 429 and 503 (the broker's "not applied, retry"). When the outcome is
// open, the error matches ErrOutcomeUnknown and there is no result: the
// connection failed or the ctx ended after the request may have reached
// the broker, or the broker answered a 5xx that may follow applying it
// (500, 502, 504, a 503 with code outcome_unknown; errors.As finds the
// *BrokerError), or an answer Commit cannot read. The transaction may
// have committed or not: check the broker's state (the pushed messages, by
// their transaction ids; the acked messages) before doing its work again.
// A rollback is reported only when the broker said so. Committing the same
// builder again never stores its messages twice, but after a first commit
// that was applied it is refused, which tells nothing about the first.
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

// decodeTransaction reads the answer of either broker generation: 2.x
// answers 200 with success false and a reason on rollback; 0.15.1 answers
// 200 to everything, with success false and an error (or only an error
// object) on failure.
func decodeTransaction(body []byte, req wire.TxnRequest) (*TransactionResult, error) {
	body = bytes.TrimSpace(body)
	// Success shadows the embedded bool, so that an absent verdict shows.
	var out struct {
		wire.TxnResponse
		Success *bool `json:"success"`
	}
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &out) != nil {
		return nil, outcomeUnknown(&BrokerError{Status: http.StatusOK, Method: http.MethodPost, Path: wire.RouteTransaction.Path(),
			Body: body, Message: "undecodable transaction answer"})
	}
	if out.Success == nil && out.Error == "" {
		// Neither committed nor refused: claiming a rollback (nothing
		// applied) would be a guess.
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
	// The results are flat: one per pushed item and per ack, in request
	// order. Fill what the broker left out from the request when the counts
	// agree.
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
