package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/uuid"
	"github.com/queen-go/queen/internal/wire"
)

// PushStatus is the broker's verdict on one pushed message.
type PushStatus string

const (
	PushQueued PushStatus = "queued" // stored
	// PushDuplicate: a message with its transaction id was already in the
	// partition; the result carries the original's ids.
	PushDuplicate PushStatus = "duplicate"
	// PushFailed: not stored (2.x "error"; 0.15.1 "buffered", "failed").
	PushFailed PushStatus = "error"
)

// PushResult is the outcome of one pushed message, in the order given.
type PushResult struct {
	Index         int        `json:"index"` // the message's position in the push
	Status        PushStatus `json:"status"`
	MessageID     string     `json:"messageId,omitempty"` // for a duplicate, the original's
	TransactionID string     `json:"transactionId"`
	Queue         string     `json:"queue"`
	PartitionID   string     `json:"partitionId,omitempty"` // opaque; 0.15.1 reports it for queued messages
	Offset        int64      `json:"offset"`                // in the partition; -1 when not reported
	Error         string     `json:"error,omitempty"`       // the broker's reason when Status is PushFailed
}

// Stored reports whether the message is in the queue (queued or duplicate).
func (r PushResult) Stored() bool { return r.Status == PushQueued || r.Status == PushDuplicate }

// PushError is returned by PushBuilder.Execute when the broker refused some
// of the messages.
type PushError struct {
	Results []PushResult // one per message, in push order
	Failed  []int        // indexes into Results of the messages not stored
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
	Payload any // any value that encodes to JSON
	// TransactionID: a second push of it to the partition within the
	// queue's dedup window is answered duplicate. Empty: the client makes
	// one.
	TransactionID string
	TraceID       string // a UUID; see Message.TraceID
}

// PushBuilder is one push request, made by QueueBuilder.Push. It is a
// value like QueueBuilder: every setter returns a changed copy and leaves
// p unchanged, and Execute may be called from several goroutines.
type PushBuilder struct {
	qb       *QueueBuilder
	payloads []any
	traceID  string
	txIDs    []string // given by TransactionIDs or TransactionID
	minted   []string // made by Push: the id of each message given none
}

// Push prepares a push of one message per payload to the builder's queue
// and partition ("Default" if unset). A payload is any value that encodes
// to JSON; json.RawMessage and []byte must hold JSON; an Item carries ids.
// Push makes the transaction ids of the messages that will not get one
// from an Item or TransactionIDs, so every Execute of the result, and of
// the builders made from it, sends the same ids. The list of payloads is
// copied (the payloads are not).
func (b *QueueBuilder) Push(payloads ...any) *PushBuilder {
	minted := make([]string, len(payloads))
	for i, pl := range payloads {
		// An *Item may change before Execute: it gets one too.
		if it, ok := pl.(Item); !ok || it.TransactionID == "" {
			minted[i] = newID()
		}
	}
	return &PushBuilder{qb: b, payloads: slices.Clone(payloads), minted: minted}
}

// TraceID sets the trace id (a UUID) of every message that has none; a 2.x
// broker keeps it only on a transaction's push (Message.TraceID).
func (p *PushBuilder) TraceID(id string) *PushBuilder {
	cp := *p
	cp.traceID = id
	return &cp
}

// TransactionIDs sets the messages' transaction ids, in order (an Item's
// own wins); an empty or missing one is the one Push made. ids is copied.
func (p *PushBuilder) TransactionIDs(ids ...string) *PushBuilder {
	cp := *p
	cp.txIDs = slices.Clone(ids)
	return &cp
}

// TransactionID sets the transaction id of a one-message push.
func (p *PushBuilder) TransactionID(id string) *PushBuilder {
	cp := *p
	cp.txIDs = []string{id}
	return &cp
}

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
		txID := p.minted[i]
		if i < len(p.txIDs) && p.txIDs[i] != "" {
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

// pushItem takes the transaction id of an Item, else txID, else makes one:
// before any send, so that a resend carries it.
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

// Execute sends the push and returns one result per message, in order,
// with a *PushError when some were not stored. After a transport failure,
// executing the builder again is safe within the broker's dedup window:
// it sends the transaction ids Push made, and a repeat is answered
// duplicate while the queue's DedupWindow lasts (2.x; default one hour, 0
// keeps none) or the message is stored (0.15.1). Past it, a second copy is
// stored.
func (p *PushBuilder) Execute(ctx context.Context) ([]PushResult, error) {
	items, err := p.items()
	if err != nil {
		return nil, err
	}
	hooks := p.qb.c.hooks
	start := hooks.now()
	res, err := p.send(ctx, items)
	hooks.pushed(ctx, p.qb.queue, p.qb.partition, len(items), start, res, err)
	return res, err
}

func (p *PushBuilder) send(ctx context.Context, items []wire.PushItem) ([]PushResult, error) {
	resp, err := p.qb.c.do(ctx, call{method: http.MethodPost, path: wire.RoutePush.Path(), body: wire.PushRequest{Items: items},
		key: pushKey(items[0].Queue, items[0].Partition)})
	if err != nil {
		return nil, err
	}
	res, err := decodePush(resp.status, resp.body, items)
	return res, resp.answered(err)
}

// decodePush reads an array of results, or a 0.15.1 200 error object.
func decodePush(status int, body []byte, items []wire.PushItem) ([]PushResult, error) {
	res, _, err := decodePushAnswer(status, body, items)
	return res, err
}

// decodePushAnswer also returns which items 0.15.1 answered "buffered"
// (kept to store later: outcome open), nil when none.
func decodePushAnswer(status int, body []byte, items []wire.PushItem) ([]PushResult, []bool, error) {
	fail := func(msg string) error { // a 2xx the client cannot read
		return outcomeUnknown(&BrokerError{Status: status, Method: http.MethodPost, Path: wire.RoutePush.Path(), Body: body, Message: msg})
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
	// Request order; a 0.15.1 "buffered" entry has no "index".
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

// encodePayload checks raw bytes rather than re-encoding them.
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

// newID: a UUIDv7, or a v4 if that fails.
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}
