package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// ExampleQueueBuilder_Fetch reads a partition by offset from an in-memory
// broker: no consumer group, no lease, no ack.
func ExampleQueueBuilder_Fetch() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer client.Close(ctx)
	_, err = client.Queue("orders").Partition("customer-42").
		Push(map[string]int{"total": 10}, map[string]int{"total": 25}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}

	read, err := client.Queue("orders").Fetch(ctx, []string{"customer-42"}) // no group, lease or ack
	if err != nil {
		log.Fatal(err)
	}
	for _, record := range read["customer-42"].Records {
		fmt.Println(record.Offset, string(record.Payload))
	}
	fmt.Println("next:", read["customer-42"].NextOffset(), "high watermark:", read["customer-42"].HighWatermark)
	// Output:
	// 0 {"total":10}
	// 1 {"total":25}
	// next: 2 high watermark: 2
}

// ExampleQueueBuilder_ReadPartition audits a whole partition, page by page.
func ExampleQueueBuilder_ReadPartition() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer client.Close(ctx)
	if _, err := client.Queue("ledger").Partition("acct-7").Push(100, -30, 5).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	for rec, err := range client.Queue("ledger").ReadPartition(ctx, "acct-7", 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d: %s\n", rec.Offset, rec.Payload)
	}
	// Output:
	// 0: 100
	// 1: -30
	// 2: 5
}

// ExampleAdmin_SeekConsumerGroup rewinds a consumer group to a point in
// time, so that it reads those messages again, on an in-memory broker.
func ExampleAdmin_SeekConsumerGroup() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer client.Close(ctx)
	if _, err := client.Queue("events").Push("a", "b").Execute(ctx); err != nil {
		log.Fatal(err)
	}
	read := func() []string {
		msgs, err := client.Queue("events").Group("archiver").
			SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
		if err != nil {
			log.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			s, _ := queen.Decode[string](m)
			out = append(out, s)
		}
		if len(msgs) > 0 { // acking the last message completes the batch
			if _, err := client.Ack(ctx, msgs[len(msgs)-1], true, queen.AckOptions{ConsumerGroup: "archiver"}); err != nil {
				log.Fatal(err)
			}
		}
		return out
	}
	fmt.Println("first read:", read())
	fmt.Println("second read:", read())

	res, err := client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: "2000-01-01T00:00:00Z"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("partitions moved:", res.PartitionsUpdated)
	fmt.Println("after the seek:", read())
	// Output:
	// first read: [a b]
	// second read: []
	// partitions moved: 1
	// after the seek: [a b]
}

// ExampleClient_Transaction settles a message and pushes its follow-up in
// one step: both happen, or neither does.
func ExampleClient_Transaction() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer client.Close(ctx)
	if _, err := client.Queue("orders").Push(map[string]any{"id": "o-1", "total": 40}).Execute(ctx); err != nil {
		log.Fatal(err)
	}
	msgs, err := client.Queue("orders").Group("billing").
		SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		log.Fatal(err)
	}
	order := msgs[0]

	res, err := client.Transaction().
		Ack(order, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "billing"}).
		Queue("invoices").Partition("customer-42").Push(map[string]any{"order": order.Data["id"]}).
		Commit(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed:", res.Committed, "operations:", len(res.Results))

	// Acking the same lease again is refused, and the whole transaction
	// with it: nothing is pushed.
	_, err = client.Transaction().
		Ack(order, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "billing"}).
		Queue("invoices").Partition("customer-42").Push(map[string]any{"order": "again"}).
		Commit(ctx)
	var rolledBack *queen.TransactionError
	fmt.Println("rolled back:", errors.As(err, &rolledBack))
	read, _ := client.Queue("invoices").Fetch(ctx, []string{"customer-42"})
	fmt.Println("invoices:", len(read["customer-42"].Records))
	// Output:
	// committed: true operations: 2
	// rolled back: true
	// invoices: 1
}

// ExampleTransactionBuilder_Ack dead-letters a message that can never be
// handled, as the consume loop of the documentation does (Ack takes no dlq
// status; a transaction carries it). It needs a live broker.
func ExampleTransactionBuilder_Ack() {
	client, err := queen.New("http://localhost:6632")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	msgs, err := client.Queue("emails").Group("mailer").Wait(false).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, msg := range msgs {
		opts := queen.AckOptions{ConsumerGroup: "mailer"}
		if _, err := client.Transaction().Ack(msg, "dlq", opts).Commit(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// ExampleAdmin_ListDLQ lists yesterday's dead letters of a queue and
// replays them. It needs a live broker.
func ExampleAdmin_ListDLQ() {
	client, err := queen.New("http://localhost:6632")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	page, err := client.Admin().ListDLQ(ctx, "emails", queen.DLQListOptions{
		ConsumerGroup: "mailer",
		From:          time.Now().Add(-24 * time.Hour),
		Limit:         50,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d dead letters\n", len(page.Messages), page.Total)
	for _, dl := range page.Messages {
		fmt.Println(dl.FailedAt, dl.Error, string(dl.Payload))
		if _, err := client.Admin().ReplayDLQ(ctx, dl); err != nil {
			log.Fatal(err)
		}
	}
}

// ExampleAdmin_Health tells a 2.x broker from an older one.
func ExampleAdmin_Health() {
	client, err := queen.New("http://localhost:6632")
	if err != nil {
		log.Fatal(err)
	}
	h, err := client.Admin().Health(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Healthy, h.Engine == "raft", h.Version)
}
