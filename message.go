package queen

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Message is one message handed out by a pop. The fields that identify it
// for an ack (TransactionID, PartitionID, LeaseID, ConsumerGroup) are filled
// from the broker's answer; keep the message as it is to ack or renew it.
type Message struct {
	// ID is the broker's message id.
	ID string
	// TransactionID is the message's transaction id (given at push, or minted
	// by the client or broker). With PartitionID it identifies the message.
	TransactionID string
	// PartitionID is the broker's opaque partition id (a decimal string on
	// 2.x, a UUID on 0.15.1). Never parse it.
	PartitionID string
	// LeaseID is the lease of the pop that delivered the message; empty when
	// the pop committed on delivery (nothing to ack).
	LeaseID string
	// Queue and Partition name where the message lives. Queue is empty for
	// a message of a discovery pop (Namespace, Task) whose answer names no
	// queue, as a 2.x broker's does.
	Queue     string
	Partition string
	// ConsumerGroup is the group that popped it; "__QUEUE_MODE__" in queue mode.
	ConsumerGroup string
	// CreatedAt is when the broker stored the message.
	CreatedAt time.Time
	// TraceID is the trace id given at push, if the broker kept it. A 2.x
	// broker keeps it only for messages pushed in a transaction
	// (TransactionPush.TraceID) and drops it on a plain push; a 0.15.1
	// broker keeps it when it is a valid UUID, and does not store a
	// message whose trace id is not one (its push answers "buffered"),
	// which is why the client refuses such a trace id (ErrInvalidTraceID).
	TraceID string
	// ProducerSub is the authenticated producer, when the broker runs with auth.
	ProducerSub string
	// DeliveryAttempt is the broker's count of the pop that delivered the
	// message, not of the message: on 2.x a pop that starts where the
	// previous leased pop of its partition and group started counts one
	// more, any other pop 1, and every message of the pop carries the
	// count. So a message given back behind a failed neighbour comes back
	// with 1, and a first delivery can show 2 after a lease expired; 0
	// when the broker does not report it (0.15.1). Do not count failures
	// by it: a consume loop counts each message's own (RetryLimit); with
	// Pop, keep a count keyed by PartitionID and TransactionID.
	DeliveryAttempt int
	// Offset is the message's position in its partition; -1 when the broker
	// does not report it (0.15.1).
	Offset int64
	// Data is the payload when it is a JSON object; nil otherwise (see Raw).
	// Its numbers are float64, as encoding/json decodes them into an any, so
	// an integer beyond 2^53 (9007199254740993, say) is not exact here:
	// read exact integers with Decode[T] into an integer field (or a
	// json.Number), or from Raw.
	Data map[string]any
	// Raw is the payload exactly as pushed: any JSON value. "null" when the
	// message had no payload.
	Raw json.RawMessage

	// route is the routing key of the pop that delivered the message, for
	// its acks and renewals (see ackKey).
	route string
}

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
