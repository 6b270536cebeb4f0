package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/queen-go/queen/internal/wire"
)

// PushStatus is the broker's verdict on one pushed message.
type PushStatus string

const (
	// PushQueued: the message was stored.
	PushQueued PushStatus = "queued"
	// PushDuplicate: a message with the same transaction id already exists in
	// that partition; nothing new was stored and the result carries the
	// original message's ids.
	PushDuplicate PushStatus = "duplicate"
	// PushFailed: the message was not stored (2.x "error"; 0.15.1
	// "buffered" or "failed"). The result's Error says why.
	PushFailed PushStatus = "error"
)

// PushResult is the outcome of one pushed message, in the order given.
type PushResult struct {
	// Index is the position of the message in the push.
	Index int `json:"index"`
	// Status says whether the message was stored.
	Status PushStatus `json:"status"`
	// MessageID is the broker's id of the stored message (the original one
	// for a duplicate).
	MessageID string `json:"messageId,omitempty"`
	// TransactionID is the message's transaction id.
	TransactionID string `json:"transactionId"`
	// Queue is the queue the message went to.
	Queue string `json:"queue"`
	// PartitionID is the broker's opaque id of the message's partition, when
	// the broker reports it (0.15.1 does for queued messages; 2.x does not).
	PartitionID string `json:"partitionId,omitempty"`
	// Offset is the message's position in its partition; -1 when the broker
	// does not report it.
	Offset int64 `json:"offset"`
	// Error is the broker's reason when Status is PushFailed.
	Error string `json:"error,omitempty"`
}

// Stored reports whether the message is in the queue (queued now, or
// already there as a duplicate).
func (r PushResult) Stored() bool { return r.Status == PushQueued || r.Status == PushDuplicate }

// PushError is returned by PushBuilder.Execute when the broker refused some
// of the messages. Results holds every result (stored or not); Failed the
// indexes of the ones not stored.
type PushError struct {
	// Results holds one result per message, in push order.
	Results []PushResult
	// Failed holds the indexes (into Results) of the messages not stored.
	Failed []int
}

// Error counts the messages not stored and names the first of them.
func (e *PushError) Error() string {
	first := e.Results[e.Failed[0]]
	return fmt.Sprintf("queen: %d of %d pushed messages not stored (first: #%d %s: %s)",
		len(e.Failed), len(e.Results), first.Index, first.Status, first.Error)
}

// Item is a message to push with its own ids. Pass it to Push in place of a
// bare payload:
//
//	_, err := client.Queue("orders").Push(queen.Item{Payload: order, TransactionID: order.ID}).Execute(ctx)
type Item struct {
	// Payload is the message: any value that encodes to JSON.
	Payload any
	// TransactionID makes a retried push idempotent: the broker answers a
	// second push of the same id in the same partition with duplicate.
	// Empty means the client makes one.
	TransactionID string
	// TraceID must be a UUID when set. Which brokers keep it: see
	// Message.TraceID (a 2.x broker drops it on a plain push).
	TraceID string
}

// PushBuilder collects one push request. Create it with QueueBuilder.Push.
type PushBuilder struct {
	qb       *QueueBuilder
	payloads []any
	traceID  string
	txIDs    []string
}

// Push prepares a push of one message per payload to the builder's queue
// (and partition, if set; else the broker's "Default" partition). A payload
// is any value that encodes to JSON: a map, a struct, a number, a string, a
// slice; json.RawMessage and []byte are sent as they are and must hold valid
// JSON; an Item (or *Item) carries its own ids.
func (b *QueueBuilder) Push(payloads ...any) *PushBuilder {
	return &PushBuilder{qb: b, payloads: payloads}
}

// TraceID sets the trace id (a UUID) of every message of the push that has
// none of its own. A 2.x broker drops trace ids on a plain push (it keeps
// them on a transaction's push); a 0.15.1 broker keeps them. See
// Message.TraceID.
func (p *PushBuilder) TraceID(id string) *PushBuilder { p.traceID = id; return p }

// TransactionIDs sets the transaction ids of the messages, in order; an
// empty string (or a missing one) lets the client make one.
func (p *PushBuilder) TransactionIDs(ids ...string) *PushBuilder { p.txIDs = ids; return p }

// TransactionID sets the transaction id of a one-message push.
func (p *PushBuilder) TransactionID(id string) *PushBuilder { p.txIDs = []string{id}; return p }

// items validates the payloads and builds the wire items. Every item gets a
// transaction id, so that a retried request is deduplicated by the broker.
func (p *PushBuilder) items() ([]wire.PushItem, error) {
	b := p.qb
	if err := b.checkPush(); err != nil {
		return nil, err
	}
	if len(p.payloads) == 0 {
		return nil, fmt.Errorf("%w: push needs at least one payload", ErrNoMessages)
	}
	if len(p.txIDs) > len(p.payloads) {
		return nil, fmt.Errorf("%w: %d transaction ids for %d payloads", ErrInvalidOption, len(p.txIDs), len(p.payloads))
	}
	if p.traceID != "" {
		if err := checkTraceID(p.traceID); err != nil {
			return nil, err
		}
	}
	items := make([]wire.PushItem, len(p.payloads))
	for i, pl := range p.payloads {
		txID := ""
		if i < len(p.txIDs) {
			txID = p.txIDs[i]
		}
		it, err := pushItem(b.queue, b.partition, p.traceID, txID, pl)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		items[i] = it
	}
	return items, nil
}

// pushItem builds the wire item of one payload, for a plain push and for a
// transaction's push alike. An Item or *Item gives its own payload and ids
// (over txID and traceID); a trace id must be a UUID; the transaction id is
// made here when none was given, so that the item keeps it on a resend.
func pushItem(queue, partition, traceID, txID string, pl any) (wire.PushItem, error) {
	it := wire.PushItem{Queue: queue, Partition: partition, TraceID: traceID, TransactionID: txID}
	if ip, ok := pl.(*Item); ok && ip != nil {
		pl = *ip
	}
	if item, ok := pl.(Item); ok {
		pl = item.Payload
		if item.TransactionID != "" {
			it.TransactionID = item.TransactionID
		}
		if item.TraceID != "" {
			if err := checkTraceID(item.TraceID); err != nil {
				return wire.PushItem{}, err
			}
			it.TraceID = item.TraceID
		}
	}
	raw, err := encodePayload(pl)
	if err != nil {
		return wire.PushItem{}, err
	}
	it.Payload = raw
	if it.TransactionID == "" {
		it.TransactionID = newID()
	}
	return it, nil
}

// Execute sends the push and returns one result per message, in order. When
// the broker did not store some of them, the error is a *PushError (and the
// results are returned too). A transport failure after retries returns the
// error alone: pushing the same builder again is safe, since every message
// carries its transaction id.
func (p *PushBuilder) Execute(ctx context.Context) ([]PushResult, error) {
	items, err := p.items()
	if err != nil {
		return nil, err
	}
	// Freeze the minted ids so that a second Execute re-sends the same ones.
	p.txIDs = make([]string, len(items))
	for i := range items {
		p.txIDs[i] = items[i].TransactionID
	}
	hooks := p.qb.c.hooks
	start := hooks.now()
	res, err := p.send(ctx, items)
	hooks.pushed(ctx, p.qb.queue, p.qb.partition, len(items), start, res, err)
	return res, err
}

// send sends the push request of items and reads its answer.
func (p *PushBuilder) send(ctx context.Context, items []wire.PushItem) ([]PushResult, error) {
	resp, err := p.qb.c.do(ctx, call{method: http.MethodPost, path: wire.RoutePush.Path(), body: wire.PushRequest{Items: items},
		key: pushKey(items[0].Queue, items[0].Partition)})
	if err != nil {
		return nil, err
	}
	return decodePush(resp.status, resp.body, items)
}

// decodePush reads a push answer: an array of per-item results on both
// broker generations (snake_case ids), or an error object that a 0.15.1
// broker sends with HTTP 200.
func decodePush(status int, body []byte, items []wire.PushItem) ([]PushResult, error) {
	res, _, err := decodePushAnswer(status, body, items)
	return res, err
}

// decodePushAnswer is decodePush that also says which items a 0.15.1 broker
// answered "buffered": not stored yet, but kept by the broker to be stored
// later, so their outcome is open (nil when none was).
func decodePushAnswer(status int, body []byte, items []wire.PushItem) ([]PushResult, []bool, error) {
	fail := func(msg string) *BrokerError {
		return &BrokerError{Status: status, Method: http.MethodPost, Path: wire.RoutePush.Path(), Body: body, Message: msg}
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		return nil, nil, objectForResults(status, wire.RoutePush.Path(), body, "push")
	}
	var out []wire.PushResult
	if err := readWire(body, &out, func() { out = nil }); err != nil {
		return nil, nil, fail("undecodable push answer: " + err.Error())
	}
	if len(out) != len(items) {
		return nil, nil, fail(fmt.Sprintf("push answer has %d results for %d messages", len(out), len(items)))
	}
	res := make([]PushResult, len(out))
	var failed []int
	var buffered []bool
	// The answer lists the items in request order (its "index" repeats the
	// position; a 0.15.1 "buffered" entry has none), so position is trusted.
	for i, o := range out {
		r := PushResult{Index: i, MessageID: o.MessageID, TransactionID: o.TransactionID, Queue: o.QueueName,
			PartitionID: o.PartitionID, Offset: -1, Error: o.Error}
		if r.TransactionID == "" {
			r.TransactionID = items[i].TransactionID
		}
		if r.Queue == "" {
			r.Queue = orDefault(o.Queue, items[i].Queue)
		}
		if o.Offset != nil {
			r.Offset = *o.Offset
		}
		switch o.Status {
		case wire.PushQueued:
			r.Status = PushQueued
		case wire.PushDuplicate:
			r.Status = PushDuplicate
		default:
			r.Status = PushFailed
			if r.Error == "" {
				r.Error = "broker status " + o.Status
			}
			failed = append(failed, i)
			if o.Status == wire.PushBuffered {
				if buffered == nil {
					buffered = make([]bool, len(out))
				}
				buffered[i] = true
			}
		}
		res[i] = r
	}
	if len(failed) > 0 {
		return res, buffered, &PushError{Results: res, Failed: failed}
	}
	return res, buffered, nil
}

func checkTraceID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return fmt.Errorf("%w: %q", ErrInvalidTraceID, id)
	}
	return nil
}

// encodePayload turns a payload into JSON. Raw bytes are checked, not
// re-encoded.
func encodePayload(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if !json.Valid(x) {
			return nil, fmt.Errorf("%w: json.RawMessage is not valid JSON", ErrInvalidPayload)
		}
		return x, nil
	case []byte:
		if !json.Valid(x) {
			return nil, fmt.Errorf("%w: []byte payload is not valid JSON", ErrInvalidPayload)
		}
		return json.RawMessage(x), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	return raw, nil
}

// newID makes a transaction id: a UUIDv7 (time ordered), or a v4 if the
// clock source fails.
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}
