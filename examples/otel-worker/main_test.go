package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example, on the in-process broker, prints the spans of the producer,
// the pops, the handler calls (with the handler's own spans) and the acks,
// then the metrics.
func TestRunPrintsSpansAndMetrics(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "", 4, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	count := func(s string) int { return strings.Count(got, s) }
	// 4 orders, order 2 twice: 5 handler calls, each with its "charge".
	if n := count(`"Name": "process otel-orders-`); n != 5 {
		t.Errorf("%d process spans, want 5", n)
	}
	if n := count(`"Name": "charge"`); n != 5 {
		t.Errorf("%d charge spans, want 5", n)
	}
	if n := count(`"Name": "push otel-orders-`); n != 1 {
		t.Errorf("%d push spans, want 1", n)
	}
	for _, want := range []string{
		`"Name": "checkout"`, `"Name": "worker"`, `"Name": "pop otel-orders-`, `"Name": "ack otel-orders-`,
		`"Name": "messaging.client.sent.messages"`, `"Name": "messaging.client.consumed.messages"`,
		`"Name": "messaging.client.operation.duration"`, `"Name": "messaging.process.duration"`,
		`"Value": "dlq"`, "order 3 was dead-lettered",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}

func TestRunRefusesTooFewOrders(t *testing.T) {
	if err := run(context.Background(), "", 2, &bytes.Buffer{}); err == nil {
		t.Fatal("run accepted 2 orders")
	}
}
