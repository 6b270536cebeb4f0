// Command otel-worker is a small worker traced and measured with
// OpenTelemetry through package queenotel: it pushes a few orders in a
// "checkout" span, consumes them with a consumer group (one order fails
// once and is retried, one is dead-lettered), and prints every span and
// the metrics to stdout as JSON (the stdout exporters of OpenTelemetry).
//
//	go run .                                     # in examples/otel-worker: in-process broker (queentest)
//	QUEEN_URL=http://localhost:6632 go run .
//	QUEEN_URL=http://h1:6632,http://h2:6632 go run . # a cluster
//
// It is a module of its own, so that the root module of queen-go does not
// require OpenTelemetry.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queenotel"
	"github.com/queen-go/queen/queentest"
)

func main() {
	if err := run(context.Background(), os.Getenv("QUEEN_URL"), 5, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// errTransient and errInvalid are the failures the handler simulates.
var (
	errTransient = errors.New("payment service briefly unavailable")
	errInvalid   = errors.New("order has no items")
)

// run pushes orders and consumes them with tracing and metrics on, against
// the broker at url, one URL or a comma list of a cluster's (an in-process
// queentest broker when url is empty),
// and writes the spans, then the metrics, to out.
func run(ctx context.Context, url string, orders int, out io.Writer) error {
	if orders < 3 {
		return fmt.Errorf("orders must be at least 3 (got %d)", orders)
	}
	url, opts := brokers(url)
	if url == "" {
		srv := queentest.NewServer()
		defer srv.Close()
		url = srv.URL
	}

	spans, err := stdouttrace.New(stdouttrace.WithWriter(out), stdouttrace.WithPrettyPrint())
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(out), stdoutmetric.WithPrettyPrint())
	if err != nil {
		return err
	}

	client, err := queen.New(url, append(opts, queen.WithHooks(queenotel.New(
		queenotel.WithTracerProvider(tp), queenotel.WithMeterProvider(mp))))...)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	queue := fmt.Sprintf("otel-orders-%d", time.Now().UnixNano())
	if _, err := client.Queue(queue).Config(queen.QueueConfig{
		RetryDelay:      queen.Ptr(time.Duration(0)), // a failed order is retried at once
		DeadLetterQueue: queen.Ptr(true),             // keep what is dead-lettered
	}).Create().Execute(ctx); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}

	// The producer: one push of every order, in a span of its own.
	tracer := tp.Tracer("otel-worker")
	checkout, span := tracer.Start(ctx, "checkout")
	payloads := make([]any, orders)
	for i := range payloads {
		payloads[i] = map[string]any{"order": i + 1}
	}
	_, err = client.Queue(queue).Push(payloads...).Execute(checkout)
	span.End()
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}

	// The consumer: order 2 fails once and is retried, order 3 is invalid
	// and dead-lettered. Every handler call is a "process" span, and the
	// handler's own span ("charge") nests under it.
	var mu sync.Mutex
	tries := map[string]int{}
	worker, wspan := tracer.Start(ctx, "worker")
	err = client.Queue(queue).Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
		Each().Limit(orders+1). // every order once, order 2 twice
		Consume(worker, func(ctx context.Context, m *queen.Message) error {
			_, charge := tracer.Start(ctx, "charge")
			defer charge.End()
			order := fmt.Sprint(m.Data["order"])
			mu.Lock()
			tries[order]++
			n := tries[order]
			mu.Unlock()
			switch {
			case order == "2" && n == 1:
				return errTransient
			case order == "3":
				return errInvalid
			}
			return nil
		}).
		OnError(func(ctx context.Context, m *queen.Message, err error) queen.Outcome {
			if errors.Is(err, errInvalid) {
				return queen.DLQ(err)
			}
			return queen.Fail(err)
		}).
		Execute(worker)
	wspan.End()
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}

	if err := tp.Shutdown(ctx); err != nil {
		return err
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	if err := metrics.Export(ctx, &rm); err != nil {
		return err
	}
	fmt.Fprintln(out, "handled "+strconv.Itoa(orders)+" orders: order 2 failed once and came back, order 3 was dead-lettered")
	return mp.Shutdown(ctx)
}

// brokers splits QUEEN_URL, one URL or a comma list of the brokers of a
// cluster, into the first URL and the options naming the others.
func brokers(list string) (string, []queen.Option) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return "", nil
	}
	return urls[0], []queen.Option{queen.WithURLs(urls[1:]...)}
}
