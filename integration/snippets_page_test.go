package integration

// The Go snippets of the documentation page "Pop and consume messages with
// consumer groups" (https://queenmq.com/writing-applications/pop/), each
// pasted unchanged into a function that gives it the variables it uses.
// Inside these functions fmt and log are stand-ins (a recorder and fatal):
// the snippets' prints are kept for the tests to compare with what the page
// says they print, and log.Fatal fails the test instead of the process.
// snippets_test.go runs them on the data the page implies. The snippets that
// run a consume loop are in snippets_page_consume_test.go.

import (
	"context"

	"github.com/queen-go/queen"
)

// snippetSeek is the seek snippet ("Where a new group starts"): to a time,
// then to the end.
func snippetSeek(ctx context.Context, client *queen.Client, log fatal) {
	var err error
	_, err = client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00Z"})
	if err != nil {
		log.Fatal(err)
	}
	// the archiver group now reads again everything pushed since that time

	_, err = client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{ToEnd: true})
	if err != nil {
		log.Fatal(err)
	}
	// and now it skips everything it has not read yet
}

// snippetConflation is the conflation snippet ("Only the newest message").
func snippetConflation(ctx context.Context, client *queen.Client, fmt *recorder, log fatal) {
	newest, err := client.Queue("prices").
		Group("repricer").
		SubscriptionMode(queen.SubscriptionModeAll).
		Conflation(true). // only the newest message of each partition
		Wait(false).
		Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	latest := newest[0]
	fmt.Println(latest.Data) // map[price:12 sku:A-1]: 10 and 11 are skipped
	_, err = client.Ack(ctx, latest, true, queen.AckOptions{ConsumerGroup: "repricer"})
	if err != nil {
		log.Fatal(err)
	}
}

// snippetCommitOnDelivery is the commitOnDelivery snippet; it returns what
// the snippet popped.
func snippetCommitOnDelivery(ctx context.Context, client *queen.Client, log fatal) []*queen.Message {
	readings, err := client.Queue("metrics").
		Group("live-chart").
		SubscriptionMode(queen.SubscriptionModeAll).
		CommitOnDelivery(true). // the cursor moves as they are handed out: no ack
		Batch(100).
		Wait(false).
		Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return readings
}

// snippetFetch is the fetch snippet: one partition read by offset.
func snippetFetch(ctx context.Context, client *queen.Client, fmt *recorder, log fatal) {
	read, err := client.Queue("orders").Fetch(ctx, []string{"customer-42"}) // no group, lease or ack
	if err != nil {
		log.Fatal(err)
	}
	for _, record := range read["customer-42"].Records {
		fmt.Println(record.Offset, string(record.Payload))
	}
}
