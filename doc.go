// Package queen is a client for the Queen MQ message broker, over its HTTP
// API.
//
// Queen keeps queues as partitioned, ordered logs. Producers push messages
// to a queue (and optionally to a named partition); consumers pop batches,
// which leases the partitions they came from, and ack every message with
// one of four outcomes. Consumer groups each read every message at their
// own pace; without a group ("queue mode") each message goes to one worker.
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
//	// Consume: a worker loop for the group "billing". The handler gets the
//	// messages in partition order; nil acks one completed, an error goes
//	// to OnError, whose outcome is acked.
//	err = client.Queue("orders").
//		Group("billing").
//		SubscriptionMode(queen.SubscriptionModeAll). // a new group starts at the tail otherwise
//		Limit(len(orders)).                          // stop after these (a worker runs until ctx ends)
//		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
//			if total, _ := msg.Data["total"].(float64); total < 0 {
//				return errBadOrder
//			}
//			fmt.Println("billed order", msg.Data["id"])
//			return nil
//		}).
//		OnError(func(ctx context.Context, msg *queen.Message, err error) queen.Outcome {
//			fmt.Println("order", msg.Data["id"], "dead-lettered:", err)
//			return queen.DLQ(err) // it will never succeed; queen.Fail(err) would try again
//		}).
//		Execute(ctx)
//	if err != nil {
//		log.Fatal(err)
//	}
//
// A new consumer group starts after what the queue already holds unless
// SubscriptionMode(queen.SubscriptionModeAll) says otherwise. The loop
// acks each pop in one request; without OnError an error acks the message
// failed, to come back after the queue's retryDelay, counted against its
// RetryLimit. Example_quickStart runs this against an in-memory broker.
//
// A pop can be settled by hand too: Pop leases a batch, and one
// SettleBatch settles it, the messages after a failure given back with
// StatusRetry to come again in order (a failed ack ends its partition's
// lease, so acks sent one by one are refused after it):
// Example_popAndSettle.
//
// Tests need no broker: package queentest serves the same HTTP API from
// memory, on a loopback port (see Example_testWithQueentest, and the
// Example of package queentest).
//
// # Connecting
//
// New takes the broker's base URL and options: WithURLs for more brokers of
// the same cluster, over which WithLoadBalancing spreads the calls (by
// default Affinity: a consumer group's pops and acks meet on one broker;
// a call that finds a broker down goes to another, and the failed one is
// tried again after a pause; Example: ExampleWithLoadBalancing),
// WithBearerToken, WithHTTPClient, WithLogger (without it, Warn and Error
// records go to slog.Default()), WithRequestTimeout and WithRetryPolicy.
// Network errors and the answers BrokerError.Temporary accepts (408, 429,
// most 5xx) are retried with capped exponential backoff and jitter,
// honouring Retry-After; other answers are final. Every call, a waiting pop
// included, has a bounded number of attempts (see RetryPolicy). A pop, a
// transaction commit and a dead-letter replay, which must not be applied
// twice, are sent again only when the broker surely did not get or serve
// them; otherwise the error matches ErrOutcomeUnknown. Close releases the
// connections once the calls in flight are done; the client runs no
// goroutine of its own.
//
// # Queues
//
// A queue is created by its first push, with the broker's defaults, or
// explicitly:
//
//	client.Queue("orders").Config(queen.QueueConfig{
//		LeaseTime:       queen.Ptr(30 * time.Second),
//		RetryLimit:      queen.Ptr(5),
//		DeadLetterQueue: queen.Ptr(true),
//	}).Create().Execute(ctx)
//
// QueueConfig fields left nil are not sent; durations travel in the
// broker's whole seconds or milliseconds, rounded up. Delete removes a queue with its
// messages and positions.
//
// # Pushing
//
// Push sends one message per argument. A payload is any value that encodes
// to JSON (maps, structs, numbers, strings, slices); json.RawMessage and
// []byte are sent as they are. Item gives one message its own transaction
// and trace ids.
//
// Every pushed message carries a transaction id: the one given, or one made
// by the client (a UUIDv7). The broker refuses a second message with the
// same id in the same partition and answers "duplicate", so a push that is
// retried, by the transport or by calling Execute again on the same
// builder, never stores a message twice. Trace ids must be UUIDs; others
// are refused before sending, since a 0.15.1 broker loses such a message.
// Execute returns one PushResult per message; when the broker stored only
// some of them, the error is a *PushError listing the others.
//
// Examples: ExampleQueueBuilder_Push, ExamplePushBuilder_TransactionID.
//
// A Producer batches pushes of one message each, as a web service makes
// them: Push returns at once with a PendingPush to wait on, and batches go
// out per queue and partition on a count, a size or a short delay, in
// order within a partition. Flush and Close send what is buffered and say
// which messages were not stored and which have an unknown outcome.
//
// Examples: ExampleQueueBuilder_Producer, ExampleClient_Producer.
//
// # Popping
//
// QueueBuilder collects the options of a pop: Group, SubscriptionMode and
// SubscriptionFrom (where a new group starts), Batch, Partitions (1 to 64
// partitions per pop, all under one lease), Wait and TimeoutMillis (long
// poll, at most 60 s; on by default for 30 s), Autopilot, Conflation,
// CommitOnDelivery and LeaseTime. Partition pins a pop to one partition;
// Client.Namespace and Client.Task pop across every queue tagged so.
//
// Options you set are sent as they are. Batch and Partitions left unset
// are chosen by the broker (autopilot=true travels instead); with both set
// no autopilot flag is sent, and Autopilot(false) sends a batch of 1 unless
// told otherwise. A named group always sends its subscription mode,
// because brokers disagree on the default.
//
// Bad combinations fail before any request: conflation needs a group and
// excludes commit on delivery. A conflating pop answered by a broker that
// does not conflate fails with ErrConflationUnsupported rather than hand
// out a whole backlog.
//
// A wildcard pop of a queue that does not exist creates that queue on a
// 2.x broker (see QueueBuilder.Pop): a mistyped name is not an error.
//
// Example: ExampleQueueBuilder_Pop.
//
// # Messages
//
// A Message carries what an ack needs (transaction id, partition id, lease
// id, consumer group) and what the broker reports about it: queue,
// partition, creation time, trace id, delivery attempt and offset (the last
// two are absent on 0.15.1). Data holds the payload when it is a JSON
// object, as the documented examples use it; Raw always holds the payload
// as pushed, whatever its JSON type, and Decode unmarshals it into any
// type:
//
//	order, err := queen.Decode[Order](msg)
//
// Example: ExampleDecode.
//
// # Acknowledging
//
// Client.Ack settles a message as completed (ok) or failed (one retry
// spent; the message comes back after the queue's retry delay). The
// broker counts retries per partition and consumer group across the leases
// that did not finish, not per message: the failed ack that finds the
// queue's RetryLimit spent dead-letters its message, perhaps at its first
// failure (see QueueConfig.RetryLimit; give a message back with
// StatusRetry for a failure that should not count). A consume loop counts
// each message's failures itself and keeps RetryLimit per message (see
// ConsumeBuilder.OnError). Client.Settle takes any of the four
// outcomes, StatusCompleted, StatusFailed, StatusRetry (give it back without
// spending a retry) and StatusDLQ (dead-letter it at once), with an error
// text. Client.SettleBatch settles many messages of one group in a single
// request and returns a result per message. Every ack carries the lease id
// of the pop that delivered the message; an ack the broker refuses (a lease
// that expired, say) is reported in its AckResult and as an *AckError.
// Settle a pop with one SettleBatch (see the quick start): a failed or
// retry ack ends its partition's lease, and the acks that follow under it
// are refused.
//
// Client.Renew extends leases while work goes on: one request per distinct
// lease id, which covers every partition of that pop. Success is read from
// the broker's answer, not from the HTTP status.
//
// Examples: ExampleClient_Settle, ExampleClient_SettleBatch.
//
// # Consuming
//
// QueueBuilder.Consume (one message per call) and ConsumeBatch (the whole
// pop per call) return a ConsumeBuilder whose Execute runs the worker
// loop until its context ends, Limit messages were handled, or IdleMillis
// passed with nothing to do:
//
//	err := client.Queue("tasks").Group("workers").
//		SubscriptionMode(queen.SubscriptionModeAll). // read the tasks pushed before it started
//		Concurrency(4).Each().
//		Consume(ctx, func(ctx context.Context, m *queen.Message) error {
//			return handle(m)
//		}).
//		Execute(ctx)
//
// A handler that returns nil has its message acked completed; an error (or
// a panic) acks it failed, and under Each the rest of that partition's
// messages in the pop are given back to follow it in order. The outcomes of
// one pop go out as one batch ack. With AutoAck(false) the handler acks
// itself, and a handler error is still nacked. A handler's Poison(err)
// dead-letters its message at once (a payload that does not decode, say).
// OnSuccess and OnError hand
// the decision to the caller, who returns an Outcome (Complete, Fail, Retry
// or DLQ). Concurrency(n) runs up to n handlers at once, never two on one
// partition; RenewLease renews the leases while handlers run, each time by
// about three intervals (so that a crashed worker's messages come back
// soon). On a stop, running handlers get a grace period, and the messages
// popped but not started are given back with a retry ack, which spends no
// retry. The loop's own failures (pops, acks, renewals, a lost lease) are
// logged and handed to ConsumeBuilder.OnLoopError as a *LoopError.
// CommitOnDelivery is refused by Consume: it is for Pop only.
//
// The loop has two contexts, and either one ending stops it: Consume's
// gives its values to the handlers' ctx, Execute's gives its values to the
// loop's own requests and to OnLoopError, and neither's cancellation
// reaches a running handler (it gets the grace period) or an ack.
//
// Examples: ExampleQueueBuilder_Consume (the two contexts),
// ExampleQueueBuilder_ConsumeBatch, ExampleConsumeBuilder_OnError (outcomes),
// ExamplePoison (a payload that does not decode),
// Example_gracefulShutdown (a stop on SIGTERM) and Example_testWithQueentest
// (a handler under test).
//
// # Transactions, admin and reads by offset
//
// Client.Transaction collects acks and pushes that the broker applies all
// or nothing at Commit; a rollback is returned as a *TransactionError.
// Client.Admin seeks consumer groups (to a time or to the end), lists and
// deletes groups, lists, configures and deletes queues, reports the
// broker's health and lists and replays dead letters (DeadLetters iterates
// over them all). QueueBuilder.Fetch
// reads partitions by offset with no group, lease or ack, and
// ReadPartition iterates one partition to its end.
//
// Examples: ExampleClient_Transaction, ExampleTransactionBuilder_Ack,
// ExampleAdmin_SeekConsumerGroup, ExampleAdmin_ListDLQ,
// ExampleAdmin_DeadLetters, ExampleAdmin_Health,
// ExampleQueueBuilder_Fetch, ExampleQueueBuilder_ReadPartition and
// Example_docReadPartition.
//
// # Errors
//
// Invalid input is refused before anything is sent, with a sentinel error
// (ErrEmptyQueue, ErrInvalidName, ErrPartitionsOutOfRange,
// ErrInvalidTraceID, ...) that also matches ErrInvalidArgument. Each
// operation checks the options it uses when it runs (a later call of a
// setter replaces an earlier one), and names that would not mean only
// themselves in a URL path are refused (see ErrInvalidName):
//
//	if errors.Is(err, queen.ErrInvalidArgument) {
//		return fmt.Errorf("a bug in the caller: %w", err) // retrying cannot help
//	}
//
// A refusal by the broker is a *BrokerError, found with errors.As through
// any wrapping, with the HTTP status, the broker's code and message and its
// Retry-After. A 0.15.1 broker answers most failures with HTTP 200 and an
// error in the body; the client reads the body and reports those as
// *BrokerError too (Status 200).
//
// An error matching ErrOutcomeUnknown says that the request may or may not
// have been applied (its answer was lost, or did not tell): check the
// broker's state before doing it again.
//
// Example: ExampleErrInvalidArgument.
//
// # Broker versions
//
// The client speaks the current (2.x) protocol and stays compatible with
// 0.15.1 brokers where that is cheap: their "no_available_partition",
// "partition_not_found" and "lease_held" answers and the null lease of a
// long poll that timed out are empty pops; array or object answers to acks
// and lease renewals are both read; snake_case push answers, including
// "buffered" (not stored), are understood. Features that old brokers lack
// (conflation, autopilot, offsets) degrade as described above.
package queen
