package queenotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queenotel"
	"github.com/queen-go/queen/queentest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is a queentest broker and a client traced into in-memory exporters.
type env struct {
	t      *testing.T
	srv    *queentest.Server
	c      *queen.Client
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func newEnv(t *testing.T) *env {
	t.Helper()
	qc := queentest.DefaultQueueConfig()
	qc.RetryDelay = 0
	e := &env{t: t, srv: queentest.Start(t, queentest.WithDefaultQueueConfig(qc)),
		spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() {
		_ = e.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	hooks := queenotel.New(queenotel.WithTracerProvider(e.tp), queenotel.WithMeterProvider(mp))
	c, err := queen.New(e.srv.URL, queen.WithHooks(hooks),
		queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	e.c = c
	return e
}

// span is a finished span reduced to what the tests compare.
type span struct {
	Name   string
	Kind   trace.SpanKind
	Parent string // the parent's name, "" for a root
	Status codes.Code
	Attrs  string // sorted k=v, comma separated
}

func (s span) String() string {
	return fmt.Sprintf("%s (%s) parent=%q status=%s {%s}", s.Name, s.Kind, s.Parent, s.Status, s.Attrs)
}

func attrString(kvs []attribute.KeyValue) string {
	parts := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// finished returns the spans ended so far, sorted by their text.
func (e *env) finished() []string {
	stubs := e.spans.GetSpans()
	names := map[trace.SpanID]string{}
	for _, s := range stubs {
		names[s.SpanContext.SpanID()] = s.Name
	}
	var out []string
	for _, s := range stubs {
		out = append(out, span{Name: s.Name, Kind: s.SpanKind, Parent: names[s.Parent.SpanID()],
			Status: s.Status.Code, Attrs: attrString(s.Attributes)}.String())
	}
	sort.Strings(out)
	return out
}

// points returns every metric data point collected so far, as
// "name {attrs} value" lines (the count of a histogram), sorted.
func (e *env) points() []string {
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != queenotel.ScopeName {
			e.t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s {%s} sum=%d", m.Name, attrString(p.Attributes.ToSlice()), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s {%s} count=%d", m.Name, attrString(p.Attributes.ToSlice()), p.Count))
					if p.Sum < 0 {
						e.t.Errorf("%s: negative duration sum %v", m.Name, p.Sum)
					}
				}
			default:
				e.t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Attribute sets of the known run, in attrString's form.
const (
	sys     = "messaging.system=queen"
	pushOp  = "messaging.destination.name=orders,messaging.operation.name=push,messaging.operation.type=send," + sys
	popOp   = "messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.operation.name=pop,messaging.operation.type=receive," + sys
	procOp  = "messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.operation.name=process,messaging.operation.type=process," + sys
	ackOp   = "messaging.consumer.group.name=billing,messaging.destination.name=orders,messaging.operation.name=ack,messaging.operation.type=settle," + sys
	errKind = "error.type=_OTHER"
)

// TestKnownRun: N = 6 messages pushed in one push and consumed one by one
// by a group; M = 1 of them (payload 2) fails once and succeeds when the
// loop retries it in place, K = 1 (payload 5) is dead-lettered. The spans
// and metric points are exactly the expected ones, but for the ack spans:
// the loop acks as work completes, so how its acks fall into requests
// depends on timing; together they count each message once.
func TestKnownRun(t *testing.T) {
	e := newEnv(t)
	root, rootSpan := e.tp.Tracer("test").Start(t.Context(), "test")

	res, err := e.c.Queue("orders").Push(1, 2, 3, 4, 5, 6).Execute(root)
	if err != nil {
		t.Fatal(err)
	}
	errTransient, errPoison := errors.New("transient"), errors.New("poison")
	var mu sync.Mutex
	tries := map[string]int{}
	err = e.c.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
		Batch(6).Each().Limit(7).
		Consume(root, func(ctx context.Context, m *queen.Message) error {
			// The handler's own span nests under the process span.
			_, user := e.tp.Tracer("test").Start(ctx, "user work "+string(m.Raw))
			defer user.End()
			mu.Lock()
			tries[string(m.Raw)]++
			n := tries[string(m.Raw)]
			mu.Unlock()
			switch {
			case string(m.Raw) == "2" && n == 1:
				return errTransient
			case string(m.Raw) == "5":
				return errPoison
			}
			return nil
		}).
		OnError(func(ctx context.Context, m *queen.Message, err error) queen.Outcome {
			if errors.Is(err, errPoison) {
				return queen.DLQ(err)
			}
			return queen.Fail(err)
		}).
		Execute(root)
	if err != nil {
		t.Fatal(err)
	}
	rootSpan.End()
	if got := e.srv.DLQCount("orders"); got != 1 {
		t.Errorf("DLQ holds %d messages, want 1", got)
	}

	ids := map[string]string{} // payload -> message id
	for i, r := range res {
		ids[fmt.Sprint(i+1)] = r.MessageID
	}
	process := func(payload, outcome string, failed bool) []string {
		attrs := "messaging.destination.partition.id=" + partitionID(t, e, payload) +
			",messaging.message.id=" + ids[payload]
		status := codes.Unset
		if failed {
			attrs = errKind + "," + attrs
			status = codes.Error
		}
		all := strings.Split(attrs+","+procOp+",queen.outcome="+outcome, ",")
		sort.Strings(all)
		return []string{
			span{Name: "process orders", Kind: trace.SpanKindConsumer, Parent: "test", Status: status, Attrs: strings.Join(all, ",")}.String(),
			span{Name: "user work " + payload, Kind: trace.SpanKindInternal, Parent: "process orders"}.String(),
		}
	}
	want := []string{
		span{Name: "test", Kind: trace.SpanKindInternal}.String(),
		span{Name: "push orders", Kind: trace.SpanKindProducer, Parent: "test",
			Attrs: "messaging.batch.message_count=6," + pushOp}.String(),
		span{Name: "pop orders", Kind: trace.SpanKindClient, Parent: "test",
			Attrs: "messaging.batch.message_count=6," + popOp}.String(),
	}
	want = append(want, process("1", "completed", false)...)
	want = append(want, process("2", "failed", true)...)
	want = append(want, process("2", "completed", false)...)
	want = append(want, process("3", "completed", false)...)
	want = append(want, process("4", "completed", false)...)
	want = append(want, process("5", "dlq", true)...)
	want = append(want, process("6", "completed", false)...)
	sort.Strings(want)
	var spans []string
	acks, counts := 0, map[string]int{}
	for _, sp := range e.spans.GetSpans() {
		if sp.Name != "ack orders" {
			continue
		}
		acks++
		if sp.SpanKind != trace.SpanKindClient || sp.Status.Code != codes.Unset {
			t.Errorf("ack span %s: kind %s, status %s", attrString(sp.Attributes), sp.SpanKind, sp.Status.Code)
		}
		for _, kv := range sp.Attributes {
			if strings.HasPrefix(string(kv.Key), "queen.settle.") || kv.Key == "messaging.batch.message_count" {
				counts[string(kv.Key)] += int(kv.Value.AsInt64())
			}
		}
	}
	for _, sp := range e.finished() {
		if !strings.HasPrefix(sp, "ack orders ") {
			spans = append(spans, sp)
		}
	}
	assertLines(t, "spans", want, spans)
	// The acks: payload 2's retry is in place, so every message is acked
	// once: 5 completed, 1 dead-lettered, no retry or failed.
	if want := map[string]int{"messaging.batch.message_count": 6, "queen.settle.completed": 5, "queen.settle.dlq": 1}; !maps.Equal(counts, want) {
		t.Errorf("ack spans count %v, want %v", counts, want)
	}

	assertLines(t, "metric points", sorted(
		"messaging.client.consumed.messages {"+popOp+"} sum=6",
		fmt.Sprintf("messaging.client.operation.duration {"+ackOp+"} count=%d", acks),
		"messaging.client.operation.duration {"+popOp+"} count=1",
		"messaging.client.operation.duration {"+pushOp+"} count=1",
		"messaging.client.sent.messages {"+pushOp+"} sum=6",
		"messaging.process.duration {"+errKind+","+procOp+"} count=2",
		"messaging.process.duration {"+procOp+"} count=5",
	), e.points())
}

// partitionID is the broker's id of the partition of the message with
// payload (all of them are in the queue's default partition).
func partitionID(t *testing.T, e *env, payload string) string {
	t.Helper()
	for _, s := range e.spans.GetSpans() {
		if s.Name != "process orders" {
			continue
		}
		for _, kv := range s.Attributes {
			if kv.Key == "messaging.destination.partition.id" {
				return kv.Value.String()
			}
		}
	}
	t.Fatalf("no process span with a partition id")
	return ""
}

func assertLines(t *testing.T, what string, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	t.Errorf("%s differ:\n--- want\n%s\n--- got\n%s", what, strings.Join(want, "\n"), strings.Join(got, "\n"))
}

// TestFailures: a refused push, a failed pop and a refused ack are
// recorded with their error.type; an empty pop records nothing.
func TestFailures(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()

	e.srv.FailNext(queentest.RoutePush, 1, http.StatusBadRequest, 0)
	if _, err := e.c.Queue("q").Push(1, 2).Execute(ctx); err == nil {
		t.Fatal("push succeeded through FailNext")
	}
	if _, err := e.c.Queue("q").Push(1, 2).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	empty, err := e.c.Queue("other").Wait(false).Pop(ctx)
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty pop: %v, %d messages", err, len(empty))
	}
	e.srv.FailNext(queentest.RoutePop, 1, http.StatusBadRequest, 0)
	if _, err := e.c.Queue("q").Group("g").Wait(false).Pop(ctx); err == nil {
		t.Fatal("pop succeeded through FailNext")
	}
	msgs, err := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Batch(2).Pop(ctx)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("pop: %v, %d messages", err, len(msgs))
	}
	// The retry releases the lease: acking the first message again is refused.
	if _, err := e.c.SettleBatch(ctx, []queen.Settlement{{Message: msgs[0], Status: queen.StatusCompleted},
		{Message: msgs[1], Status: queen.StatusRetry}}, queen.AckOptions{}); err != nil {
		t.Fatal(err)
	}
	var ae *queen.AckError
	if _, err := e.c.Ack(ctx, msgs[0], false, queen.AckOptions{}); !errors.As(err, &ae) {
		t.Fatalf("second ack: %v, want an *AckError", err)
	}
	if _, err := e.c.Renew(ctx, msgs[0]); !errors.Is(err, queen.ErrLeaseLost) {
		t.Fatalf("renew after ack: %v, want ErrLeaseLost", err)
	}

	const (
		push = "messaging.destination.name=q,messaging.operation.name=push,messaging.operation.type=send," + sys
		pop  = "messaging.consumer.group.name=g,messaging.destination.name=q,messaging.operation.name=pop,messaging.operation.type=receive," + sys
		ack  = "messaging.consumer.group.name=g,messaging.destination.name=q,messaging.operation.name=ack,messaging.operation.type=settle," + sys
	)
	assertLines(t, "spans", sorted(
		span{Name: "push q", Kind: trace.SpanKindProducer, Status: codes.Error,
			Attrs: "error.type=400,messaging.batch.message_count=2," + push}.String(),
		span{Name: "push q", Kind: trace.SpanKindProducer, Attrs: "messaging.batch.message_count=2," + push}.String(),
		span{Name: "pop q", Kind: trace.SpanKindClient, Status: codes.Error, Attrs: "error.type=400," + pop}.String(),
		span{Name: "pop q", Kind: trace.SpanKindClient, Attrs: "messaging.batch.message_count=2," + pop}.String(),
		span{Name: "ack q", Kind: trace.SpanKindClient,
			Attrs: "messaging.batch.message_count=2," + ack + ",queen.settle.completed=1,queen.settle.retry=1"}.String(),
		span{Name: "ack q", Kind: trace.SpanKindClient, Status: codes.Error,
			Attrs: "error.type=refused,messaging.batch.message_count=1," + ack + ",queen.settle.failed=1,queen.settle.refused=1"}.String(),
	), e.finished())
	assertLines(t, "metric points", sorted(
		"messaging.client.consumed.messages {"+pop+"} sum=2",
		"messaging.client.operation.duration {"+ack+"} count=1",
		"messaging.client.operation.duration {"+pop+"} count=1",
		"messaging.client.operation.duration {"+push+"} count=1",
		"messaging.client.operation.duration {error.type=400,"+pop+"} count=1",
		"messaging.client.operation.duration {error.type=400,"+push+"} count=1",
		"messaging.client.operation.duration {error.type=refused,"+ack+"} count=1",
		"messaging.client.sent.messages {"+push+"} sum=2",
		"messaging.client.sent.messages {error.type=400,"+push+"} sum=2",
		"queen.client.leases.lost {messaging.consumer.group.name=g,messaging.destination.name=q,"+sys+"} sum=1",
	), e.points())
}

func sorted(lines ...string) []string {
	sort.Strings(lines)
	return lines
}

// TestProcessSpanLinksToProducerTrace: a message pushed in a transaction
// with the producer's trace id gets a process span linked to that trace;
// one pushed with a plain push (whose trace id a 2.x broker, and
// queentest, drop) gets no link.
func TestProcessSpanLinksToProducerTrace(t *testing.T) {
	e := newEnv(t)
	producer, pspan := e.tp.Tracer("test").Start(t.Context(), "producer")
	tid := queenotel.TraceID(producer)
	if tid == "" {
		t.Fatal("TraceID of a ctx with a span is empty")
	}
	_, err := e.c.Transaction().Queue("linked").Push(queen.Item{Payload: 1, TraceID: tid}).Commit(producer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Queue("linked").Push(2).TraceID(tid).Execute(producer); err != nil {
		t.Fatal(err)
	}
	pspan.End()

	consumer, cspan := e.tp.Tracer("test").Start(context.Background(), "consumer")
	err = e.c.Queue("linked").Batch(2).Each().Limit(2).
		Consume(consumer, func(context.Context, *queen.Message) error { return nil }).
		Execute(consumer)
	cspan.End()
	if err != nil {
		t.Fatal(err)
	}
	var links [][]sdktrace.Link
	for _, s := range e.spans.GetSpans() {
		if s.Name == "process linked" {
			links = append(links, s.Links)
		}
	}
	if len(links) != 2 {
		t.Fatalf("%d process spans, want 2", len(links))
	}
	if len(links[0]) != 1 || len(links[1]) != 0 {
		t.Fatalf("links of the process spans: %+v, want one on the first (transaction push) and none on the second", links)
	}
	l := links[0][0]
	if l.SpanContext.TraceID() != pspan.SpanContext().TraceID() {
		t.Errorf("link to trace %s, want the producer's %s", l.SpanContext.TraceID(), pspan.SpanContext().TraceID())
	}
	if l.SpanContext.SpanID().IsValid() {
		t.Errorf("link carries span id %s; a message carries none", l.SpanContext.SpanID())
	}
	if got := attrString(l.Attributes); got != "queen.link=message.traceId" {
		t.Errorf("link attributes %s", got)
	}
}

func TestTraceID(t *testing.T) {
	if got := queenotel.TraceID(context.Background()); got != "" {
		t.Errorf("TraceID without a span = %q, want empty", got)
	}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	ctx := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}}))
	if got, want := queenotel.TraceID(ctx), "0af76519-16cd-43dd-8448-eb211c80319c"; got != want {
		t.Errorf("TraceID = %q, want %q", got, want)
	}
}

// TestProducerBatchSpans: a Producer's batch records one "push <queue>"
// span, with its message count, and counts its messages as sent, as a
// PushBuilder's push does; the span is a root (a batch serves many
// callers).
func TestProducerBatchSpans(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, err := e.c.Queue("orders").Producer(queen.WithBatchDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var pending []*queen.PendingPush
	for i := range 5 {
		pending = append(pending, p.Push(ctx, map[string]int{"n": i}))
	}
	if err := p.Flush(ctx); err != nil { // sends the one batch at once
		t.Fatal(err)
	}
	for _, pp := range pending {
		if _, err := pp.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{span{Name: "push orders", Kind: trace.SpanKindProducer,
		Attrs: "messaging.batch.message_count=5," + pushOp}.String()}
	if got := e.finished(); !slices.Equal(got, want) {
		t.Errorf("spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, w := e.points(), "messaging.client.sent.messages {"+pushOp+"} sum=5"; !slices.Contains(got, w) {
		t.Errorf("metric points:\n%s\nwant among them %s", strings.Join(got, "\n"), w)
	}
}
