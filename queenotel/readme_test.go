package queenotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
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
