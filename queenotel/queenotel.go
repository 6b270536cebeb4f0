package queenotel

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/queen-go/queen"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/queen-go/queen/queenotel"

// System is the value of messaging.system.
const System = "queen"

// Operation names (messaging.operation.name), one per operation type.
const (
	OperationPush    = "push"
	OperationPop     = "pop"
	OperationProcess = "process"
	OperationAck     = "ack"
)

// Attribute keys of this package, beyond the semantic conventions.
const (
	// OutcomeKey is the outcome of a process span of one message.
	OutcomeKey = attribute.Key("queen.outcome")
	// LinkKey marks the link of a process span to the producer's trace.
	LinkKey = attribute.Key("queen.link")
	// SettleKeyPrefix prefixes the per-status counts of an ack span
	// (queen.settle.completed, ...); queen.settle.refused counts refusals.
	SettleKeyPrefix = "queen.settle."
)

// Option configures Hooks.
type Option func(*config)

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sets the TracerProvider (default: otel's global one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the MeterProvider (default: otel's global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// Hooks traces and measures a client; give it to queen.WithHooks. It
// implements queen.PushHook, queen.PopHook, queen.HandlerHook,
// queen.SettleHook and queen.LeaseLostHook, and is safe for concurrent use.
type Hooks struct {
	tracer    trace.Tracer
	sent      messagingconv.ClientSentMessages
	consumed  messagingconv.ClientConsumedMessages
	opDur     messagingconv.ClientOperationDuration
	procDur   messagingconv.ProcessDuration
	leaseLost metric.Int64Counter
}

var (
	_ queen.PushHook      = (*Hooks)(nil)
	_ queen.PopHook       = (*Hooks)(nil)
	_ queen.HandlerHook   = (*Hooks)(nil)
	_ queen.SettleHook    = (*Hooks)(nil)
	_ queen.LeaseLostHook = (*Hooks)(nil)
)

// New returns the hooks. An instrument the meter cannot create is
// reported to otel's error handler and left a no-op.
func New(opts ...Option) *Hooks {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	meter := cfg.mp.Meter(ScopeName)
	h := &Hooks{tracer: cfg.tp.Tracer(ScopeName)}
	var err error
	var errs []error
	h.sent, err = messagingconv.NewClientSentMessages(meter)
	errs = append(errs, err)
	h.consumed, err = messagingconv.NewClientConsumedMessages(meter)
	errs = append(errs, err)
	h.opDur, err = messagingconv.NewClientOperationDuration(meter)
	errs = append(errs, err)
	h.procDur, err = messagingconv.NewProcessDuration(meter)
	errs = append(errs, err)
	h.leaseLost, err = meter.Int64Counter("queen.client.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that a renewal found lost: their messages may be with another worker."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return h
}

// TraceID returns the trace id of ctx's span as a UUID, for a producer to
// push (queen.Item.TraceID, PushBuilder.TraceID, TransactionPush.TraceID);
// "" when ctx has no valid span context. See the package documentation
// for which brokers keep it.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.TraceID().IsValid() {
		return ""
	}
	return uuid.UUID(sc.TraceID()).String()
}

// traceIDOf reads a message's trace id (a UUID) as an OpenTelemetry one.
func traceIDOf(s string) (trace.TraceID, bool) {
	if s == "" {
		return trace.TraceID{}, false
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return trace.TraceID{}, false
	}
	id := trace.TraceID(u)
	return id, id.IsValid()
}

// common returns the attributes of every span and point of an operation.
func common(op string, typ attribute.KeyValue, queue, group string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		semconv.MessagingOperationName(op),
		typ,
		semconv.MessagingDestinationName(queue),
	}
	if group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
	}
	return attrs
}

// errorType is the low-cardinality error.type of err.
func errorType(err error) string {
	var (
		be *queen.BrokerError
		ae *queen.AckError
		pe *queen.PushError
	)
	switch {
	case errors.As(err, &ae):
		return "refused"
	case errors.As(err, &pe):
		return "push_failed"
	case errors.As(err, &be):
		return strconv.Itoa(be.Status)
	case errors.Is(err, queen.ErrHandlerPanic):
		return "panic"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "_OTHER"
}

// record makes a span of an operation that has ended (it started d ago),
// and records its duration; err marks it failed.
func (h *Hooks) record(ctx context.Context, name string, kind trace.SpanKind, d time.Duration, err error, attrs []attribute.KeyValue, spanAttrs ...attribute.KeyValue) {
	end := time.Now()
	_, span := h.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(end.Add(-d)),
		trace.WithAttributes(attrs...), trace.WithAttributes(spanAttrs...))
	if err != nil {
		et := errorType(err)
		attrs = append(attrs, semconv.ErrorTypeKey.String(et))
		span.SetAttributes(semconv.ErrorTypeKey.String(et))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
	h.opDur.Inst().Record(ctx, d.Seconds(), metric.WithAttributes(attrs...))
}

// OnPush records a push span, its duration and the messages sent.
func (h *Hooks) OnPush(ctx context.Context, e queen.PushEvent) {
	attrs := common(OperationPush, semconv.MessagingOperationTypeSend, e.Queue, "")
	var extra []attribute.KeyValue
	if e.Count == 1 && len(e.Results) == 1 && e.Results[0].MessageID != "" {
		extra = append(extra, semconv.MessagingMessageID(e.Results[0].MessageID))
	}
	if e.Count > 1 {
		extra = append(extra, semconv.MessagingBatchMessageCount(e.Count))
	}
	h.record(ctx, OperationPush+" "+e.Queue, trace.SpanKindProducer, e.Duration, e.Err, attrs, extra...)

	failed := e.Count
	if e.Results != nil {
		failed = 0
		for _, r := range e.Results {
			if r.Status == queen.PushFailed {
				failed++
			}
		}
	}
	if ok := int64(e.Count - failed); ok > 0 {
		h.sent.Inst().Add(ctx, ok, metric.WithAttributes(attrs...))
	}
	if failed > 0 {
		et := errorType(e.Err)
		h.sent.Inst().Add(ctx, int64(failed), metric.WithAttributes(append(attrs, semconv.ErrorTypeKey.String(et))...))
	}
}

// OnPop records a pop that delivered messages or failed: a span, its
// duration and the messages consumed. An empty pop records nothing.
func (h *Hooks) OnPop(ctx context.Context, e queen.PopEvent) {
	if e.Err == nil && len(e.Messages) == 0 {
		return
	}
	attrs := common(OperationPop, semconv.MessagingOperationTypeReceive, e.Queue, e.Group)
	var extra []attribute.KeyValue
	if n := len(e.Messages); n > 0 {
		extra = append(extra, semconv.MessagingBatchMessageCount(n))
	}
	h.record(ctx, OperationPop+" "+e.Queue, trace.SpanKindClient, e.Duration, e.Err, attrs, extra...)
	if n := len(e.Messages); n > 0 {
		h.consumed.Inst().Add(ctx, int64(n), metric.WithAttributes(attrs...))
	}
}

// spanKey holds the process span OnHandlerStart put in the handler's ctx.
type spanKey struct{}

// OnHandlerStart starts the process span and returns the handler's ctx
// with it.
func (h *Hooks) OnHandlerStart(ctx context.Context, e queen.HandlerStart) context.Context {
	attrs := common(OperationProcess, semconv.MessagingOperationTypeProcess, e.Queue, e.Group)
	if len(e.Messages) == 1 {
		m := e.Messages[0]
		attrs = append(attrs, semconv.MessagingMessageID(m.ID), semconv.MessagingDestinationPartitionID(m.PartitionID))
	} else {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(e.Messages)))
	}
	var links []trace.Link
	seen := map[trace.TraceID]bool{}
	for _, m := range e.Messages {
		if id, ok := traceIDOf(m.TraceID); ok && !seen[id] {
			seen[id] = true
			links = append(links, trace.Link{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: id, Remote: true}),
				Attributes:  []attribute.KeyValue{LinkKey.String("message.traceId")},
			})
		}
	}
	ctx, span := h.tracer.Start(ctx, OperationProcess+" "+e.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	return context.WithValue(ctx, spanKey{}, span)
}

// OnHandlerEnd ends the process span and records the handler's duration.
func (h *Hooks) OnHandlerEnd(ctx context.Context, e queen.HandlerEnd) {
	attrs := common(OperationProcess, semconv.MessagingOperationTypeProcess, e.Queue, e.Group)
	span, _ := ctx.Value(spanKey{}).(trace.Span)
	if len(e.Outcomes) == 1 && e.Outcomes[0].Status != "" && span != nil {
		span.SetAttributes(OutcomeKey.String(string(e.Outcomes[0].Status)))
	}
	if e.Err != nil {
		et := errorType(e.Err)
		attrs = append(attrs, semconv.ErrorTypeKey.String(et))
		if span != nil {
			span.SetAttributes(semconv.ErrorTypeKey.String(et))
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	if e.LeaseLost && span != nil {
		span.SetAttributes(attribute.Bool("queen.lease_lost", true))
	}
	if span != nil {
		span.End()
	}
	h.procDur.Inst().Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
}

// OnSettle records an ack span and its duration.
func (h *Hooks) OnSettle(ctx context.Context, e queen.SettleEvent) {
	queue := ""
	if len(e.Settlements) > 0 && e.Settlements[0].Message != nil {
		queue = e.Settlements[0].Message.Queue
	}
	attrs := common(OperationAck, semconv.MessagingOperationTypeSettle, queue, e.Group)
	extra := []attribute.KeyValue{semconv.MessagingBatchMessageCount(len(e.Settlements))}
	for _, s := range []queen.AckStatus{queen.StatusCompleted, queen.StatusFailed, queen.StatusRetry, queen.StatusDLQ} {
		if n := e.Count(s); n > 0 {
			extra = append(extra, attribute.Int(SettleKeyPrefix+string(s), n))
		}
	}
	if e.Refused > 0 {
		extra = append(extra, attribute.Int(SettleKeyPrefix+"refused", e.Refused))
	}
	h.record(ctx, OperationAck+" "+queue, trace.SpanKindClient, e.Duration, e.Err, attrs, extra...)
}

// OnLeaseLost counts a lost lease.
func (h *Hooks) OnLeaseLost(ctx context.Context, e queen.LeaseLost) {
	attrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(System)}
	if e.Queue != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(e.Queue))
	}
	if e.Group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(e.Group))
	}
	h.leaseLost.Add(ctx, 1, metric.WithAttributes(attrs...))
}
