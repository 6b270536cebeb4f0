package queen_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The quick start of README.md and of the package documentation: push
// three orders, then a consume loop for the group "billing" bills them in
// order; the bad one goes to the dead-letter queue (OnError), and the loop
// goes on. Limit stops the loop after the three (a worker runs until its
// ctx ends).
func Example_quickStart() {
	broker := queentest.NewServer() // with a real broker: the broker's URL
	defer broker.Close()
	brokerURL := broker.URL

	ctx := context.Background()
	client, err := queen.New(brokerURL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	// Push: one message per argument, any JSON value.
	orders := []any{
		map[string]any{"id": 1, "total": 30},
		map[string]any{"id": 2, "total": -5},
		map[string]any{"id": 3, "total": 12},
	}
	if _, err := client.Queue("orders").Push(orders...).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	// Consume: a worker loop for the group "billing". The handler gets the
	// messages in partition order; nil acks one completed, an error goes
	// to OnError, whose outcome is acked.
	err = client.Queue("orders").
		Group("billing").
		SubscriptionMode(queen.SubscriptionModeAll). // a new group starts at the tail otherwise
		Limit(len(orders)).                          // stop after these (a worker runs until ctx ends)
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			if total, _ := msg.Data["total"].(float64); total < 0 {
				return errBadOrder
			}
			fmt.Println("billed order", msg.Data["id"])
			return nil
		}).
		OnError(func(ctx context.Context, msg *queen.Message, err error) queen.Outcome {
			fmt.Println("order", msg.Data["id"], "dead-lettered:", err)
			return queen.DLQ(err) // it will never succeed; queen.Fail(err) would try again
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// billed order 1
	// order 2 dead-lettered: bad order
	// billed order 3
}

var errBadOrder = errors.New("bad order")

// A pop settled by hand, in one SettleBatch: the order of total 0 fails;
// the one after it in its partition is not handled but given back (retry,
// no retry spent), so that it comes again after the failed one, in order.
//
// One ack per message in a loop breaks at the first failure: the failed
// ack (or a retry one; on 2.x a dlq one too) releases the partition's
// lease, and every later ack of that pop's partition is refused ("invalid
// or expired lease").
func Example_popAndSettle() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	orders := []any{
		map[string]any{"id": 1, "total": 30},
		map[string]any{"id": 2, "total": 0},
		map[string]any{"id": 3, "total": 12},
	}
	if _, err := client.Queue("orders").Push(orders...).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	// Pop a batch for the group "billing" (it leases their partition).
	msgs, err := client.Queue("orders").
		Group("billing").
		SubscriptionMode(queen.SubscriptionModeAll).
		Batch(10).
		Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}

	// One outcome per message, sent in ONE request: after a failure, the
	// rest of that partition goes back (retry) to follow it in order.
	var acks []queen.Settlement
	failed := map[string]bool{} // partitions with a failure in this pop
	for _, msg := range msgs {
		status := queen.StatusCompleted
		switch {
		case failed[msg.Partition]:
			status = queen.StatusRetry // not handled: given back, no retry spent
		case msg.Data["total"] == 0.0:
			status = queen.StatusFailed // comes back after the queue's retry delay
			failed[msg.Partition] = true
		}
		fmt.Println("order", msg.Data["id"], status)
		acks = append(acks, queen.Settlement{Message: msg, Status: status})
	}
	if _, err := client.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "billing"}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// order 1 completed
	// order 2 failed
	// order 3 retry
}

// quickStartBody is the README quick start's main body, as tokens: what
// follows "func main() {" up to its closing brace.
func quickStartBody(t *testing.T) []tok {
	t.Helper()
	for _, b := range readmeBlocks(t) {
		if !strings.Contains(b.text, "package main") || !strings.Contains(b.text, "Consume(") {
			continue
		}
		toks := goTokens(b.text)
		for i := 0; i+4 < len(toks); i++ {
			if toks[i].lit == "func" && toks[i+1].lit == "main" && toks[i+4].t == token.LBRACE {
				return toks[i+5 : len(toks)-1]
			}
		}
	}
	t.Fatal("README.md has no quick start program (package main, Consume)")
	return nil
}

// The README's quick start is the Example's code, token for token (so that
// the README shows what Example_quickStart runs and checks).
func TestReadmeQuickStartIsTheExample(t *testing.T) {
	body := quickStartBody(t)
	src, err := os.ReadFile("example_quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !contains(goTokens(string(src)), body) {
		t.Error("README.md's quick start differs from Example_quickStart (example_quickstart_test.go): copy the one into the other")
	}
}

// What the README says of a pop settled by hand, on both broker profiles: one ack per
// message is refused after a failure of the same partition, while the one
// batch settles every message, and the failed order and the one given
// back after it come again in order.
func TestQuickStartSettlePatterns(t *testing.T) {
	for _, profile := range []struct {
		name string
		opt  []queentest.Option
	}{{"2.x", nil}, {"0.15.1", []queentest.Option{queentest.Broker015()}}} {
		t.Run(profile.name, func(t *testing.T) {
			cfg := queentest.DefaultQueueConfig()
			cfg.RetryDelay = 0 // the failed order comes back at once
			srv := queentest.Start(t, append(profile.opt, queentest.WithDefaultQueueConfig(cfg))...)
			client, err := queen.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close(context.Background()) })
			ctx := t.Context()
			opts := queen.AckOptions{ConsumerGroup: "billing"}
			pop := func(q string) []*queen.Message {
				t.Helper()
				msgs, err := client.Queue(q).Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
					Batch(10).Wait(false).Pop(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return msgs
			}
			ids := func(msgs []*queen.Message) []any {
				var out []any
				for _, m := range msgs {
					out = append(out, m.Data["id"])
				}
				return out
			}
			push := func(q string) {
				t.Helper()
				_, err := client.Queue(q).Push(map[string]any{"id": 1}, map[string]any{"id": 2}, map[string]any{"id": 3}).Execute(ctx)
				if err != nil {
					t.Fatal(err)
				}
			}

			// One ack per message: the third is refused.
			push("loop")
			msgs := pop("loop")
			if len(msgs) != 3 {
				t.Fatalf("popped %d, want 3", len(msgs))
			}
			if _, err := client.Ack(ctx, msgs[0], true, opts); err != nil {
				t.Fatalf("ack 1: %v", err)
			}
			if _, err := client.Ack(ctx, msgs[1], false, opts); err != nil {
				t.Fatalf("ack 2 (failed): %v", err)
			}
			res, err := client.Ack(ctx, msgs[2], true, opts)
			var ackErr *queen.AckError
			if !errors.As(err, &ackErr) || res.Success {
				t.Fatalf("ack 3 after a failed ack of its partition = %+v, %v; want a refusal", res, err)
			}

			// One batch: every item accepted, 2 and 3 back in order.
			push("batch")
			msgs = pop("batch")
			results, err := client.SettleBatch(ctx, []queen.Settlement{
				{Message: msgs[0], Status: queen.StatusCompleted},
				{Message: msgs[1], Status: queen.StatusFailed, Error: "empty order"},
				{Message: msgs[2], Status: queen.StatusRetry},
			}, opts)
			if err != nil || len(results) != 3 {
				t.Fatalf("SettleBatch = %+v, %v", results, err)
			}
			if again := ids(pop("batch")); !slices.Equal(again, []any{2.0, 3.0}) {
				t.Fatalf("after the batch, popped %v; want orders 2 and 3", again)
			}
		})
	}
}

// A consume loop has two contexts: the handlers' ctx carries the values of
// the ctx given to Consume, and the loop stops when either ctx ends (here
// Execute's, after two orders). The stop reaches neither the handler that
// is running (it gets the grace period) nor the ack of its order.
func ExampleQueueBuilder_Consume() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	if _, err := client.Queue("orders").Push(map[string]any{"id": 1}, map[string]any{"id": 2}).Execute(context.Background()); err != nil {
		log.Fatal(err)
	}

	type tenantKey struct{}
	handlerCtx := context.WithValue(context.Background(), tenantKey{}, "acme") // its values reach the handlers
	loopCtx, stop := context.WithCancel(context.Background())                  // the loop's requests; ending it stops the loop
	defer stop()

	handled := 0
	err = client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
		Consume(handlerCtx, func(ctx context.Context, msg *queen.Message) error {
			fmt.Println("order", msg.Data["id"], "for", ctx.Value(tenantKey{}))
			if handled++; handled == 2 {
				stop()
				fmt.Println("handler's ctx after the stop:", ctx.Err())
			}
			return nil
		}).
		Execute(loopCtx)
	fmt.Println("Execute:", err, "leased:", srv.LeasedCount("orders", "billing"))
	// Output:
	// order 1 for acme
	// order 2 for acme
	// handler's ctx after the stop: <nil>
	// Execute: <nil> leased: 0
}

// exampleNames returns the names of the Example functions of the _test.go
// files in dir.
func exampleNames(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				out = append(out, fn.Name.Name)
			}
		}
	}
	return out
}

// go doc lists no runnable example, so the package documentation names
// them: every Example of the package is named in doc.go, and every
// Example doc.go names exists.
func TestPackageDocNamesEveryExample(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	have := exampleNames(t, ".")
	if len(have) < 10 {
		t.Fatalf("found %d examples; the reader is broken", len(have))
	}
	for _, name := range have {
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(doc) {
			t.Errorf("doc.go does not name %s", name)
		}
	}
	for _, name := range regexp.MustCompile(`\bExample(_[A-Za-z]\w*|[A-Z]\w*)`).FindAllString(doc, -1) {
		if !slices.Contains(have, name) {
			t.Errorf("doc.go names %s, which is no Example of the package", name)
		}
	}
}

// Pop's doc: a wildcard pop of a queue that does not exist creates it on a
// 2.x broker (with the default configuration); a pinned pop, and every pop
// on 0.15.1, creates nothing.
func TestPopOfUnknownQueueCreatesIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     []queentest.Option
		created bool
	}{{"2.x", nil, true}, {"0.15.1", []queentest.Option{queentest.Broker015()}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := queentest.Start(t, tc.opt...)
			client, err := queen.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close(context.Background()) })
			ctx := t.Context()
			exists := func(q string) bool {
				t.Helper()
				_, err := client.Admin().GetQueue(ctx, q)
				if err != nil && !errors.Is(err, queen.ErrQueueNotFound) {
					t.Fatalf("GetQueue(%s): %v", q, err)
				}
				return err == nil
			}

			if msgs, err := client.Queue("pinned-typo").Partition("p").Wait(false).Pop(ctx); err != nil || len(msgs) != 0 {
				t.Fatalf("pinned pop = %d messages, %v", len(msgs), err)
			}
			if exists("pinned-typo") {
				t.Error("a pinned pop created its queue")
			}
			if msgs, err := client.Queue("ordres").Wait(false).Pop(ctx); err != nil || len(msgs) != 0 {
				t.Fatalf("pop = %d messages, %v", len(msgs), err)
			}
			if got := exists("ordres"); got != tc.created {
				t.Errorf("after a pop of an unknown queue, the queue exists: %v; want %v", got, tc.created)
			}
		})
	}
}
