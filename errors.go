package queen

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// ErrInvalidArgument is matched (errors.Is) by every error the client
// returns for bad input before any request is sent.
var ErrInvalidArgument = errors.New("queen: invalid argument")

// argError is a sentinel for one kind of bad input. It also matches
// ErrInvalidArgument.
type argError struct{ msg string }

func (e *argError) Error() string        { return "queen: " + e.msg }
func (e *argError) Is(target error) bool { return target == ErrInvalidArgument }

func newArgError(msg string) error { return &argError{msg: msg} }

// Sentinel errors for invalid input. Each is returned (wrapped with detail)
// before any request is sent, and each matches ErrInvalidArgument too.
var (
	// ErrInvalidURL: the broker URL given to New cannot be parsed or is not http(s).
	ErrInvalidURL = newArgError("invalid broker URL")
	// ErrEmptyQueue: a queue name is required.
	ErrEmptyQueue = newArgError("queue name is empty")
	// ErrEmptyGroup: a consumer group name is required (seek, group detail and deletion).
	ErrEmptyGroup = newArgError("consumer group name is empty")
	// ErrEmptyPartition: a partition name is required (SeekPartition, and
	// Fetch given no partition).
	ErrEmptyPartition = newArgError("partition name is empty")
	// ErrConflationNeedsGroup: conflation needs a consumer group.
	ErrConflationNeedsGroup = newArgError("conflation requires a consumer group")
	// ErrConflationWithCommitOnDelivery: conflation cannot be combined with commit on delivery.
	ErrConflationWithCommitOnDelivery = newArgError("conflation cannot be combined with commit on delivery")
	// ErrPartitionsOutOfRange: Partitions(n) takes 1..64.
	ErrPartitionsOutOfRange = newArgError("partitions must be between 1 and 64")
	// ErrNegativeBatch: Batch(n) must not be negative.
	ErrNegativeBatch = newArgError("batch must not be negative")
	// ErrTimeoutOutOfRange: TimeoutMillis takes 0..60000.
	ErrTimeoutOutOfRange = newArgError("timeout must be between 0 and 60000 ms")
	// ErrInvalidSubscription: an unknown subscription mode or a subscriptionFrom that is not a time.
	ErrInvalidSubscription = newArgError("invalid subscription mode or time")
	// ErrInvalidTraceID: a trace id must be a UUID (a real broker loses such a message otherwise).
	ErrInvalidTraceID = newArgError("trace id is not a UUID")
	// ErrInvalidPayload: a payload cannot be encoded as JSON.
	ErrInvalidPayload = newArgError("payload is not valid JSON")
	// ErrNoMessages: a call that needs at least one message got none.
	ErrNoMessages = newArgError("no messages given")
	// ErrNotAckable: the message cannot be settled or renewed: it is nil,
	// has no transaction id or partition id (it did not come from a pop),
	// or has no lease (popped with commit on delivery). The error says which.
	ErrNotAckable = newArgError("message cannot be acknowledged")
	// ErrNotReplayable: a dead letter to replay needs its ID, or its
	// PartitionID and TransactionID.
	ErrNotReplayable = newArgError("dead letter cannot be replayed: missing id, or partition id and transaction id")
	// ErrUnknownStatus: an ack status other than completed, failed, retry or dlq.
	ErrUnknownStatus = newArgError("unknown ack status")
	// ErrCommitOnDeliveryConsume: a consume loop cannot commit on delivery.
	ErrCommitOnDeliveryConsume = newArgError("commit on delivery works with Pop only; Consume refuses it")
	// ErrInvalidOption: a numeric option out of range (Concurrency, Limit, IdleMillis, RenewLease, ...).
	ErrInvalidOption = newArgError("invalid option value")
	// ErrEmptyTransaction: a transaction needs at least one operation.
	ErrEmptyTransaction = newArgError("transaction has no operations")
	// ErrInvalidSeek: a seek needs exactly one of Timestamp and ToEnd, and a valid RFC 3339 time.
	ErrInvalidSeek = newArgError("seek needs exactly one of Timestamp (RFC 3339) and ToEnd")
)

// Errors about the broker or the client's state rather than bad input.
var (
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("queen: client is closed")
	// ErrConflationUnsupported: a conflating pop was answered without the
	// conflation echo, so the broker predates conflation and would hand out
	// the whole backlog. No message of that answer is returned.
	ErrConflationUnsupported = errors.New("queen: broker does not support conflation")
	// ErrNotSupported: the broker has no route for this call (an older broker).
	ErrNotSupported = errors.New("queen: not supported by this broker")
	// ErrLeaseLost: a lease could not be renewed (expired or taken).
	ErrLeaseLost = errors.New("queen: lease lost")
	// ErrOutcomeUnknown: the request may or may not have been applied by
	// the broker. Its answer was lost (the connection failed, or the ctx
	// ended, after the request may have reached the broker), or the broker
	// answered without saying (a 5xx that may come after applying, a 503
	// with code outcome_unknown, an answer that cannot be read). Calls
	// that are not safe to repeat (TransactionBuilder.Commit,
	// Admin.ReplayDLQ, and Pop, whose claim leases messages) are then not
	// retried; check the broker's state before doing the request again.
	// After a pop, messages may be leased until the lease expires, and
	// are delivered again then. The error also carries the failure:
	// errors.As finds the *BrokerError of an answer, errors.Is the context
	// error of a ctx that ended.
	ErrOutcomeUnknown = errors.New("queen: outcome unknown")
	// ErrNotSent: the request did not reach the broker, so nothing was
	// stored or applied. Every attempt of the call failed before it could
	// be written (the connection refused, a DNS failure, a dial that timed
	// out, the ctx ended before the request went out); one attempt that
	// may have been written makes the outcome unknown instead. Doing the
	// call again is safe. A Producer's message matches it too when it was
	// not sent (see PartitionFailedError).
	ErrNotSent = errors.New("queen: not sent")
)

// notAckable says why msg cannot be acknowledged, for an error wrapping
// ErrNotAckable: nil, or no transaction id or partition id.
func notAckable(msg *Message) string {
	if msg == nil {
		return "nil message"
	}
	return "missing transactionId or partitionId"
}

// noLease says why msg cannot be renewed, for an error wrapping
// ErrNotAckable: nil, or no lease.
func noLease(msg *Message) string {
	if msg == nil {
		return "nil message"
	}
	return "no lease (committed on delivery?)"
}

// messageName names m in an error by the ids it has.
func messageName(m *Message) string {
	switch {
	case m.ID != "" && m.TransactionID != "":
		return fmt.Sprintf("%q (transactionId %q)", m.ID, m.TransactionID)
	case m.ID != "":
		return strconv.Quote(m.ID)
	case m.TransactionID != "":
		return fmt.Sprintf("with transactionId %q", m.TransactionID)
	}
	return "without an id"
}

// retryAfterOf returns the Retry-After of the broker's refusal err wraps,
// zero without one.
func retryAfterOf(err error) time.Duration {
	if be, ok := errors.AsType[*BrokerError](err); ok {
		return be.RetryAfter
	}
	return 0
}

// outcomeUnknownError is the failure of a request that may or may not have
// been applied. It matches ErrOutcomeUnknown and unwraps to the failure.
type outcomeUnknownError struct{ err error }

func outcomeUnknown(err error) error { return &outcomeUnknownError{err: err} }

func (e *outcomeUnknownError) Error() string {
	return "queen: outcome unknown: " + strings.TrimPrefix(e.err.Error(), "queen: ")
}
func (e *outcomeUnknownError) Unwrap() error        { return e.err }
func (e *outcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// notSentError is the failure of a request that surely did not reach the
// broker. It matches ErrNotSent and unwraps to the failure.
type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return "queen: not sent: " + strings.TrimPrefix(e.err.Error(), "queen: ")
}
func (e *notSentError) Unwrap() error        { return e.err }
func (e *notSentError) Is(target error) bool { return target == ErrNotSent }

// BrokerError is a refusal from the broker: a non-success HTTP status, or a
// success status whose body says it failed (0.15.1 answers 200 to failures).
// Use errors.As to get it through any wrapping.
type BrokerError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the broker's machine-readable code ("bad_body", "no_leader", ...), if any.
	Code string
	// Message is the broker's error text.
	Message string
	// RetryAfter is the broker's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Method and Path name the request (Path is the API's, such as
	// "/api/v1/push").
	Method, Path string
	// URL is the URL requested: the broker URL the answer came from (with
	// its proxy prefix, if any) and Path, without the query; "" for a
	// refusal read from a 2xx answer's body by the call itself.
	URL string
	// ContentType is the answer's Content-Type.
	ContentType string
	// Body is the raw response body, whole.
	Body []byte
	// Attempts is how many times the request was sent, the answer's
	// included, when the client retried it (for example 4 after four
	// 503s with the default RetryPolicy); 0 or 1 when it was sent once.
	Attempts int
}

// Error describes the refusal: status, method and URL (or path), the
// content type of an answer that is not JSON, code and message (for an
// answer that is not the broker's error envelope, an excerpt of its body).
func (e *BrokerError) Error() string {
	s := fmt.Sprintf("queen: broker answered %d to %s %s", e.Status, e.Method, cmp.Or(e.URL, e.Path))
	if e.ContentType != "" && !strings.Contains(e.ContentType, "json") {
		s += " (" + e.ContentType + ")"
	}
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	return s
}

// Temporary reports whether retrying the same request later may succeed:
// 408, 429 and every 5xx except 501 (no such route: an older broker), 505,
// 506, 508, 510 and 511. The client's retries and its consume loop follow
// the same rule.
func (e *BrokerError) Temporary() bool {
	return transport.Retryable(e.Status)
}
