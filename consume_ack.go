package queen

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/queen-go/queen/internal/wire"
)

// The consume loop settles each pop with one ack request. On the hot path
// the body is written by hand (byte for byte what json.Marshal writes for
// the same wire structs) and the answer is read by the lean reader when it
// is the usual all-success array; anything else goes through decodeAcks,
// the same as SettleBatch. A test holds the bytes to json.Marshal's.

// sendAcks sends acks (one pop's outcomes, one group) in one request.
func (r *consumeRun) sendAcks(ctx context.Context, acks []Settlement) error {
	for _, a := range acks {
		if a.Message == nil || a.Message.TransactionID == "" || a.Message.PartitionID == "" || !a.Status.valid() {
			_, _, _, err := r.c.settleBatch(ctx, acks, AckOptions{ConsumerGroup: r.group})
			return err
		}
	}
	group := r.group
	if group == "" {
		group = messageGroup(acks[0].Message)
		for _, a := range acks[1:] {
			if messageGroup(a.Message) != group { // not from one pop: SettleBatch says why
				_, _, _, err := r.c.settleBatch(ctx, acks, AckOptions{})
				return err
			}
		}
	}
	path, body := ackBody(acks, group)
	resp, err := r.c.do(ctx, call{method: http.MethodPost, path: path, raw: body})
	if err != nil {
		return err
	}
	if allAcked(resp.body, len(acks)) {
		return nil
	}
	items := make([]wire.AckItem, len(acks))
	for i, a := range acks {
		items[i] = wire.AckItem{TransactionID: a.Message.TransactionID, PartitionID: a.Message.PartitionID,
			LeaseID: a.Message.LeaseID, Status: string(a.Status), Error: a.Error}
	}
	_, err = decodeAcks(resp.body, path, items)
	return err
}

// ackBody is the route and body SettleBatch sends for acks and group: the
// single ack route for one message, the batch route otherwise.
func ackBody(acks []Settlement, group string) (string, []byte) {
	b := make([]byte, 0, 64+len(acks)*(160+len(acks[0].Message.LeaseID)))
	if len(acks) == 1 {
		b = appendAckItem(b, acks[0], false)
		if group != "" {
			b = append(b, `,"consumerGroup":`...)
			b = appendJSONString(b, group)
		}
		return wire.RouteAck, append(b, '}')
	}
	b = append(b, '{')
	if group != "" {
		b = append(b, `"consumerGroup":`...)
		b = appendJSONString(b, group)
		b = append(b, ',')
	}
	b = append(b, `"acknowledgments":[`...)
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAckItem(b, a, true)
	}
	return wire.RouteAckBatch, append(b, "]}"...)
}

// appendAckItem writes a wire.AckItem; closed says whether to close the
// object (a single ack goes on with its group).
func appendAckItem(b []byte, a Settlement, closed bool) []byte {
	m := a.Message
	b = append(b, `{"transactionId":`...)
	b = appendJSONString(b, m.TransactionID)
	b = append(b, `,"partitionId":`...)
	b = appendJSONString(b, m.PartitionID)
	if m.LeaseID != "" {
		b = append(b, `,"leaseId":`...)
		b = appendJSONString(b, m.LeaseID)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(a.Status))
	if a.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, a.Error)
	}
	if closed {
		b = append(b, '}')
	}
	return b
}

// appendJSONString writes s as json.Marshal does.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

var ackResultKeys = []string{"success"}

// allAcked reports whether body is an array of n ack results that all say
// success:true, as read by the lean reader. false means "look closer"
// (decodeAcks), not failure.
func allAcked(body []byte, n int) bool {
	r := popReader{b: body}
	if !r.eat('[') {
		return false
	}
	count := 0
	if !r.eat(']') {
		for {
			success := false
			ok := r.object(ackResultKeys, func(int) bool {
				if r.next() == 't' {
					success = true
					return r.literal("true")
				}
				return false
			})
			if !ok || !success {
				return false
			}
			count++
			if r.eat(']') {
				break
			}
			if !r.eat(',') {
				return false
			}
		}
	}
	r.ws()
	return r.i == len(r.b) && count == n
}
