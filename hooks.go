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

// Hook is a value given to WithHooks, called at the events whose interfaces
// it implements (PushHook, PopHook, ...). It runs synchronously on the
// event's goroutine and concurrently with others, so it must be safe for
// concurrent use and quick; a panic is recovered and logged. Event values
// belong to the client. See docs/HOOKS.md.
type Hook any

// PushHook is called after every PushBuilder.Execute that sent a request,
// and after every batch a Producer sent.
type PushHook interface {
	OnPush(ctx context.Context, e PushEvent)
}

// PushEvent describes one push request.
type PushEvent struct {
	Queue, Partition string        // "" partition: the default one
	Count            int           // messages carried
	Results          []PushResult  // nil when the broker gave none
	Duration         time.Duration // retries included
	Err              error         // what Execute returned
}

// PopHook is called after every pop request, a consume loop's included.
type PopHook interface {
	OnPop(ctx context.Context, e PopEvent)
}

// PopEvent describes one pop request.
type PopEvent struct {
	Queue, Partition, Group string        // "" group: queue mode; "" queue: discovery
	Messages                []*Message    // none on an empty pop
	Wait                    time.Duration // the long poll asked; 0: none
	Duration                time.Duration // long poll and retries included
	Err                     error
}

// HandlerHook is called around every handler call of a consume loop.
// OnHandlerStart must return ctx or a context derived from it, which the
// handler, OnSuccess, OnError and OnHandlerEnd then get.
type HandlerHook interface {
	OnHandlerStart(ctx context.Context, e HandlerStart) context.Context
	OnHandlerEnd(ctx context.Context, e HandlerEnd)
}

// HandlerStart describes a handler call about to start.
type HandlerStart struct {
	Queue, Group string
	Messages     []*Message // what the handler gets
}

// HandlerEnd describes a finished handler call.
type HandlerEnd struct {
	Queue, Group string
	Messages     []*Message
	Duration     time.Duration // the handler's own
	Err          error         // ErrHandlerPanic when it panicked
	// Outcomes holds one outcome per message, in order; a zero one is not
	// sent (AutoAck(false), LeaseLost).
	Outcomes  []Outcome
	LeaseLost bool // lost while the handler ran: outcomes not sent
}

// SettleHook is called after every ack request that settles messages, a
// consume loop's included (it acks as work completes: one request may
// hold several pops' messages), once the request got an answer or failed
// for good.
type SettleHook interface {
	OnSettle(ctx context.Context, e SettleEvent)
}

// SettleEvent describes one settlement of messages.
type SettleEvent struct {
	Group       string           // "": queue mode
	Settlements []Settlement     // as sent, in order
	Messages    []SettledMessage // one per settlement, in order
	Refused     int
	Duration    time.Duration // first send to final answer
	Err         error         // an *AckError when the broker refused some
}

// SettledMessage is what happened to one message of a settlement. In a
// consume loop Outcome and Sent can differ (a Fail is sent retry or dlq).
type SettledMessage struct {
	Outcome AckStatus    // the status chosen
	Sent    AckStatus    // the status sent
	Answer  SettleAnswer // AnswerNone without an answer
	Error   string       // the broker's reason for a refusal
}

// SettleAnswer is the broker's answer for one settled message.
type SettleAnswer string

// The answers a SettledMessage reports; a dead-lettered message is
// AnswerDeadLettered whatever was sent (docs/HOOKS.md).
const (
	AnswerNone          SettleAnswer = ""
	AnswerApplied       SettleAnswer = "applied"
	AnswerLeaseReleased SettleAnswer = "lease released"
	AnswerDeadLettered  SettleAnswer = "dead-lettered"
	AnswerRefused       SettleAnswer = "refused"
)

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

// RenewHook is called after every lease renewal request, a consume
// loop's included.
type RenewHook interface {
	OnRenew(ctx context.Context, e RenewEvent)
}

// RenewEvent describes one lease renewal.
type RenewEvent struct {
	Queue, Group string // Client.Renew: the lease's first message's
	LeaseID      string
	Extension    time.Duration // asked for
	Result       RenewResult   // Success false: the lease is lost
	Duration     time.Duration // retries included
	Err          error         // the request's, not the lease's
}

// LeaseLostHook is called when a renewal finds a lease expired or
// released; a consume loop cancels that lease's handlers' ctx at once,
// unless every message of the lease was acked already (its acks released
// it).
type LeaseLostHook interface {
	OnLeaseLost(ctx context.Context, e LeaseLost)
}

// LeaseLost describes a lost lease.
type LeaseLost struct {
	Queue, Group string // as in RenewEvent
	LeaseID      string
	Reason       string // the broker's
}

// RequestHook is called after every HTTP exchange: each attempt of a call.
type RequestHook interface {
	OnRequest(ctx context.Context, e RequestEvent)
}

// RequestEvent describes one HTTP exchange with the broker.
type RequestEvent struct {
	Method   string
	Route    string        // the path template, "/api/v1/pop/queue/{queue}"; "other"
	Path     string        // escaped, as sent
	URL      string        // the broker's base URL
	Attempt  int           // from 1
	Status   int           // 0 without an answer (Err)
	Duration time.Duration // to the answer's last byte
	Err      error
}

// WithHooks adds hooks (see Hook); one that implements no hook interface
// fails New with ErrInvalidOption.
func WithHooks(hooks ...Hook) Option {
	return func(c *config) { c.hooks = append(c.hooks, hooks...) }
}

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

// hookSet: a nil *hookSet (no WithHooks) is valid.
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

type hookOf[T any] struct {
	h      T
	pos    int // position among the hooks given, for the log
	logged *[numHookKinds]atomic.Bool
}

func addHook[T any](list *[]hookOf[T], h Hook, pos int, logged *[numHookKinds]atomic.Bool) bool {
	x, ok := h.(T)
	if ok {
		*list = append(*list, hookOf[T]{x, pos, logged})
	}
	return ok
}

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

// run logs the first panic of each hook and kind.
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

// now reads no clock without hooks.
func (hs *hookSet) now() time.Time {
	if hs == nil {
		return time.Time{}
	}
	return time.Now()
}

// Each event has a small method the compiler inlines (a nil check) and
// one that does the work.

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

type handlerTurn struct {
	queue, group string
	msgs         []*Message
	start        time.Time
}

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

// handlerEnd copies outcomes: the caller may reuse them.
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

// settled: chosen nil means the outcomes sent; res nil, no answer.
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

// onAttempt is nil without request hooks: the transport measures nothing.
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

func routeOf(path string) string {
	if r, ok := wire.RouteOf(path); ok {
		return string(r)
	}
	return "other"
}
