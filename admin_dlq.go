package queen

// The dead-letter calls: list, replay, delete and purge (docs/ADMIN.md#dead-letters).

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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
		return DLQPage{}, 0, false, resp.unreadable(http.MethodGet, wire.RouteDLQ.Path(), "undecodable dlq answer: "+err.Error())
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

// ErrDeadLetterNotFound: no dead letter where a replay or a delete looked:
// it was replayed or removed meanwhile, or the message at that address is
// not dead-lettered. After a broker's 404, errors.As finds the
// *BrokerError too.
var ErrDeadLetterNotFound = errors.New("queen: dead letter not found")

// What a replay did (ReplayResult.Result).
const (
	// ReplayMoved: the copy was stored at the tail of its partition and the
	// letter removed.
	ReplayMoved = "moved"
	// ReplayKept: the copy was stored; the letter stays listed, the broker
	// having no way to remove it (Removed false).
	ReplayKept = "kept"
	// ReplayDuplicate: the copy was already stored, by an earlier replay of
	// the letter or of another group's letter of the same message; nothing
	// was stored. Removed says whether the letter is gone from the list.
	ReplayDuplicate = "duplicate"
)

// ReplayResult says what a DLQ replay did.
type ReplayResult struct {
	// Moved is Result == ReplayMoved: a copy stored and the letter removed.
	Moved  bool   `json:"moved"`
	Result string `json:"result"` // ReplayMoved, ReplayKept or ReplayDuplicate
	// Removed: the letter is no longer listed (removed by this replay or
	// by an earlier one).
	Removed bool `json:"removed"`
	// Queue and Partition are where the copy is.
	Queue     string `json:"queue,omitempty"`
	Partition string `json:"partition,omitempty"`
	// TransactionID is the copy's: "dlq:<row id>" on 2.x, "dlq:" and the
	// original's on 0.15.1 (see ReplayDLQ). MessageID is the copy's id
	// when the broker says it; "" for a duplicate (a 2.x broker names no
	// copy there: the zero UUID).
	TransactionID         string `json:"transactionId,omitempty"`
	MessageID             string `json:"messageId,omitempty"`
	Offset                int64  `json:"offset"` // -1 when unknown
	OriginalTransactionID string `json:"originalTransactionId,omitempty"`
}

// ReplayDLQ puts a dead letter's message back at the tail of its
// partition, where every consumer group of the queue reads it again, not
// only the group that dead-lettered it, and removes the letter where the
// broker can. Name the letter by dl.ID (2.x) or by dl.PartitionID and
// dl.TransactionID (both generations: a 0.15.1 letter has no id); with
// neither it fails with ErrNotReplayable before any request. Replaying a
// letter again stores no second copy (ReplayDuplicate, or
// ErrDeadLetterNotFound once a 2.x broker removed the letter).
//
// 2.x moves the letter in one step (POST /api/v1/dlq/{id}/replay, or
// /api/v1/messages/{partitionId}/{transactionId}/retry when the first
// route is missing). 0.15.1 has no replay route, so the client does it:
// it reads the message (GET /api/v1/messages/{partitionId}/{transactionId};
// ErrDeadLetterNotFound unless it is dead-lettered), pushes its payload to
// its queue and partition under the transaction id "dlq:" + the
// original's (a broker stores one message per partition and transaction
// id), then deletes the original message, and with it its letters of
// every group (DELETE on the same path); without that route the letter
// stays listed (ReplayKept). The copy is stored before the original is
// deleted: a group that had not read the original reads the copy instead,
// once, at the tail. docs/ADMIN.md#replay.
//
// The one-step replay is sent again only when the broker surely did not
// apply it: an open outcome matches ErrOutcomeUnknown, and replaying again
// is then safe. On 0.15.1 an error after the copy was stored comes with
// the result (ReplayKept) and matches neither ErrNotSent nor
// ErrOutcomeUnknown (the replay was applied); replaying again removes the
// letter.
func (a *Admin) ReplayDLQ(ctx context.Context, dl DeadLetter) (ReplayResult, error) {
	if dl.ID == "" && (dl.PartitionID == "" || dl.TransactionID == "") {
		return ReplayResult{}, ErrNotReplayable
	}
	if g := a.c.mem.gen.Load(); g != nil && !g.DLQReplay {
		return a.replayByPush(ctx, *g, dl)
	}
	r, err := a.replayMove(ctx, dl)
	if !errors.Is(err, ErrNotSupported) {
		return r, err
	}
	g, gerr := a.c.generation(ctx)
	if gerr != nil || g.DLQReplay {
		return r, err
	}
	return a.replayByPush(ctx, *g, dl)
}

// replayMove is the broker's one-step replay (2.x).
func (a *Admin) replayMove(ctx context.Context, dl DeadLetter) (ReplayResult, error) {
	addrPath := ""
	if dl.PartitionID != "" && dl.TransactionID != "" {
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
	if err != nil && errors.As(err, &be) {
		switch {
		case routeMissing(be):
			return ReplayResult{}, fmt.Errorf("%w: the broker has no dead-letter replay route (POST %s answered %d)", ErrNotSupported, path, be.Status)
		case be.Status == http.StatusNotFound:
			return ReplayResult{}, fmt.Errorf("%w: %w", ErrDeadLetterNotFound, err)
		}
	}
	if err != nil {
		return ReplayResult{}, err
	}
	if refused(out.Success, out.Error) || out.Result == "gone" {
		be := &BrokerError{Status: resp.status, Method: http.MethodPost, Path: path, Body: resp.body,
			Code: out.Reason, Message: orDefault(out.Error, "replay refused")}
		if out.Result == "gone" {
			return ReplayResult{}, fmt.Errorf("%w: %w", ErrDeadLetterNotFound, be)
		}
		return ReplayResult{}, be
	}
	r := ReplayResult{Result: out.Result, Queue: orDefault(out.Queue, dl.Queue),
		Partition: orDefault(out.Partition, dl.Partition), TransactionID: out.TransactionID, MessageID: out.MessageID,
		Offset: -1, OriginalTransactionID: orDefault(out.OriginalTransactionID, dl.TransactionID)}
	if out.Result == "" {
		r.Result = ReplayMoved
	}
	r.Moved = r.Result == ReplayMoved
	r.Removed = r.Moved
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

// replayTransactionID is the transaction id of the copy a client-side
// replay pushes: "dlq:" and the original's, or, when that would pass the
// 255 characters a 0.15.1 broker stores, "dlq:sha256:" and the hex SHA-256
// of the original's. The same letter always gets the same id, so the
// broker stores its copy once.
func replayTransactionID(original string) string {
	const limit = 255
	if id := "dlq:" + original; utf8.RuneCountInString(id) <= limit {
		return id
	}
	sum := sha256.Sum256([]byte(original))
	return "dlq:sha256:" + hex.EncodeToString(sum[:])
}

// replayByPush is ReplayDLQ on a broker without a replay route (0.15.1).
func (a *Admin) replayByPush(ctx context.Context, g wire.Generation, dl DeadLetter) (ReplayResult, error) {
	if dl.PartitionID == "" || dl.TransactionID == "" {
		return ReplayResult{}, fmt.Errorf("%w (a %s broker names a dead letter by its partition id and transaction id)", ErrNotReplayable, g.Name)
	}
	copyID := replayTransactionID(dl.TransactionID)
	res := ReplayResult{Queue: dl.Queue, Partition: dl.Partition, TransactionID: copyID, Offset: -1, OriginalTransactionID: dl.TransactionID}
	if !addressable(g, dl.TransactionID) {
		return ReplayResult{}, fmt.Errorf("%w: a %s broker cannot name transaction id %q in a path (it needs escaping there): push the letter's payload by hand",
			ErrNotSupported, g.Name, dl.TransactionID)
	}
	msg, found, err := a.storedMessage(ctx, dl.PartitionID, dl.TransactionID)
	if err != nil {
		return ReplayResult{}, err
	}
	if !found {
		// The letter is gone: replayed before (its copy is there), or removed.
		cp, found, err := a.storedMessage(ctx, dl.PartitionID, copyID)
		switch {
		case err != nil:
			return ReplayResult{}, err
		case !found:
			return ReplayResult{}, fmt.Errorf("%w: no message at partition %s with transaction id %q, and no replayed copy (%q)",
				ErrDeadLetterNotFound, dl.PartitionID, dl.TransactionID, copyID)
		}
		res.Queue, res.Partition, res.MessageID = cp.Queue, cp.Partition, cp.ID
		res.Result, res.Removed = ReplayDuplicate, true
		return res, nil
	}
	if msg.Status != "dead_letter" {
		return ReplayResult{}, fmt.Errorf("%w: the message at partition %s with transaction id %q is %s, not dead-lettered",
			ErrDeadLetterNotFound, dl.PartitionID, dl.TransactionID, orDefault(msg.Status, "of unknown status"))
	}
	res.Queue, res.Partition = msg.Queue, msg.Partition
	payload := msg.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	pushed, err := a.c.Queue(msg.Queue).Partition(msg.Partition).Push(Item{Payload: payload, TransactionID: copyID}).Execute(ctx)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("queen: replay: push the copy (the letter stays listed; replaying again is safe): %w", err)
	}
	res.MessageID, res.Offset = pushed[0].MessageID, pushed[0].Offset
	stored := pushed[0].Status == PushQueued
	_, err = a.deleteAt(ctx, dl.PartitionID, dl.TransactionID)
	switch {
	case errors.Is(err, ErrNotSupported):
		res.Result = ReplayKept
		if !stored {
			res.Result = ReplayDuplicate
		}
		return res, nil
	case err != nil:
		// The replay was applied (the copy is stored): the delete's answer
		// to "applied?" is not the replay's.
		res.Result = ReplayKept
		return res, fmt.Errorf("queen: replay: the copy is stored as %q; removing the letter failed (replaying again removes it): %w", copyID, unanswered(err))
	}
	res.Removed = true
	res.Result = ReplayDuplicate
	if stored {
		res.Result, res.Moved = ReplayMoved, true
	}
	return res, nil
}

// addressable: txn can be named in a path on g (0.15.1 hands path
// parameters to its routes unescaped).
func addressable(g wire.Generation, txn string) bool {
	return !g.RawPathParams || wire.Segment(txn) == txn
}

// storedMessage is one message as GET /api/v1/messages/{partitionId}/{transactionId}
// shows it (0.15.1); found is false when there is none.
func (a *Admin) storedMessage(ctx context.Context, partitionID, txn string) (m storedMsg, found bool, err error) {
	path := wire.RouteMessage.Path(partitionID, txn)
	_, err = a.c.doJSON(ctx, call{method: http.MethodGet, path: path}, &m)
	var be *BrokerError
	switch {
	case err != nil && errors.As(err, &be) && routeMissing(be):
		return m, false, fmt.Errorf("%w: the broker cannot show a message by its address (GET %s answered %d)", ErrNotSupported, path, be.Status)
	case err != nil && errors.As(err, &be) && be.Status == http.StatusNotFound:
		return m, false, nil
	case err != nil:
		return m, false, err
	case m.Error != "" && strings.Contains(strings.ToLower(m.Error), "not found"):
		return m, false, nil
	case m.Error != "":
		return m, false, &BrokerError{Status: http.StatusOK, Method: http.MethodGet, Path: path, Message: m.Error}
	}
	return m, true, nil
}

// storedMsg is the part of the 0.15.1 message view the client reads.
type storedMsg struct {
	ID             string          `json:"id"`
	Queue          string          `json:"queue"`
	Partition      string          `json:"partition"`
	Status         string          `json:"status"` // "dead_letter", "pending", "processing", "completed"
	Payload        json.RawMessage `json:"payload"`
	ConsumerGroups []struct {
		Name     string `json:"name"`
		Consumed bool   `json:"consumed"`
	} `json:"consumerGroups"`
	Error string `json:"error"`
}

// deleteAt sends DELETE /api/v1/messages/{partitionId}/{transactionId},
// which on 2.x removes the letters at that address and on 0.15.1 the
// message with its letters. removed is false when there was nothing; a
// broker without the route gives ErrNotSupported.
func (a *Admin) deleteAt(ctx context.Context, partitionID, txn string) (removed bool, err error) {
	path := wire.RouteMessage.Path(partitionID, txn)
	var out struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodDelete, path: path}, &out)
	var be *BrokerError
	switch {
	case err != nil && errors.As(err, &be) && routeMissing(be):
		return false, fmt.Errorf("%w: the broker cannot delete by address (DELETE %s answered %d)", ErrNotSupported, path, be.Status)
	case err != nil && errors.As(err, &be) && be.Status == http.StatusNotFound:
		return false, nil
	case err != nil:
		return false, err
	case out.Success != nil && !*out.Success || out.Success == nil && out.Error != "":
		why := orDefault(out.Error, out.Message)
		if strings.Contains(strings.ToLower(why), "not found") {
			return false, nil
		}
		return false, resp.refusal(http.MethodDelete, path, orDefault(why, "delete refused"))
	}
	return true, nil
}

// DeleteDeadLetter removes the dead letter at dl.PartitionID and
// dl.TransactionID without replaying it, and reports whether there was
// one; a letter already gone is no error. Without that address it fails
// with an error matching ErrInvalidArgument before any request.
//
// 2.x removes the letters of every group at that address (DELETE
// /api/v1/messages/{partitionId}/{transactionId}). 0.15.1 keeps a letter
// with its message, so the client deletes the message, and with it its
// letters of every group, once it has read that the message is
// dead-lettered (else ErrDeadLetterNotFound) and that every consumer group
// of the queue (queue mode included) has passed it on its partition, a
// group with no position there counting as not: if one has not, the
// message would be lost to it, so nothing is deleted and the error
// matches ErrNotSupported. A broker without the route gives
// ErrNotSupported.
func (a *Admin) DeleteDeadLetter(ctx context.Context, dl DeadLetter) (bool, error) {
	if dl.PartitionID == "" || dl.TransactionID == "" {
		return false, fmt.Errorf("%w: a dead letter is deleted by its partition id and transaction id", ErrInvalidArgument)
	}
	g, err := a.c.generation(ctx)
	if err != nil {
		return false, err
	}
	if g.DLQRowIDs {
		return a.deleteAt(ctx, dl.PartitionID, dl.TransactionID)
	}
	if !addressable(*g, dl.TransactionID) {
		return false, fmt.Errorf("%w: a %s broker cannot name transaction id %q in a path (it needs escaping there)", ErrNotSupported, g.Name, dl.TransactionID)
	}
	msg, found, err := a.storedMessage(ctx, dl.PartitionID, dl.TransactionID)
	switch {
	case err != nil:
		return false, err
	case !found:
		return false, nil
	case msg.Status != "dead_letter":
		return false, fmt.Errorf("%w: the message at partition %s with transaction id %q is %s, not dead-lettered",
			ErrDeadLetterNotFound, dl.PartitionID, dl.TransactionID, orDefault(msg.Status, "of unknown status"))
	}
	unread, err := a.groupsBehind(ctx, msg)
	if err != nil {
		return false, err
	}
	if len(unread) > 0 {
		return false, fmt.Errorf("%w: a %s broker deletes a dead letter with its message, which group(s) %s have not read yet (nothing deleted; ReplayDLQ gives them a copy)",
			ErrNotSupported, g.Name, strings.Join(unread, ", "))
	}
	return a.deleteAt(ctx, dl.PartitionID, dl.TransactionID)
}

// groupsBehind names the consumer groups of msg's queue (queue mode as
// "__QUEUE_MODE__") that have not passed msg (0.15.1): those with a
// position on its partition short of it, and those with none there. The
// message view lists only the groups with a position on the partition;
// the others come from the group list (a row per group and queue it has a
// position on). A group without a position on the partition counts as
// behind whatever its mode: where it would start there depends on its
// subscription rows and on the mode of its next pop.
func (a *Admin) groupsBehind(ctx context.Context, msg storedMsg) ([]string, error) {
	var behind []string
	seen := map[string]bool{}
	for _, cg := range msg.ConsumerGroups {
		seen[cg.Name] = true
		if !cg.Consumed {
			behind = append(behind, cg.Name)
		}
	}
	rows, err := a.ListConsumerGroups(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if r.Queue == msg.Queue && !seen[r.Name] {
			seen[r.Name] = true
			behind = append(behind, r.Name)
		}
	}
	return behind, nil
}

// PurgeDLQ removes every dead letter of queue, or only group's when group
// is not "", and reports how many (DELETE /api/v1/dlq?queue=&consumerGroup=,
// 2.x). A 0.15.1 broker has no such route: the error matches
// ErrNotSupported, before any request once the client knows the
// generation (DeadLetters and DeleteDeadLetter remove letters one by one
// there).
func (a *Admin) PurgeDLQ(ctx context.Context, queue, group string) (int, error) {
	if err := checkName(queueName, queue); err != nil {
		return 0, err
	}
	if err := checkOptionalName(groupName, group); err != nil {
		return 0, err
	}
	path := wire.RouteDLQ.Path()
	if g := a.c.mem.gen.Load(); g != nil && !g.Serves(http.MethodDelete, wire.RouteDLQ) {
		return 0, fmt.Errorf("%w: a %s broker cannot purge a dead-letter queue (no DELETE %s)", ErrNotSupported, g.Name, path)
	}
	q := url.Values{"queue": {queue}}
	if group != "" {
		q.Set("consumerGroup", group)
	}
	var out struct {
		Success *bool  `json:"success"`
		Deleted int    `json:"deleted"`
		Error   string `json:"error"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodDelete, path: path, query: q}, &out)
	var be *BrokerError
	if err != nil && errors.As(err, &be) && routeMissing(be) {
		return 0, fmt.Errorf("%w: the broker cannot purge a dead-letter queue (DELETE %s answered %d)", ErrNotSupported, path, be.Status)
	}
	if err != nil {
		return 0, err
	}
	if refused(out.Success, out.Error) {
		return 0, resp.refusal(http.MethodDelete, path, orDefault(out.Error, "purge refused"))
	}
	return out.Deleted, nil
}

// ReplayReport is what ReplayDeadLetters did.
type ReplayReport struct {
	// Results are in the order of the replays, oldest letter first.
	Results []ReplayResult `json:"results"`
	// Moved, Kept and Duplicate count Results by Result; Removed counts
	// the letters no longer listed.
	Moved     int `json:"moved"`
	Kept      int `json:"kept"`
	Duplicate int `json:"duplicate"`
	Removed   int `json:"removed"`
	// Gone counts the letters listed that were no longer there to replay
	// (replayed or removed meanwhile); they have no result.
	Gone int `json:"gone"`
}

// stopped is the error ReplayDeadLetters returns when err stops it: once
// a replay was applied (r has results), the run was, so err's "not sent"
// is the failing step's only and is taken out (an open outcome stays).
func (r *ReplayReport) stopped(err error) error {
	if len(r.Results) > 0 && errors.Is(err, ErrNotSent) {
		return fmt.Errorf("queen: dead-letter replay stopped after %d replays: %w", len(r.Results), unanswered(err))
	}
	return err
}

func (r *ReplayReport) add(res ReplayResult) {
	r.Results = append(r.Results, res)
	switch res.Result {
	case ReplayMoved:
		r.Moved++
	case ReplayKept:
		r.Kept++
	case ReplayDuplicate:
		r.Duplicate++
	}
	if res.Removed {
		r.Removed++
	}
}

// ReplayDeadLetters replays (ReplayDLQ) every dead letter that
// DeadLetters(ctx, queue, opts) yields. It reads the whole list first, then
// replays the oldest failure first, and a partition's letters in the order
// of their messages, so that their copies keep it. A message dead-lettered
// by several groups has a letter for each; one copy reaches every group,
// so it is replayed once and its other letters are removed where the
// broker can (ReplayDuplicate) or left listed. It stops at the first
// error and returns what it did until then: running it again is safe (a
// replayed letter is not listed again, or stores no second copy). Once a
// replay was applied, the error does not match ErrNotSent.
func (a *Admin) ReplayDeadLetters(ctx context.Context, queue string, opts DLQListOptions) (ReplayReport, error) {
	var letters []DeadLetter
	for dl, err := range a.DeadLetters(ctx, queue, opts) {
		if err != nil {
			return ReplayReport{}, err
		}
		letters = append(letters, dl)
	}
	replayOrder(letters)
	var rep ReplayReport
	done := make(map[letterKey]ReplayResult, len(letters))
	for _, dl := range letters {
		k, keyed := letterKeyOf(dl)
		if first, ok := done[k]; keyed && ok {
			res := first
			res.Result, res.Moved, res.Removed = ReplayDuplicate, false, false
			removed, err := a.deleteAt(ctx, dl.PartitionID, dl.TransactionID)
			if err != nil && !errors.Is(err, ErrNotSupported) {
				return rep, rep.stopped(fmt.Errorf("queen: remove the letter of group %q of a message just replayed: %w", dl.ConsumerGroup, err))
			}
			res.Removed = err == nil && (removed || first.Removed)
			rep.add(res)
			continue
		}
		res, err := a.ReplayDLQ(ctx, dl)
		if errors.Is(err, ErrDeadLetterNotFound) {
			rep.Gone++
			continue
		}
		if err != nil {
			if res.Result != "" {
				rep.add(res)
			}
			return rep, rep.stopped(err)
		}
		if keyed {
			done[k] = res
		}
		rep.add(res)
	}
	return rep, nil
}

// letterKey names the message of a dead letter: its partition and its
// offset there (2.x), or its transaction id (unique in a 0.15.1 partition).
type letterKey struct {
	partitionID string
	offset      int64
	txn         string
}

func letterKeyOf(dl DeadLetter) (letterKey, bool) {
	if dl.PartitionID == "" {
		return letterKey{}, false
	}
	if dl.Offset >= 0 {
		return letterKey{partitionID: dl.PartitionID, offset: dl.Offset}, true
	}
	return letterKey{partitionID: dl.PartitionID, offset: -1, txn: dl.TransactionID}, dl.TransactionID != ""
}

// replayOrder puts letters, listed newest failure first, in the order to
// replay them: oldest failure first, and each partition's letters in the
// order of their messages in the places that partition's letters held. A
// message's place is its offset (2.x), or on 0.15.1 its creation time (to
// the millisecond in the list) and then its id: the broker orders a
// partition by (created_at, id), and its ids are time-ordered (UUIDv7).
// Failure times do not break ties: a batch ack dead-letters a whole pop at
// one time, listed in no set order.
func replayOrder(letters []DeadLetter) {
	slices.Reverse(letters)
	byPartition := map[[2]string][]int{}
	for i, dl := range letters {
		k := [2]string{dl.Queue, dl.Partition}
		byPartition[k] = append(byPartition[k], i)
	}
	for _, at := range byPartition {
		part := make([]DeadLetter, len(at))
		for j, i := range at {
			part[j] = letters[i]
		}
		slices.SortStableFunc(part, func(x, y DeadLetter) int {
			switch {
			case x.Offset >= 0 && y.Offset >= 0:
				return cmp.Compare(x.Offset, y.Offset)
			case !x.MessageCreatedAt.IsZero() && !y.MessageCreatedAt.IsZero():
				if c := x.MessageCreatedAt.Compare(y.MessageCreatedAt); c != 0 {
					return c
				}
				return strings.Compare(x.MessageID, y.MessageID)
			}
			return 0
		})
		for j, i := range at {
			letters[i] = part[j]
		}
	}
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
