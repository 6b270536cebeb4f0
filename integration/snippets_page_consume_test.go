package integration

// The Go snippets of the documentation page "Pop and consume messages with
// consumer groups" that run a consume loop, pasted unchanged like those of
// snippets_page_test.go (see there); snippets_consume_test.go runs them.

//lint:file-ignore S1021 each wrapper declares err so that its snippet, which assigns err, stays verbatim

import (
	"context"
	"errors"
	"os/signal"
	"syscall"

	"github.com/queen-go/queen"
)

// snippetQueueMode is the page's first Go snippet ("Queue mode and consumer
// groups"): one message in queue mode, printed and acked.
func snippetQueueMode(ctx context.Context, client *queen.Client, fmt *recorder, log fatal) {
	var err error
	err = client.Queue("orders").
		Each().   // the handler gets one message at a time
		Limit(1). // stop after one message; a worker leaves this out
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			fmt.Println(msg.Data) // acked when this returns nil, retried on an error
			return nil
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
}

// snippetBilling is the consumer-group snippet: the billing group, every
// option set by hand, the handler acking completed or failed.
func snippetBilling(ctx context.Context, client *queen.Client, log fatal) {
	var err error
	err = client.Queue("orders").
		Group("billing").                            // every group gets every message
		SubscriptionMode(queen.SubscriptionModeAll). // a new group starts at the tail unless told otherwise
		Batch(100).                                  // up to 100 messages per pop...
		Partitions(10).                              // ...from up to 10 partitions
		RenewLease(true, 2000).                      // heartbeat every 2 s while the handler runs
		AutoAck(false).                              // the handler decides the outcome
		Each().
		Limit(1).
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			ok := msg.Data["total"].(float64) > 0
			_, err := client.Ack(ctx, msg, ok, queen.AckOptions{ConsumerGroup: "billing"})
			return err
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
}

// snippetArchiveBatch is the ConsumeBatch snippet ("One message at a time,
// or a whole batch").
func snippetArchiveBatch(ctx context.Context, client *queen.Client, fmt *recorder, log fatal) {
	var err error
	err = client.Queue("events").
		Group("archiver").
		SubscriptionMode(queen.SubscriptionModeAll).
		Batch(100). // up to 100 messages per call
		Limit(1000).
		// ConsumeBatch, not Consume: the handler gets the whole batch
		ConsumeBatch(ctx, func(ctx context.Context, messages []*queen.Message) error {
			fmt.Println("archiving", len(messages))
			return nil // all acked if it returns nil, all nacked if it returns an error
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
}

// snippetMailer is the snippet that settles each message by hand: completed,
// dlq through a transaction, or failed with the error text.
func snippetMailer(ctx context.Context, client *queen.Client, sendEmail func(map[string]any) error, errPermanent error, log fatal) {
	var err error
	err = client.Queue("emails").
		Group("mailer").
		SubscriptionMode(queen.SubscriptionModeAll).
		AutoAck(false). // the client stops acking: the handler gives every answer
		Each().
		Limit(1).
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			opts := queen.AckOptions{ConsumerGroup: "mailer"}
			err := sendEmail(msg.Data)
			switch {
			case err == nil:
				_, err = client.Ack(ctx, msg, true, opts)
			case errors.Is(err, errPermanent): // trying again cannot help
				// Ack takes no dlq status: a transaction carries it, without the error text.
				_, err = client.Transaction().Ack(msg, "dlq", opts).Commit(ctx)
			default:
				opts.Error = err.Error()
				_, err = client.Ack(ctx, msg, false, opts) // failed: back after retryDelay
			}
			return err
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
}

// snippetWorker is the snippet of "Running a consumer for real": four
// handlers, lease renewal, an idle stop, and a stop on SIGTERM or on ctx.
func snippetWorker(ctx context.Context, client *queen.Client, runTask func(map[string]any) error, log fatal) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM) // a deploy stops it cleanly
	defer stop()

	err := client.Queue("tasks").
		Group("workers").
		SubscriptionMode(queen.SubscriptionModeAll).
		Concurrency(4).          // four handlers at once, on four partitions
		RenewLease(true, 10000). // long tasks keep their lease alive
		IdleMillis(60000).       // or stop after a minute with nothing to do
		Each().
		Consume(ctx, func(ctx context.Context, task *queen.Message) error {
			return runTask(task.Data)
		}).
		Execute(ctx) // returns once ctx is cancelled
	if err != nil {
		log.Fatal(err)
	}
}

// snippetAudit is the "Read it again" snippet: a new group reading from a
// point in time.
func snippetAudit(ctx context.Context, client *queen.Client, fmt *recorder, log fatal) {
	var err error
	err = client.Queue("orders").
		Group("audit").                           // a new group, with its own cursor
		SubscriptionFrom("2026-10-22T00:00:00Z"). // everything pushed from this time on
		Each().
		Limit(1).
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			fmt.Println("again:", msg.Data)
			return nil
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
}
