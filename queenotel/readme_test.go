package queenotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queenotel"
	"github.com/queen-go/queen/queentest"
)

// The README's line (the root module's TestDocCodeBlocksRun checks that it
// is here, token for token): hooks on otel's global providers trace a push.
func TestREADMEGlobalProviders(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	url := queentest.Start(t).URL

	client, err := queen.New(url, queen.WithHooks(queenotel.New())) // otel's global providers

	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	if _, err := client.Queue("orders").Push(1).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(spans.GetSpans()) == 0 {
		t.Fatal("no span recorded through the global tracer provider")
	}
}

// The package documentation's two lines (checked like the README's line):
// hooks on otel's global providers measure a push.
func TestDocGlobalProviders(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(mp)
	t.Cleanup(func() {
		otel.SetMeterProvider(prev)
		_ = mp.Shutdown(context.Background())
	})
	url := queentest.Start(t).URL

	hooks := queenotel.New() // the global TracerProvider and MeterProvider
	client, err := queen.New(url, queen.WithHooks(hooks))

	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	if _, err := client.Queue("orders").Push(1).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sm := range rm.ScopeMetrics {
		n += len(sm.Metrics)
	}
	if n == 0 {
		t.Fatal("no metric recorded through the global meter provider")
	}
}
