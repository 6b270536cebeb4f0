package queen

// The dead-letter calls: list, replay, delete and purge (docs/ADMIN.md#dead-letters).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// DLQListOptions filter and page ListDLQ.
type DLQListOptions struct {
	ConsumerGroup string
	Partition     string
	// From and To keep the messages that failed in [From, To); zero is
	// unbounded. With either set, an entry without a failure time is left
	// out.
	From, To time.Time
	Limit    int // page size; 0 means 100
	Offset   int // matching messages to skip, newest failure first
}

// DeadLetter is one message in a dead-letter queue. Fields a broker
// generation does not send keep their zero value (Offset: -1); which ones:
// docs/ADMIN.md#dead-letters.
type DeadLetter struct {
	// ID is the dead-letter row's id, which ReplayDLQ needs (empty on
	// 0.15.1, where MessageID holds the message's id).
	ID            string `json:"id"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition,omitempty"`
	PartitionID   string `json:"partitionId,omitempty"`
	ConsumerGroup string `json:"consumerGroup,omitempty"` // "__QUEUE_MODE__" for queue mode
	Offset        int64  `json:"offset"`
	// MessageID and TransactionID identify the original message.
	MessageID     string          `json:"messageId,omitempty"`
	TransactionID string          `json:"transactionId"`
	Payload       json.RawMessage `json:"payload"` // as pushed
	Error         string          `json:"error,omitempty"`
	// RetryCount is the broker's retry counter at the failure (per
	// partition and group, not per message: docs/RETRIES.md).
	RetryCount       int       `json:"retryCount"`
	FailedAt         time.Time `json:"failedAt,omitzero"`
	MessageCreatedAt time.Time `json:"messageCreatedAt,omitzero"` // 0.15.1 only
	ProducerSub      string    `json:"producerSub,omitempty"`     // 0.15.1 only
}

// DLQPage is one page of ListDLQ.
type DLQPage struct {
	Messages []DeadLetter `json:"messages"` // newest failure first
	// Total is how many messages matched before paging (a 2.x broker's
	// count ignores the partition and time filters).
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// ListDLQ lists the dead-lettered messages of queue (GET /api/v1/dlq). Every
// returned message matches opts: filters the broker ignores are applied to
// the page received. On 0.15.1, which does not page, each call transfers
// the queue's whole list and pages it here (docs/ADMIN.md#dead-letters).
func (a *Admin) ListDLQ(ctx context.Context, queue string, opts DLQListOptions) (DLQPage, error) {
	out, _, paged, err := a.listDLQ(ctx, queue, opts)
	if err != nil || paged {
		return out, err
	}
	if out.Limit == 0 {
		out.Limit = 100
	}
	from := min(out.Offset, len(out.Messages))
	out.Messages = out.Messages[from:min(from+out.Limit, len(out.Messages))]
	return out, nil
}

// DeadLetters yields the dead letters of queue that match opts, newest
// failure first, one ListDLQ page of opts.Limit after another from
// opts.Offset, to the broker's last page. An error is yielded once and
// ends the sequence.
//
//	for dl, err := range client.Admin().DeadLetters(ctx, "emails", queen.DLQListOptions{}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(dl.Error, string(dl.Payload))
//	}
//
// Pages are read by offset from a list that may change: a row may be
// yielded twice (compare ID) or missed. To replay every dead letter, run
// passes until one yields nothing (docs/ADMIN.md#dead-letters).
func (a *Admin) DeadLetters(ctx context.Context, queue string, opts DLQListOptions) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		if opts.Limit == 0 {
			opts.Limit = 100
		}
		for {
			page, raw, paged, err := a.listDLQ(ctx, queue, opts)
			if err != nil {
				yield(DeadLetter{}, err)
				return
			}
			msgs := page.Messages
			if !paged {
				msgs = msgs[min(opts.Offset, len(msgs)):]
			}
			for _, dl := range msgs {
				if !yield(dl, nil) {
					return
				}
			}
			opts.Offset += raw
			if !paged || raw == 0 || (page.Total > 0 && opts.Offset >= page.Total) || (page.Total <= 0 && raw < opts.Limit) {
				return
			}
		}
	}
}

// checkDLQOptions refuses bad ListDLQ options before any request.
func checkDLQOptions(queue string, opts DLQListOptions) error {
	if err := checkName(queueName, queue); err != nil {
		return err
	}
	if err := checkOptionalName(groupName, opts.ConsumerGroup); err != nil {
		return err
	}
	if err := checkOptionalName(partitionName, opts.Partition); err != nil {
		return err
	}
	if opts.Limit < 0 || opts.Offset < 0 {
		return fmt.Errorf("%w: negative limit or offset", ErrInvalidOption)
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
		return fmt.Errorf("%w: From %s is not before To %s", ErrInvalidOption, opts.From, opts.To)
	}
	return nil
}

// listDLQ asks for one page. raw counts the rows sent, before the client's
// filters. Unless paged (0.15.1), out.Messages is the whole filtered list,
// neither offset nor limit applied.
func (a *Admin) listDLQ(ctx context.Context, queue string, opts DLQListOptions) (out DLQPage, raw int, paged bool, err error) {
	if err := checkDLQOptions(queue, opts); err != nil {
		return DLQPage{}, 0, false, err
	}
	g, err := a.c.generation(ctx)
	if err != nil {
		return DLQPage{}, 0, false, err
	}
	q := wire.DLQQuery{Queue: queue, ConsumerGroup: opts.ConsumerGroup}
	if g.DLQPaging {
		q.Limit, q.Offset = opts.Limit, opts.Offset
	}
	if g.DLQFilters {
		q.Partition = opts.Partition
		if !opts.From.IsZero() {
			q.From = opts.From.UTC().Format(time.RFC3339Nano)
		}
		if !opts.To.IsZero() {
			q.To = opts.To.UTC().Format(time.RFC3339Nano)
		}
	}
	vals, err := q.Values()
	if err != nil {
		return DLQPage{}, 0, false, fmt.Errorf("queen: encode dlq query: %w", err)
	}
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteDLQ.Path(), query: vals}, nil)
	if err != nil {
		return DLQPage{}, 0, false, err
	}
	var page wire.DLQListResponse
	body := bytes.TrimSpace(resp.body)
	if len(body) > 0 && body[0] == '[' {
		err = json.Unmarshal(body, &page.Messages)
		page.Total = len(page.Messages)
	} else {
		err = json.Unmarshal(body, &page)
	}
	if err != nil {
		return DLQPage{}, 0, false, resp.refusal(http.MethodGet, wire.RouteDLQ.Path(), "undecodable dlq answer: "+err.Error())
	}
	out = DLQPage{Total: page.Total, Limit: opts.Limit, Offset: opts.Offset, Messages: make([]DeadLetter, 0, len(page.Messages))}
	if page.Pagination != nil && g.DLQPaging {
		out.Limit, out.Offset = page.Pagination.Limit, page.Pagination.Offset
	}
	for i := range page.Messages {
		d := deadLetterFromWire(&page.Messages[i], !g.DLQRowIDs)
		if d.Queue != "" && d.Queue != queue {
			continue
		}
		if d.Queue == "" {
			d.Queue = queue
		}
		if opts.Partition != "" && d.Partition != "" && d.Partition != opts.Partition {
			continue
		}
		if opts.ConsumerGroup != "" && d.ConsumerGroup != "" && d.ConsumerGroup != opts.ConsumerGroup {
			continue
		}
		if (!opts.From.IsZero() || !opts.To.IsZero()) && !inWindow(d.FailedAt, opts.From, opts.To) {
			continue // with no (readable) failure time, a row cannot be shown to match
		}
		out.Messages = append(out.Messages, d)
	}
	if !g.DLQTotal {
		out.Total = len(out.Messages)
	}
	return out, len(page.Messages), g.DLQPaging, nil
}

// inWindow: t is not zero and in [from, to), a zero bound being open.
func inWindow(t, from, to time.Time) bool {
	return !t.IsZero() && (from.IsZero() || !t.Before(from)) && (to.IsZero() || t.Before(to))
}

// deadLetterFromWire reads one entry; on 0.15.1 (legacy) id and createdAt
// are the message's.
func deadLetterFromWire(m *wire.DLQMessage, legacy bool) DeadLetter {
	d := DeadLetter{ID: m.ID, Queue: m.Queue, Partition: m.Partition, PartitionID: m.PartitionID, Offset: -1,
		MessageID: m.MessageID, TransactionID: m.TransactionID, RetryCount: m.RetryCount, FailedAt: parseBrokerTime(m.FailedAt)}
	if legacy {
		d.ID, d.MessageID, d.MessageCreatedAt = "", m.ID, parseBrokerTime(m.CreatedAt)
	} else if d.FailedAt.IsZero() {
		d.FailedAt = parseBrokerTime(m.CreatedAt)
	}
	if m.ProducerSub != nil {
		d.ProducerSub = *m.ProducerSub
	}
	if m.ConsumerGroup != nil {
		d.ConsumerGroup = *m.ConsumerGroup
	}
	if m.Offset != nil {
		d.Offset = *m.Offset
	}
	if m.ErrorMessage != nil {
		d.Error = *m.ErrorMessage
	}
	switch {
	case len(m.Payload) > 0:
		d.Payload = m.Payload
	case len(m.Data) > 0:
		d.Payload = m.Data
	default:
		d.Payload = json.RawMessage("null")
	}
	return d
}

// ReplayResult says what a DLQ replay did.
type ReplayResult struct {
	// Moved: a copy was pushed to the tail and the row removed. False for
	// a duplicate (the copy was already there; nothing changed).
	Moved  bool   `json:"moved"`
	Result string `json:"result"` // "moved" or "duplicate"
	// Queue and Partition are where the copy went.
	Queue     string `json:"queue,omitempty"`
	Partition string `json:"partition,omitempty"`
	// TransactionID is the copy's ("dlq:<row id>" on 2.x); MessageID its id.
	TransactionID         string `json:"transactionId,omitempty"`
	MessageID             string `json:"messageId,omitempty"`
	Offset                int64  `json:"offset"` // -1 when unknown
	OriginalTransactionID string `json:"originalTransactionId,omitempty"`
}

// ReplayDLQ moves a dead letter back to the tail of its partition in one
// step (POST /api/v1/dlq/{id}/replay, or the older
// /api/v1/messages/{partitionId}/{transactionId}/retry). Without dl.ID or
// that address it fails with ErrNotReplayable before any request; a row no
// longer there is a *BrokerError with Status 404; 0.15.1, which has no
// replay route, gives ErrNotSupported. It is sent again only when the
// broker surely did not apply it; an open outcome matches
// ErrOutcomeUnknown: look for the copy before replaying again
// (docs/ADMIN.md#replay).
func (a *Admin) ReplayDLQ(ctx context.Context, dl DeadLetter) (ReplayResult, error) {
	byAddress := dl.PartitionID != "" && dl.TransactionID != ""
	if dl.ID == "" && !byAddress {
		return ReplayResult{}, ErrNotReplayable
	}
	if g := a.c.mem.gen.Load(); g != nil && !g.DLQReplay {
		return ReplayResult{}, fmt.Errorf("%w: a %s broker cannot replay dead letters", ErrNotSupported, g.Name)
	}
	addrPath := ""
	if byAddress {
		addrPath = wire.RouteMessageRetry.Path(dl.PartitionID, dl.TransactionID)
	}
	path := addrPath
	if dl.ID != "" {
		path = wire.RouteDLQReplay.Path(dl.ID)
	}
	var out struct {
		wire.DLQMoveResponse
		Success *bool `json:"success"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodPost, path: path, body: struct{}{}, once: true}, &out)
	var be *BrokerError
	if err != nil && addrPath != "" && path != addrPath && errors.As(err, &be) && routeMissing(be) {
		path = addrPath
		out.DLQMoveResponse, out.Success = wire.DLQMoveResponse{}, nil
		resp, err = a.c.doJSON(ctx, call{method: http.MethodPost, path: path, body: struct{}{}, once: true}, &out)
	}
	if err != nil && errors.As(err, &be) && routeMissing(be) {
		return ReplayResult{}, fmt.Errorf("%w: the broker has no dead-letter replay route (POST %s answered %d)", ErrNotSupported, path, be.Status)
	}
	if err != nil {
		return ReplayResult{}, err
	}
	if refused(out.Success, out.Error) || out.Result == "gone" {
		return ReplayResult{}, &BrokerError{Status: resp.status, Method: http.MethodPost, Path: path, Body: resp.body,
			Code: out.Reason, Message: orDefault(out.Error, "replay refused")}
	}
	r := ReplayResult{Result: out.Result, Moved: out.Result == "moved", Queue: orDefault(out.Queue, dl.Queue),
		Partition: orDefault(out.Partition, dl.Partition), TransactionID: out.TransactionID, MessageID: out.MessageID,
		Offset: -1, OriginalTransactionID: orDefault(out.OriginalTransactionID, dl.TransactionID)}
	if out.Result == "" {
		r.Moved, r.Result = true, "moved"
	}
	if ra := out.ReplayedAs; ra != nil {
		r.TransactionID = orDefault(ra.TransactionID, r.TransactionID)
		if r.Moved {
			r.MessageID = orDefault(ra.MessageID, r.MessageID)
		}
		if ra.Offset != nil {
			r.Offset = *ra.Offset
		}
	}
	return r, nil
}

// routeMissing: 2.x no_such_route, a 405, or a 404 that is not JSON (a
// JSON 404 is about the row, 2.x {"result":"gone"}).
func routeMissing(be *BrokerError) bool {
	if be.Status == http.StatusMethodNotAllowed || be.Code == "no_such_route" {
		return true
	}
	if be.Status != http.StatusNotFound {
		return false
	}
	return !json.Valid(be.Body)
}
