// Package queen is a client for the Queen MQ message broker, over its HTTP
// API.
//
// Queen keeps queues as partitioned, ordered logs. Producers push messages
// to a queue (optionally to a named partition); consumers pop batches,
// which leases their partitions, and ack every message with one of four
// outcomes. Each consumer group reads every message at its own pace;
// without a group ("queue mode") each message goes to one worker.
//
// # Quick start
//
//	client, err := queen.New("http://localhost:6632")
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer client.Close(ctx)
//
//	// Push: one message per argument, any JSON value.
//	orders := []any{
//		map[string]any{"id": 1, "total": 30},
//		map[string]any{"id": 2, "total": -5},
//		map[string]any{"id": 3, "total": 12},
//	}
//	if _, err := client.Queue("orders").Push(orders...).Execute(ctx); err != nil {
//		log.Fatal(err)
//	}
//
// A worker loop, four handlers at once, acking each message by what its
// handler returns:
//
//	err := client.Queue("tasks").Group("workers").
//		SubscriptionMode(queen.SubscriptionModeAll). // read the tasks pushed before it started
//		Concurrency(4).Each().
//		Consume(ctx, func(ctx context.Context, m *queen.Message) error {
//			return handle(m)
//		}).
//		Execute(ctx)
//
// The Examples carry the usage: Example_quickStart (push, then a Consume
// loop with a group and OnError), Example_popAndSettle (a pop settled by
// hand in one SettleBatch), ExampleQueueBuilder_Consume (the loop's two
// contexts), ExampleConsumeBuilder_OnError (outcomes), ExamplePoison,
// ExampleMessage_Attempt (a webhook's X-Attempt through the retries),
// Example_gracefulShutdown and Example_testWithQueentest (a handler under
// test, with no broker: package queentest serves the same API from
// memory).
//
// # The parts
//
//   - Client (New): the connection, with WithURLs (brokers of one cluster,
//     over which WithLoadBalancing spreads the calls; by default a consumer
//     group's pops and acks meet on one broker, and a broker found down is
//     left for a pause: ExampleWithLoadBalancing), WithBearerToken,
//     WithHTTPClient, WithLogger, WithRequestTimeout and WithRetryPolicy.
//     It runs no goroutine of its own; Close waits for the calls in flight.
//   - QueueBuilder (Client.Queue): a value, as are PushBuilder,
//     CreateBuilder, ConsumeBuilder and a transaction's TransactionPush:
//     every setter returns a changed copy and leaves its receiver
//     unchanged, so a kept builder may be shared by goroutines
//     (ExampleQueueBuilder_Partition) and a setter called as a statement
//     does nothing. Push (ExampleQueueBuilder_Push,
//     ExamplePushBuilder_TransactionID), Pop (ExampleQueueBuilder_Pop),
//     Consume and ConsumeBatch (ExampleQueueBuilder_ConsumeBatch),
//     Config/Create/Delete, and reads by offset: Fetch and ReadPartition
//     (ExampleQueueBuilder_Fetch, ExampleQueueBuilder_ReadPartition,
//     Example_docReadPartition).
//   - Producer: batched pushes of one message each, for services
//     (ExampleQueueBuilder_Producer, ExampleClient_Producer). It rides out
//     an outage until WithDeliveryTimeout (ExampleWithDeliveryTimeout); a
//     batch that fails for good fails only what is buffered behind it
//     (WithPauseOnFailure pauses: ExampleWithPauseOnFailure).
//   - Message, Decode (ExampleDecode), and the acks: Client.Ack, Settle,
//     SettleBatch, Renew (ExampleClient_Settle, ExampleClient_SettleBatch).
//     Settle a pop with one SettleBatch: a failed or retry ack ends its
//     partition's lease.
//   - TransactionBuilder (Client.Transaction): acks and pushes applied all
//     or nothing (ExampleClient_Transaction, ExampleTransactionBuilder_Ack).
//   - Admin (Client.Admin): seeks, consumer groups, queues, health, a
//     group's lag and the wait for it to drain, and dead letters
//     (ExampleAdmin_SeekConsumerGroup, ExampleAdmin_AwaitDrained,
//     ExampleAdmin_ListDLQ, ExampleAdmin_DeadLetters,
//     ExampleAdmin_ReplayDeadLetters, ExampleAdmin_Health).
//
// # Errors and retries
//
// Invalid input fails before any request with an error matching
// ErrInvalidArgument (ExampleErrInvalidArgument). A broker's refusal is a
// *BrokerError (errors.As) with its status, code and message. Network
// errors and temporary answers (BrokerError.Temporary) are retried a
// bounded number of times (RetryPolicy); a pop, a commit and a replay are
// sent again only when the broker surely did not apply them, else the
// error matches ErrOutcomeUnknown. A call that never reached the broker
// fails with an error matching ErrNotSent (ExampleErrNotSent). An error
// matches at most one of the two; a Producer's PendingPush gives its
// answer as data (ExampleProducerError).
//
// # Broker versions
//
// The client speaks the 2.x protocol and reads 0.15.1 answers too. What
// 0.15.1 lacks (conflation, autopilot, offsets, fetch, DLQ purge) fails
// with a typed error or degrades as each call's doc says.
//
// More: the README (usage and a compatibility table), docs/RETRIES.md
// (retries and dead letters), docs/ADMIN.md (admin calls on each broker
// generation) and docs/ARCHITECTURE.md (how the client is built).
package queen
