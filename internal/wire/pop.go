package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// PopResponse is the 200 body of a pop, of either broker generation
// (PROTOCOL.md §3.4, §11, §13). queentest encodes it with encoding/json;
// the client decodes it with github.com/go-json-experiment/json, whose
// defaults it relies on: a null reads as the zero value, unknown members
// are skipped. No field is a pointer where absent and empty mean the
// same, so that decoding a pop of many messages allocates little.
//
// 2.x sends every field but Error; Conflation and ConflationConflict only
// on conflating pops, Autopilot only when it sized the pop. 0.15.1 sends
// no conflation or autopilot field, leaseId null on a long-poll timeout,
// and answers "no messages" as success:false with Error
// no_available_partition, partition_not_found or lease_held.
type PopResponse struct {
	Success            bool           `json:"success"`
	Error              string         `json:"error,omitempty"`
	Queue              string         `json:"queue"`
	Partition          string         `json:"partition"`
	PartitionID        string         `json:"partitionId"`
	LeaseID            string         `json:"leaseId"`
	ConsumerGroup      string         `json:"consumerGroup"`
	Messages           []PopMessage   `json:"messages"`
	PartitionsClaimed  int            `json:"partitionsClaimed"`
	Conflation         *bool          `json:"conflation,omitempty"`
	ConflationConflict *bool          `json:"conflationConflict,omitempty"`
	Autopilot          *AutopilotEcho `json:"autopilot,omitempty"`
}

// AutopilotEcho is the broker's report of the sizes it chose for a pop.
type AutopilotEcho struct {
	Partitions int  `json:"partitions"`
	Batch      int  `json:"batch"`
	WaitMs     *int `json:"waitMs,omitempty"`
}

// PopMessage is one message of a pop answer. DeliveryAttempt (at least 1)
// and Offset are 2.x fields, absent from 0.15.1 answers; Queue is sent by
// neither (the answer's Queue is the messages' queue).
type PopMessage struct {
	ID              string      `json:"id"`
	TransactionID   string      `json:"transactionId"`
	TraceID         NullString  `json:"traceId"`
	Data            Payload     `json:"data"`
	ProducerSub     NullString  `json:"producerSub"`
	CreatedAt       string      `json:"createdAt"`
	PartitionID     string      `json:"partitionId"`
	Partition       string      `json:"partition"`
	LeaseID         string      `json:"leaseId"`
	ConsumerGroup   string      `json:"consumerGroup"`
	DeliveryAttempt int         `json:"deliveryAttempt,omitempty"`
	Offset          OptionalInt `json:"offset,omitzero"`
	Queue           string      `json:"queue,omitempty"`
}

// NullString is a string that travels as null when empty (a message's
// traceId or producerSub), and reads null as empty.
type NullString string

// MarshalJSON writes the string, or null when it is empty.
func (s NullString) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(s))
}

// OptionalInt is a number that may be absent or null (Set false), such as
// a message's offset: 0 is an offset, absence is none.
type OptionalInt struct {
	N   int64
	Set bool
}

// Int returns an OptionalInt set to n.
func Int(n int64) OptionalInt { return OptionalInt{N: n, Set: true} }

// IsZero reports whether o is unset (omitzero leaves it off the wire).
func (o OptionalInt) IsZero() bool { return !o.Set }

// MarshalJSON writes the number, or null when unset.
func (o OptionalInt) MarshalJSON() ([]byte, error) {
	if !o.Set {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, o.N, 10), nil
}

// UnmarshalJSONFrom reads a number or null.
func (o *OptionalInt) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*o = OptionalInt{}
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return err
	}
	if err := jsonv2.UnmarshalDecode(dec, &o.N); err != nil {
		return err
	}
	o.Set = true
	return nil
}

// UnmarshalJSON is UnmarshalJSONFrom for encoding/json.
func (o *OptionalInt) UnmarshalJSON(b []byte) error {
	*o = OptionalInt{}
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	if err := json.Unmarshal(b, &o.N); err != nil {
		return err
	}
	o.Set = true
	return nil
}

// Payload is a message's data: the raw JSON value as the broker sent it,
// and the object it holds, if it is one (else Object is nil). It travels
// as Raw (null when Raw is empty).
type Payload struct {
	Raw    json.RawMessage
	Object map[string]any
}

// MarshalJSON writes Raw, or null when it is empty.
func (p Payload) MarshalJSON() ([]byte, error) {
	if len(p.Raw) == 0 {
		return []byte("null"), nil
	}
	return p.Raw, nil
}

// UnmarshalJSONFrom keeps the value's bytes, and reads an object into
// Object with the same decoder, so that the keys and strings a pop's
// messages repeat are made once (an object that does not decode leaves
// Object nil). The bytes are those the decoder has not read yet when the
// value starts: an answer decoded whole in memory holds them (they are
// copied all the same, so that Raw outlives the answer's buffer).
func (p *Payload) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*p = Payload{}
	rest := dec.UnreadBuffer()
	start := dec.InputOffset()
	var err error
	if dec.PeekKind() == '{' {
		var v any // an any, not a map: the decoder's fast path for objects
		err = jsonv2.UnmarshalDecode(dec, &v)
		p.Object, _ = v.(map[string]any)
		if err != nil {
			p.Object = nil
		}
	} else {
		err = dec.SkipValue()
	}
	if err != nil {
		return err
	}
	n := dec.InputOffset() - start
	if n < 0 || n > int64(len(rest)) {
		return fmt.Errorf("wire: payload of %d bytes beyond the %d read", n, len(rest))
	}
	p.Raw = bytes.Clone(bytes.TrimLeft(rest[:n], " \t\r\n:"))
	return nil
}

// UnmarshalJSON is UnmarshalJSONFrom for encoding/json.
func (p *Payload) UnmarshalJSON(b []byte) error {
	*p = Payload{Raw: bytes.Clone(bytes.TrimSpace(b))}
	if len(p.Raw) > 0 && p.Raw[0] == '{' {
		_ = json.Unmarshal(p.Raw, &p.Object)
	}
	return nil
}
