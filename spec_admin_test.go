package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The Go snippets of shared/spec/pop-and-consume.md that call Transaction,
// Admin().SeekConsumerGroup and Queue(q).Fetch, copied unchanged between
// the "spec:" markers, run against the in-memory broker.

var errPermanent = errors.New("permanent")

func TestSpecDeadLetterFromHandler(t *testing.T) {
	srv := queentest.Start(t)
	client, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(t.Context())
	ctx := t.Context()
	if _, err := client.Queue("emails").Push(map[string]string{"to": "nobody"}).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := client.Queue("emails").Group("mailer").SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v, %d", err, len(msgs))
	}
	sendEmail := func(map[string]any) error { return errPermanent }

	handler := func(ctx context.Context, msg *queen.Message) error {
		// spec: begin
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
		// spec: end
	}
	if err := handler(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	if n := srv.DLQCount("emails"); n != 1 {
		t.Fatalf("DLQCount = %d, want the message dead-lettered", n)
	}
	if again, _ := client.Queue("emails").Group("mailer").Wait(false).Pop(ctx); len(again) != 0 {
		t.Fatalf("dead-lettered message delivered again")
	}
}

func TestSpecSeekAndFetch(t *testing.T) {
	srv := queentest.Start(t, queentest.WithClock(queentest.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))))
	client, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(t.Context())
	ctx := t.Context()
	if _, err := client.Queue("events").Push(1, 2).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Queue("orders").Partition("customer-42").Push(map[string]int{"total": 1}).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	pop := func() int {
		msgs, err := client.Queue("events").Group("archiver").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			if _, err := client.Ack(ctx, msgs[len(msgs)-1], true, queen.AckOptions{ConsumerGroup: "archiver"}); err != nil {
				t.Fatal(err)
			}
		}
		return len(msgs)
	}
	if n := pop(); n != 2 {
		t.Fatalf("first read %d", n)
	}

	// spec: begin
	_, err = client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00Z"})
	if err != nil {
		log.Fatal(err)
	}
	// the archiver group now reads again everything pushed since that time
	// spec: end

	// The broker's clock says November: everything was pushed after that date.
	if n := pop(); n != 2 {
		t.Fatalf("after the seek to a time: %d messages, want 2", n)
	}
	if _, err := client.Queue("events").Push(3).Execute(ctx); err != nil {
		t.Fatal(err)
	}

	// spec: begin
	_, err = client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{ToEnd: true})
	if err != nil {
		log.Fatal(err)
	}
	// and now it skips everything it has not read yet
	// spec: end

	if n := pop(); n != 0 {
		t.Fatalf("after the seek to the end: %d messages, want 0", n)
	}

	// spec: begin
	read, err := client.Queue("orders").Fetch(ctx, []string{"customer-42"}) // no group, lease or ack
	if err != nil {
		log.Fatal(err)
	}
	for _, record := range read["customer-42"].Records {
		fmt.Println(record.Offset, string(record.Payload))
	}
	// spec: end

	if len(read["customer-42"].Records) != 1 {
		t.Fatalf("fetch = %+v", read["customer-42"])
	}
}
