package queen

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// ErrInvalidArgument is matched by every error for bad input, which comes
// before any request.
var ErrInvalidArgument = errors.New("queen: invalid argument")

type argError struct{ msg string }

func (e *argError) Error() string        { return "queen: " + e.msg }
func (e *argError) Is(target error) bool { return target == ErrInvalidArgument }

func newArgError(msg string) error { return &argError{msg: msg} }

// Errors for bad input, each wrapped with detail and matching
// ErrInvalidArgument; their text says what is wrong.
var (
	ErrInvalidURL                     = newArgError("invalid broker URL") // see New
	ErrEmptyQueue                     = newArgError("queue name is empty")
	ErrEmptyGroup                     = newArgError("consumer group name is empty")
	ErrEmptyPartition                 = newArgError("partition name is empty")
	ErrConflationNeedsGroup           = newArgError("conflation requires a consumer group")
	ErrConflationWithCommitOnDelivery = newArgError("conflation cannot be combined with commit on delivery")
	ErrPartitionsOutOfRange           = newArgError("partitions must be between 1 and 64")
	ErrNegativeBatch                  = newArgError("batch must not be negative")
	ErrTimeoutOutOfRange              = newArgError("timeout must be between 0 and 60000 ms")
	ErrInvalidSubscription            = newArgError("invalid subscription mode or time")
	// ErrInvalidTraceID: a real broker loses a message whose trace id is
	// not a UUID.
	ErrInvalidTraceID = newArgError("trace id is not a UUID")
	ErrInvalidPayload = newArgError("payload is not valid JSON")
	ErrNoMessages     = newArgError("no messages given")
	// ErrNotAckable: the message is nil, did not come from a pop, or has no
	// lease (commit on delivery); the error says which.
	ErrNotAckable              = newArgError("message cannot be acknowledged")
	ErrNotReplayable           = newArgError("dead letter cannot be replayed: missing id, or partition id and transaction id")
	ErrUnknownStatus           = newArgError("unknown ack status")
	ErrCommitOnDeliveryConsume = newArgError("commit on delivery works with Pop only; Consume refuses it")
	// ErrInvalidOption: a numeric option out of range (Concurrency, Limit,
	// IdleMillis, RenewLease, durations, producer options).
	ErrInvalidOption    = newArgError("invalid option value")
	ErrEmptyTransaction = newArgError("transaction has no operations")
	ErrInvalidSeek      = newArgError("seek needs exactly one of Timestamp (RFC 3339) and ToEnd")
)

// Errors about the broker or the client's state rather than bad input.
var (
	ErrClosed = errors.New("queen: client is closed")
	// ErrConflationUnsupported: a conflating pop's answer lacked the
	// conflation echo (an older broker); none of its messages is returned.
	ErrConflationUnsupported = errors.New("queen: broker does not support conflation")
	ErrNotSupported          = errors.New("queen: not supported by this broker") // no route: an older broker
	ErrLeaseLost             = errors.New("queen: lease lost")                   // expired or taken
	// ErrOutcomeUnknown: the broker may or may not have applied the request
	// (its answer lost or unclear; for a retried call, any attempt's). One
	// rule for every call: no answer after the request may have been
	// written, an answer that may follow applying (a 500, say:
	// transport.MayHaveApplied), a 2xx the client cannot read, and any
	// answer, a refusal included, after another attempt that may have been
	// applied. Commit, ReplayDLQ and Pop are then not retried: check the
	// broker's state first. The error wraps the failure (*BrokerError,
	// *AckError, ctx error). See docs/RETRIES.md, "The transport".
	ErrOutcomeUnknown = errors.New("queen: outcome unknown")
	// ErrNotSent: no attempt of the call reached the broker, so nothing was
	// stored or applied and doing it again is safe.
	//
	// An error of the client matches at most one of ErrNotSent and
	// ErrOutcomeUnknown, whatever it wraps; neither when the broker answered
	// that it did not apply the request (a *BrokerError, say). The reasons
	// (ErrClosed, ErrDeliveryTimeout, a ctx error, a *BrokerError) match
	// beside either.
	ErrNotSent = errors.New("queen: not sent")
)

func notAckable(msg *Message) string {
	if msg == nil {
		return "nil message"
	}
	return "missing transactionId or partitionId"
}

func noLease(msg *Message) string {
	if msg == nil {
		return "nil message"
	}
	return "no lease (committed on delivery?)"
}

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

func retryAfterOf(err error) time.Duration {
	if be, ok := errors.AsType[*BrokerError](err); ok {
		return be.RetryAfter
	}
	return 0
}

type outcomeUnknownError struct{ err error }

func outcomeUnknown(err error) error { return &outcomeUnknownError{err: err} }

func (e *outcomeUnknownError) Error() string {
	return "queen: outcome unknown: " + strings.TrimPrefix(e.err.Error(), "queen: ")
}
func (e *outcomeUnknownError) Unwrap() error        { return e.err }
func (e *outcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return "queen: not sent: " + strings.TrimPrefix(e.err.Error(), "queen: ")
}
func (e *notSentError) Unwrap() error        { return e.err }
func (e *notSentError) Is(target error) bool { return target == ErrNotSent }

// isAnswer reports whether target is one of the two answers to "was it
// applied?", of which an error matches at most one.
func isAnswer(target error) bool { return target == ErrNotSent || target == ErrOutcomeUnknown }

// unanswered is err with its answer taken out: errors.Is finds neither
// ErrNotSent nor ErrOutcomeUnknown in it, and every other error of its
// tree as in err (errors.Is, errors.As). An error that states an answer of
// its own (a message behind a failed batch: not sent) unwraps to the
// cause it reports through it, so that the cause's answer, about another
// request, is not taken for its own.
func unanswered(err error) error {
	if err == nil {
		return nil
	}
	return &unansweredError{err}
}

// unansweredError stands for one node of the tree of errors it hides the
// answer of: it matches what that node matches but the answers, is found
// by errors.As as that node, and unwraps to its children, each hidden too.
type unansweredError struct{ err error }

func (e *unansweredError) Error() string { return e.err.Error() }

func (e *unansweredError) Is(target error) bool {
	if isAnswer(target) {
		return false
	}
	if t := reflect.TypeOf(target); t != nil && t.Comparable() && reflect.TypeOf(e.err).Comparable() && e.err == target {
		return true
	}
	x, ok := e.err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

func (e *unansweredError) As(target any) bool {
	v := reflect.ValueOf(target).Elem() // errors.As checked target
	if reflect.TypeOf(e.err).AssignableTo(v.Type()) {
		v.Set(reflect.ValueOf(e.err))
		return true
	}
	x, ok := e.err.(interface{ As(any) bool })
	return ok && x.As(target)
}

func (e *unansweredError) Unwrap() []error {
	switch x := e.err.(type) {
	case interface{ Unwrap() error }:
		if u := x.Unwrap(); u != nil {
			return []error{&unansweredError{u}}
		}
	case interface{ Unwrap() []error }:
		var out []error
		for _, u := range x.Unwrap() {
			if u != nil {
				out = append(out, &unansweredError{u})
			}
		}
		return out
	}
	return nil
}

// BrokerError is a refusal from the broker: a non-2xx status, or a 2xx
// whose body says it failed (0.15.1). Get it with errors.As.
type BrokerError struct {
	Status       int           // HTTP status
	Code         string        // the broker's code ("bad_body", "no_leader", ...), if any
	Message      string        // the broker's error text
	RetryAfter   time.Duration // zero when absent
	Method, Path string        // Path is the API's, such as "/api/v1/push"
	// URL is the broker URL and Path, without the query; "" for a refusal
	// read from a 2xx body.
	URL         string
	ContentType string
	Body        []byte // whole
	Attempts    int    // sends of the request, when retried (else 0 or 1)
}

// Error gives status, method, URL, code and message (or a body excerpt).
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

// Temporary reports whether the same request later may succeed: 408, 429
// and 5xx except 501, 505, 506, 508, 510 and 511, the client's own rule.
func (e *BrokerError) Temporary() bool {
	return transport.Retryable(e.Status)
}
