package queen

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Message is one message handed out by a pop; keep it as it is to ack or
// renew it (TransactionID, PartitionID, LeaseID and ConsumerGroup name it).
type Message struct {
	ID            string
	TransactionID string // with PartitionID, identifies the message
	PartitionID   string // opaque: never parse it
	LeaseID       string // empty after commit on delivery: nothing to ack
	// Queue is empty for a discovery pop whose answer names none (2.x).
	Queue         string
	Partition     string
	ConsumerGroup string // "__QUEUE_MODE__" in queue mode
	CreatedAt     time.Time
	// TraceID is the trace id given at push, if kept: 2.x keeps it only for
	// a transaction's push, 0.15.1 when it is a UUID.
	TraceID     string
	ProducerSub string // the authenticated producer, under auth
	// DeliveryAttempt is 2.x's count of the pop that delivered the message,
	// not of the message (0 on 0.15.1): do not count failures by it
	// (docs/RETRIES.md, "DeliveryAttempt").
	DeliveryAttempt int
	Offset          int64 // in the partition; -1 when not reported (0.15.1)
	// Data is a JSON object payload, numbers as float64 (not exact beyond
	// 2^53: use Decode or Raw); nil for any other payload.
	Data map[string]any
	Raw  json.RawMessage // the payload as pushed; "null" when none

	route   string // the pop's routing key, for its acks (ackKey)
	attempt int    // the loop's handler call for it (Attempt; 0: the first)
}

// Attempt is the number of the consume loop's handler call with this
// message: 1 at the first, one more at each retry in place after a
// failure (docs/RETRIES.md), so a handler can tell which attempt it is in
// (a webhook's X-Attempt header, say). It counts in one Execute: a message
// given back (at a stop, or when its lease ran out) keeps its count in that
// Execute alone, so one the same loop pops again goes on from it, while
// one that another worker, a later Execute or a new process takes over
// starts again from 1 (a stop ends the Execute, so counts restart after
// it). A message from Pop says 1. Unlike DeliveryAttempt, it counts the calls
// of the handler, on both broker generations, not the broker's claims.
func (m *Message) Attempt() int { return max(m.attempt, 1) }

// Decode unmarshals the message's payload into a value of type T.
//
//	order, err := queen.Decode[Order](msg)
func Decode[T any](msg *Message) (T, error) {
	var v T
	if msg == nil {
		return v, fmt.Errorf("queen: decode: nil message")
	}
	if err := json.Unmarshal(msg.Raw, &v); err != nil {
		return v, fmt.Errorf("queen: decode message %s: %w", messageName(msg), err)
	}
	return v, nil
}

// timeLayouts are the layouts the broker's createdAt has been seen in.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999", "2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999Z07:00"}

func parseBrokerTime(s string) time.Time {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// fromReply fills m from a pop answer's message. queue and lease are the
// answer's own, for a message that does not carry them.
func fromReply(m *Message, r *wire.PopMessage, queue, lease string) {
	*m = Message{
		ID:              r.ID,
		TransactionID:   r.TransactionID,
		PartitionID:     r.PartitionID,
		LeaseID:         r.LeaseID,
		Queue:           r.Queue,
		Partition:       r.Partition,
		ConsumerGroup:   r.ConsumerGroup,
		CreatedAt:       parseBrokerTime(r.CreatedAt),
		TraceID:         string(r.TraceID),
		ProducerSub:     string(r.ProducerSub),
		DeliveryAttempt: r.DeliveryAttempt,
		Offset:          -1,
		Data:            r.Data.Object,
		Raw:             r.Data.Raw,
	}
	if m.Queue == "" {
		m.Queue = queue
	}
	if m.LeaseID == "" {
		m.LeaseID = lease
	}
	if r.Offset.Set {
		m.Offset = r.Offset.N
	}
	if len(m.Raw) == 0 {
		m.Raw = json.RawMessage("null")
	}
}
