// Package queentest is an in-memory Queen MQ broker for tests, served over
// real HTTP on a loopback port, like pstest for Pub/Sub or kfake for Kafka.
//
// It speaks the HTTP API of the Queen 2.x broker and follows that broker's
// semantics (not any client's convenience), so a client that works against
// it behaves the same against a real broker. The 2.x it follows is the
// newest upstream source that could be read, release 2.2.0 (queen-mq/queen:
// server/src/handlers/{data,raft}.rs, rsm/facade/real.rs and real/phase2,
// rsm/consume, rsm/planner, rsm/dedup.rs; the facts a client depends on are
// in the shared PROTOCOL.md §19):
//
//   - Queues are created by their first push (with DefaultQueueConfig, or
//     WithDefaultQueueConfig) or by POST /api/v1/configure, which stores
//     every option; leaseTime, retryLimit, deadLetterQueue,
//     delayedProcessing, windowBuffer and dedupWindowSeconds are honoured.
//     retryDelay is stored and not applied, as on the real brokers.
//   - Partitions are ordered logs with offsets. A push is deduplicated by
//     (queue, partition, transactionId): a repeat within the queue's
//     dedupWindowSeconds (default 3600) is answered `duplicate` with the
//     original ids; after it, or with a window of 0, it is stored again.
//   - Pops lease what they take: the wildcard route takes up to `partitions`
//     partitions (1..64) with `batch` (default 200) as the budget of the
//     whole pop, under one leaseId; the pinned route takes one partition;
//     GET /api/v1/pop?namespace=&task= discovers queues. Queue mode is one
//     shared cursor; each consumer group has its own cursor per partition,
//     starting where the subscription of the pop that registered the group
//     (its first wildcard or discovery pop) says: new, all, or
//     subscriptionFrom. A group's cursor on a partition gets its row (and
//     shows in the group views and lag figures) when something is first
//     delivered to the group there, or a seek places it; an ack on a
//     partition without one is refused as stale. A plain pinned pop
//     registers nothing and starts its partition by its own subscription,
//     which the group's registration replaces while the partition has no
//     row. A partition written less than the queue's windowBuffer ago is
//     not claimed. wait=true parks up to timeout (at most 60 s) and wakes
//     on a push. An empty pop is a bodiless 204. autopilot=true lets the
//     broker choose the batch and width the request left out;
//     commitOnDelivery=true (or autoAck=true) commits at delivery.
//   - Acks follow the 2.x outcomes: completed (with implicit ack of the
//     prefix), failed (one retry spent, claimable again at once, then
//     dead-lettered or dropped), retry (no retry spent) and dlq; a stale or
//     foreign lease id is refused per item, and dlq:true marks the items
//     this ack filed. A repeated completed ack is a no-op while the broker
//     recognises the message (its dedup row, or the group's last 65,536),
//     stale after. Leases expire on the Clock and are renewed per lease
//     id. deliveryAttempt is the claim's: a claim starting where the
//     cursor's previous claim started (after an expiry, a retry or a
//     failed first message) counts up, any other starts at 1.
//   - Conflation, transactions (a body the broker's parse refuses is a
//     400), seek, consumer-group admin, the dead-letter queue (list,
//     replay, purge, and DELETE of a message's dead letters), the message
//     view, fetch by offset and /health are there too.
//
// Start one per test with Start (or NewServer and Close), and point the
// client at its URL:
//
//	srv := queentest.Start(t, queentest.WithClock(queentest.NewFakeClock(time.Now())))
//	client := myClient(srv.URL)
//
// Tests move time with a FakeClock (lease expiry, dedup windows, delayed
// messages), and inject faults per route: FailNext answers the next
// requests with an error status (and a Retry-After only if asked) without
// applying them, FailNextWith with a Failure such as BrokerUnavailable
// (the broker's own 503, Retry-After: 1), AddLatency delays them,
// DropNextResponses applies them and then cuts the
// connection, RefuseConnections closes the port for a while, and Restart
// crashes the broker and starts it again, forgetting what the real broker
// keeps only in memory (on the 2.x profile, the start that a pinned pop of
// an unregistered group gave a partition). Every answer carries a Date
// header from the Clock, as the real brokers send theirs. Requests counts
// the calls a client made.
//
// StartCluster (NewCluster) serves one broker state on several nodes, as
// 0.15.1 brokers over one PostgreSQL do: each node is a *Server with its
// own URL, faults and counters, and Stop and Resume take one down and
// bring it back while the others serve, so that a client's spreading and
// failover can be tested against a node loss.
//
// Everything above is the default profile, Profile2x. NewServer(Broker015())
// (WithProfile(Profile015)) serves a Queen 0.15.1 broker instead: its
// routes, its HTTP 200 answers for every outcome, its empty-pop bodies, its
// subscription cursors (including the cursor jump of a
// subscriptionMode=new pop at a partition's start) and its ack, seek,
// configure and transaction semantics; Broker015 lists them.
//
// cmd/queentest runs the same broker as a standalone program
// (default address 127.0.0.1:6632, -profile 2.x or 0.15.1) for development
// in any language.
//
// The broker keeps everything in memory and forgets it on Close. It leaves
// out authentication, tenants, retention, encryption, streams, ephemeral
// queues, locks, the KV and timers APIs, and the kv, timers and positions
// riders of a transaction (a transaction carrying one rolls back with
// reason bad_request). Where the 2.x wire was looked up upstream rather
// than taken from the shared protocol notes, the source is named next to
// the code.
//
// Choices worth knowing, all on purpose:
//
//   - Like the 2.x planner, a wildcard pop of an unknown queue creates it with
//     the default configuration (so a parked consumer recreates a deleted
//     queue). A pinned or discovery pop creates nothing.
//   - A plain push does not store traceId (the 2.x broker parses and drops
//     it); a transaction push keeps a valid UUID one.
//   - A wildcard pop takes the partitions whose next message is the oldest
//     first, so no partition starves. The 2.x broker takes them in the
//     order they became claimable (its ready ring, walked from a rotating
//     shard): neither order is one a test should rely on.
//   - A push refused for good (planned larger than WithEntryMaxBytes) is
//     the only non-retryable refusal; the others the broker may answer
//     (a 409 on a replay among them) do not arise here.
package queentest
