package queen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/internal/wire"
)

// Hook is a value given to WithHooks: the client calls it at the events
// whose interface it implements (PushHook, PopHook, HandlerHook,
// SettleHook, RenewHook, LeaseLostHook, RequestHook), and ignores it
// elsewhere. A hook runs synchronously on the event's goroutine, after the
// event (OnHandlerStart before the handler), in the order given to
// WithHooks, and concurrently with other events: it must be safe for
// concurrent use, and it blocks the caller (Push, Pop, the loop's
// poller, handler, settle or renewal) until it returns, so slow work goes
// to a goroutine of its own. A panic is recovered and logged once per
// hook and event kind; the event goes on, the other hooks still run.
// Event values belong to the client (copy what you keep; never modify a
// Message). Without WithHooks, a hook costs one nil check per event.
type Hook any

// PushHook is called after every PushBuilder.Execute that sent a request
// (not after one refused before the wire), and after every batch a
// Producer sent (one event per batch; its ctx is the producer's own, not
// that of a Push).
type PushHook interface {
	OnPush(ctx context.Context, e PushEvent)
}

// PushEvent describes one push request.
type PushEvent struct {
	// Queue and Partition are the builder's ("" partition: the broker's
	// default one).
	Queue, Partition string
	// Count is how many messages the request carried.
	Count int
	// Results are the broker's per-message results, nil when it gave
	// none (Err is then set).
	Results []PushResult
	// Duration is from sending the request to reading its answer,
	// retries included.
	Duration time.Duration
	// Err is what Execute returned (a *PushError when some messages were
	// not stored).
	Err error
}

// PopHook is called after every pop request: QueueBuilder.Pop and each pop
// of a consume loop.
type PopHook interface {
	OnPop(ctx context.Context, e PopEvent)
}

// PopEvent describes one pop request.
type PopEvent struct {
	// Queue, Partition and Group are the pop's ("" group: queue mode; ""
	// queue: a namespace/task discovery pop).
	Queue, Partition, Group string
	// Messages are what the pop delivered (none on an empty pop).
	Messages []*Message
	// Wait is how long the broker may hold the pop open waiting for
	// messages (a long poll); zero when the pop does not wait.
	Wait time.Duration
	// Duration is from sending the request to its decoded answer, long
	// poll and retries included.
	Duration time.Duration
	// Err is the pop's failure, nil for a pop that succeeded (empty or not).
	Err error
}

// HandlerHook is called around every handler call of a consume loop.
// OnHandlerStart runs right before the handler, on the handler's
// goroutine; the ctx it returns is the one the handler (and OnSuccess and
// OnError) receives, so that a hook can put a span in it for the handler's
// own spans to nest under. It must return ctx or a context derived from
// it. OnHandlerEnd runs after the handler's result was turned into
// outcomes, with the ctx OnHandlerStart returned.
type HandlerHook interface {
	OnHandlerStart(ctx context.Context, e HandlerStart) context.Context
	OnHandlerEnd(ctx context.Context, e HandlerEnd)
}

// HandlerStart describes a handler call about to start.
type HandlerStart struct {
	// Queue and Group are the consume loop's.
	Queue, Group string
	// Messages are what the handler gets: one message for Consume (and an
	// Each batch handler), the whole pop for a ConsumeBatch handler.
	Messages []*Message
}

// HandlerEnd describes a finished handler call.
type HandlerEnd struct {
	// Queue and Group are the consume loop's.
	Queue, Group string
	// Messages are those of HandlerStart.
	Messages []*Message
	// Duration is the handler's own run time.
	Duration time.Duration
	// Err is what the handler returned (ErrHandlerPanic when it panicked).
	Err error
	// Outcomes holds the outcome decided for each of Messages, in order.
	// A message of a batch handler that follows a failed or retried one of
	// its partition is given back: Retry. A zero Outcome (empty Status)
	// means the loop sends none for that message: AutoAck(false) after a
	// success, or a lost lease (LeaseLost).
	Outcomes []Outcome
	// LeaseLost is true when the pop's lease was lost while the handler
	// ran: its outcomes are not sent.
	LeaseLost bool
}

// SettleHook is called after every ack request that settles messages:
// Client.Ack, Settle and SettleBatch, and each pop a consume loop settles
// (once, with the final result of its sends).
type SettleHook interface {
	OnSettle(ctx context.Context, e SettleEvent)
}

// SettleEvent describes one settlement of messages.
type SettleEvent struct {
	// Group is the consumer group the acks were sent for ("": queue mode).
	Group string
	// Settlements are the outcomes sent, in order.
	Settlements []Settlement
	// Messages has one entry per settlement, in the same order: the
	// outcome chosen for the message, the status sent, and the broker's
	// answer. Under a consume loop the first two can differ: a Fail goes
	// out as retry while the message has retries left, and as dlq at the
	// failure that spends them (see ConsumeBuilder.OnError).
	Messages []SettledMessage
	// Refused counts the settlements the broker refused (see AckError).
	Refused int
	// Duration is from the first send to the final answer.
	Duration time.Duration
	// Err is the settlement's failure (an *AckError when the broker
	// refused some), nil when every outcome was applied.
	Err error
}

// SettledMessage is what happened to one message of a settlement.
type SettledMessage struct {
	// Outcome is the status chosen for the message: by a consume loop, its
	// handler's result or what OnSuccess or OnError returned; outside a
	// loop, the status the caller gave (then equal to Sent).
	Outcome AckStatus
	// Sent is the status sent to the broker.
	Sent AckStatus
	// Answer is the broker's answer for the message; AnswerNone when the
	// request got no answer (see SettleEvent.Err).
	Answer SettleAnswer
	// Error is the broker's reason when it refused the message.
	Error string
}

// SettleAnswer is the broker's answer for one settled message.
type SettleAnswer string

// The answers a SettledMessage reports. A message the broker dead-lettered
// is AnswerDeadLettered whatever was sent (a failed whose retries were
// spent, or a dlq); an accepted ack that ended its partition's lease is
// AnswerLeaseReleased; any other accepted ack is AnswerApplied.
const (
	AnswerNone          SettleAnswer = ""
	AnswerApplied       SettleAnswer = "applied"
	AnswerLeaseReleased SettleAnswer = "lease released"
	AnswerDeadLettered  SettleAnswer = "dead-lettered"
	AnswerRefused       SettleAnswer = "refused"
)

// settledMessages pairs chosen outcomes, sent statuses and results (nil
// when there was no answer).
func settledMessages(chosen, sent []Settlement, res []AckResult) []SettledMessage {
	out := make([]SettledMessage, len(sent))
	for i, s := range sent {
		m := SettledMessage{Outcome: s.Status, Sent: s.Status}
		if i < len(chosen) {
			m.Outcome = chosen[i].Status
		}
		if len(res) == len(sent) {
			switch r := res[i]; {
			case !r.Success:
				m.Answer, m.Error = AnswerRefused, r.Error
			case r.DLQ:
				m.Answer = AnswerDeadLettered
			case r.LeaseReleased:
				m.Answer = AnswerLeaseReleased
			default:
				m.Answer = AnswerApplied
			}
		}
		out[i] = m
	}
	return out
}

// Count returns how many of the settlements have status s.
func (e SettleEvent) Count(s AckStatus) int {
	n := 0
	for _, st := range e.Settlements {
		if st.Status == s {
			n++
		}
	}
	return n
}

// RenewHook is called after every lease renewal request: Client.Renew,
// RenewFor, and the renewals of a consume loop.
type RenewHook interface {
	OnRenew(ctx context.Context, e RenewEvent)
}

// RenewEvent describes one lease renewal.
type RenewEvent struct {
	// Queue and Group are the renewing consume loop's; for Client.Renew
	// they are those of the first message of the lease.
	Queue, Group string
	// LeaseID is the renewed lease.
	LeaseID string
	// Extension is how far the renewal asked to extend the lease.
	Extension time.Duration
	// Result is the broker's verdict (Success false: the lease is lost).
	Result RenewResult
	// Duration is the request's, retries included.
	Duration time.Duration
	// Err is the request's failure, which says nothing about the lease.
	Err error
}

// LeaseLostHook is called when a renewal finds a lease lost: it had
// expired or been released, and its messages may be with another worker.
// A consume loop cancels the ctx of the handlers of that lease at once.
type LeaseLostHook interface {
	OnLeaseLost(ctx context.Context, e LeaseLost)
}

// LeaseLost describes a lost lease.
type LeaseLost struct {
	// Queue and Group are as in RenewEvent.
	Queue, Group string
	// LeaseID is the lost lease.
	LeaseID string
	// Reason is the broker's.
	Reason string
}

// RequestHook is called after every HTTP exchange with the broker: each
// attempt of every call (a retried call reports each attempt).
type RequestHook interface {
	OnRequest(ctx context.Context, e RequestEvent)
}

// RequestEvent describes one HTTP exchange with the broker.
type RequestEvent struct {
	// Method is the HTTP method.
	Method string
	// Route is the path template, such as "/api/v1/pop/queue/{queue}":
	// few distinct values, fit for a metric label. An unknown path is
	// reported as "other".
	Route string
	// Path is the escaped path as sent.
	Path string
	// URL is the base URL of the broker that was asked.
	URL string
	// Attempt counts the attempts of the call, from 1.
	Attempt int
	// Status is the answer's HTTP status; 0 when none came (see Err).
	Status int
	// Duration is the exchange's, from sending to the answer's last byte.
	Duration time.Duration
	// Err is the network failure of an attempt without an answer.
	Err error
}

// WithHooks adds hooks (see Hook): each must implement at least one of the
// hook interfaces, or New fails with an error matching ErrInvalidOption.
// Hooks given in several WithHooks options are all called, in order.
func WithHooks(hooks ...Hook) Option {
	return func(c *config) { c.hooks = append(c.hooks, hooks...) }
}

// hookKind indexes the hook interfaces, for the panic log.
type hookKind int

const (
	kindPush hookKind = iota
	kindPop
	kindHandlerStart
	kindHandlerEnd
	kindSettle
	kindRenew
	kindLeaseLost
	kindRequest
	numHookKinds
)

var hookKindNames = [numHookKinds]string{"OnPush", "OnPop", "OnHandlerStart", "OnHandlerEnd", "OnSettle", "OnRenew", "OnLeaseLost", "OnRequest"}

// hookSet holds a client's hooks sorted by interface. A nil *hookSet (no
// WithHooks) is valid: every method then returns at once.
type hookSet struct {
	log       *slog.Logger
	push      []hookOf[PushHook]
	pop       []hookOf[PopHook]
	handler   []hookOf[HandlerHook]
	settle    []hookOf[SettleHook]
	renew     []hookOf[RenewHook]
	leaseLost []hookOf[LeaseLostHook]
	request   []hookOf[RequestHook]
}

// hookOf is one hook with its panic bookkeeping.
type hookOf[T any] struct {
	h   T
	pos int // position among the hooks given, for the log
	// logged says, per kind, whether a panic of this hook was logged.
	logged *[numHookKinds]atomic.Bool
}

// addHook appends h to list if it implements T, and says whether it does.
func addHook[T any](list *[]hookOf[T], h Hook, pos int, logged *[numHookKinds]atomic.Bool) bool {
	x, ok := h.(T)
	if ok {
		*list = append(*list, hookOf[T]{x, pos, logged})
	}
	return ok
}

// newHookSet sorts hooks by interface; nil when there are none. A hook
// that implements none of the interfaces is an error.
func newHookSet(hooks []Hook, log *slog.Logger) (*hookSet, error) {
	if len(hooks) == 0 {
		return nil, nil
	}
	hs := &hookSet{log: log}
	for i, h := range hooks {
		logged := new([numHookKinds]atomic.Bool)
		matched := addHook(&hs.push, h, i, logged)
		matched = addHook(&hs.pop, h, i, logged) || matched
		matched = addHook(&hs.handler, h, i, logged) || matched
		matched = addHook(&hs.settle, h, i, logged) || matched
		matched = addHook(&hs.renew, h, i, logged) || matched
		matched = addHook(&hs.leaseLost, h, i, logged) || matched
		matched = addHook(&hs.request, h, i, logged) || matched
		if !matched {
			return nil, fmt.Errorf("%w: hook %d (%T) implements none of the hook interfaces", ErrInvalidOption, i, h)
		}
	}
	return hs, nil
}

// run calls f (one hook's method), recovering a panic and logging the
// first one of each hook and kind.
func run[T any](hs *hookSet, h hookOf[T], kind hookKind, f func(T)) {
	defer func() {
		if v := recover(); v != nil {
			if h.logged[kind].CompareAndSwap(false, true) {
				hs.log.Error("queen: a hook panicked; the panic is recovered and further panics of this hook's "+
					hookKindNames[kind]+" are not logged",
					"hook", fmt.Sprintf("%d (%T)", h.pos, h.h), "method", hookKindNames[kind],
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
		}
	}()
	f(h.h)
}

// now returns the time an event starts when some hook may want it, and
// the zero time without hooks (no clock read).
func (hs *hookSet) now() time.Time {
	if hs == nil {
		return time.Time{}
	}
	return time.Now()
}

// Each event has a small method that the compiler inlines at the call
// site (a nil check, so that a client without hooks pays only that) and
// one that does the work.

// pushed reports a push request.
func (hs *hookSet) pushed(ctx context.Context, queue, partition string, count int, start time.Time, res []PushResult, err error) {
	if hs != nil {
		hs.reportPush(ctx, queue, partition, count, start, res, err)
	}
}

func (hs *hookSet) reportPush(ctx context.Context, queue, partition string, count int, start time.Time, res []PushResult, err error) {
	if len(hs.push) == 0 {
		return
	}
	e := PushEvent{Queue: queue, Partition: partition, Count: count, Results: res, Duration: time.Since(start), Err: err}
	for _, h := range hs.push {
		run(hs, h, kindPush, func(x PushHook) { x.OnPush(ctx, e) })
	}
}

// popped reports a pop request. wait is the long poll's wait, 0 for none.
func (hs *hookSet) popped(ctx context.Context, queue, partition, group string, wait time.Duration, start time.Time, msgs []*Message, err error) {
	if hs != nil {
		hs.reportPop(ctx, queue, partition, group, wait, start, msgs, err)
	}
}

func (hs *hookSet) reportPop(ctx context.Context, queue, partition, group string, wait time.Duration, start time.Time, msgs []*Message, err error) {
	if len(hs.pop) == 0 {
		return
	}
	e := PopEvent{Queue: queue, Partition: partition, Group: group, Messages: msgs, Wait: wait, Duration: time.Since(start), Err: err}
	for _, h := range hs.pop {
		run(hs, h, kindPop, func(x PopHook) { x.OnPop(ctx, e) })
	}
}

// handlerTurn is one handler call between handlerStart and handlerEnd.
type handlerTurn struct {
	queue, group string
	msgs         []*Message
	start        time.Time
}

// active reports whether t is reported to hooks (false without handler
// hooks), for a caller that would build something only for them.
func (t handlerTurn) active() bool { return t.msgs != nil }

// handlerStart reports a handler call about to start and returns the ctx
// to give the handler (ctx itself without handler hooks).
func (hs *hookSet) handlerStart(ctx context.Context, queue, group string, msgs []*Message) (context.Context, handlerTurn) {
	if hs == nil {
		return ctx, handlerTurn{}
	}
	return hs.reportHandlerStart(ctx, queue, group, msgs)
}

func (hs *hookSet) reportHandlerStart(ctx context.Context, queue, group string, msgs []*Message) (context.Context, handlerTurn) {
	if len(hs.handler) == 0 {
		return ctx, handlerTurn{}
	}
	e := HandlerStart{Queue: queue, Group: group, Messages: msgs}
	for _, h := range hs.handler {
		run(hs, h, kindHandlerStart, func(x HandlerHook) {
			if next := x.OnHandlerStart(ctx, e); next != nil {
				ctx = next
			}
		})
	}
	return ctx, handlerTurn{queue: queue, group: group, msgs: msgs, start: time.Now()}
}

// handlerEnd reports the end of the handler call t, started with
// handlerStart (ctx is the one it returned); outcomes are the decided
// outcomes of t's messages, in order (copied: the caller may reuse them).
func (hs *hookSet) handlerEnd(ctx context.Context, t handlerTurn, err error, outcomes []Outcome, leaseLost bool) {
	if hs != nil {
		hs.reportHandlerEnd(ctx, t, err, outcomes, leaseLost)
	}
}

func (hs *hookSet) reportHandlerEnd(ctx context.Context, t handlerTurn, err error, outcomes []Outcome, leaseLost bool) {
	if len(hs.handler) == 0 {
		return
	}
	e := HandlerEnd{Queue: t.queue, Group: t.group, Messages: t.msgs, Duration: time.Since(t.start), Err: err,
		Outcomes: make([]Outcome, len(t.msgs)), LeaseLost: leaseLost}
	copy(e.Outcomes, outcomes)
	for _, h := range hs.handler {
		run(hs, h, kindHandlerEnd, func(x HandlerHook) { x.OnHandlerEnd(ctx, e) })
	}
}

// settled reports a settlement: acks sent for group since start, with
// the final error err;
// chosen are the outcomes chosen (nil: those sent), res the broker's
// answers (nil: none).
func (hs *hookSet) settled(ctx context.Context, group string, chosen, acks []Settlement, res []AckResult, start time.Time, err error) {
	if hs != nil {
		hs.reportSettle(ctx, group, chosen, acks, res, start, err)
	}
}

func (hs *hookSet) reportSettle(ctx context.Context, group string, chosen, acks []Settlement, res []AckResult, start time.Time, err error) {
	if len(hs.settle) == 0 {
		return
	}
	if ae, ok := errors.AsType[*AckError](err); ok && res == nil {
		res = ae.Results
	}
	if chosen == nil {
		chosen = acks
	}
	e := SettleEvent{Group: group, Settlements: acks, Messages: settledMessages(chosen, acks, res), Duration: time.Since(start), Err: err}
	if ae, ok := errors.AsType[*AckError](err); ok {
		for _, r := range ae.Results {
			if !r.Success {
				e.Refused++
			}
		}
	}
	for _, h := range hs.settle {
		run(hs, h, kindSettle, func(x SettleHook) { x.OnSettle(ctx, e) })
	}
}

// renewed reports a renewal of lease by ext, and a lost lease.
func (hs *hookSet) renewed(ctx context.Context, queue, group, lease string, ext time.Duration, start time.Time, res RenewResult, err error) {
	if hs != nil {
		hs.reportRenew(ctx, queue, group, lease, ext, start, res, err)
	}
}

func (hs *hookSet) reportRenew(ctx context.Context, queue, group, lease string, ext time.Duration, start time.Time, res RenewResult, err error) {
	if len(hs.renew) > 0 {
		e := RenewEvent{Queue: queue, Group: group, LeaseID: lease, Extension: ext, Result: res, Duration: time.Since(start), Err: err}
		for _, h := range hs.renew {
			run(hs, h, kindRenew, func(x RenewHook) { x.OnRenew(ctx, e) })
		}
	}
	if err == nil && !res.Success && len(hs.leaseLost) > 0 {
		e := LeaseLost{Queue: queue, Group: group, LeaseID: lease, Reason: res.Error}
		for _, h := range hs.leaseLost {
			run(hs, h, kindLeaseLost, func(x LeaseLostHook) { x.OnLeaseLost(ctx, e) })
		}
	}
}

// onAttempt is the transport's attempt observer when request hooks are
// set, nil otherwise (the transport then measures nothing).
func (hs *hookSet) onAttempt() func(context.Context, transport.Attempt) {
	if hs == nil || len(hs.request) == 0 {
		return nil
	}
	return func(ctx context.Context, a transport.Attempt) {
		e := RequestEvent{Method: a.Method, Route: routeOf(a.Path), Path: a.Path, URL: a.URL, Attempt: a.Number,
			Status: a.Status, Duration: a.Duration, Err: a.Err}
		for _, h := range hs.request {
			run(hs, h, kindRequest, func(x RequestHook) { x.OnRequest(ctx, e) })
		}
	}
}

// routeOf returns the template of an escaped request path (wire.RouteOf),
// "other" when it is no route of the broker's.
func routeOf(path string) string {
	if r, ok := wire.RouteOf(path); ok {
		return string(r)
	}
	return "other"
}
