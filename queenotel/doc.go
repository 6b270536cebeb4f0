// Package queenotel traces and measures a queen client with OpenTelemetry,
// named after the OpenTelemetry semantic conventions for messaging. It is
// a module of its own (github.com/queen-go/queen/queenotel), so that a
// program that does not import it never downloads OpenTelemetry.
//
// It is a set of hooks for queen.WithHooks:
//
//	hooks := queenotel.New() // the global TracerProvider and MeterProvider
//	client, err := queen.New(url, queen.WithHooks(hooks))
//
// # Spans
//
// Every span carries messaging.system "queen", messaging.operation.name
// (push, pop, process, ack), messaging.operation.type (send, receive,
// process, settle) and messaging.destination.name (the queue); those of a
// consumer group carry messaging.consumer.group.name. A span is named
// "<operation name> <queue>".
//
//   - "push <queue>" (producer): one per PushBuilder.Execute that reached
//     the wire, and one per batch a queen.Producer sent (a root span: a
//     batch serves many callers); messaging.message.id when it carried one
//     message, messaging.batch.message_count when more.
//   - "pop <queue>" (client): one per pop that delivered messages (an empty
//     pop, a long poll that timed out above all, records nothing), with
//     messaging.batch.message_count; failed pops are recorded with their
//     error.
//   - "process <queue>" (consumer): one per handler call of a consume
//     loop, started before the handler and ended after its outcome was
//     decided. It is the parent of the ctx the handler receives, so the
//     handler's own spans nest under it; its parent is the ctx given to
//     Execute. It carries messaging.message.id (one message) or
//     messaging.batch.message_count (a batch handler), the outcome
//     (queen.outcome: completed, failed, retry or dlq) and, when the handler
//     returned an error, status Error and error.type.
//   - "ack <queue>" (client): one per settlement (Client.Ack, Settle,
//     SettleBatch, and each ack request of a consume loop, which acks
//     outcomes as they complete: a request may hold messages of several
//     pops, a pop's messages may take several requests), with the count
//     of each status (queen.settle.completed, .failed, .retry, .dlq) and
//     of refused acks (queen.settle.refused).
//
// Durations come from the client's hooks, which report an operation when
// it ends: a span's start is its end minus the operation's duration.
//
// # Metrics
//
//   - messaging.client.sent.messages (counter): messages pushed, with
//     error.type on those the broker did not store.
//   - messaging.client.consumed.messages (counter): messages delivered by
//     pops.
//   - messaging.client.operation.duration (histogram, seconds): push, pop
//     (not empty ones) and ack operations, retries included.
//   - messaging.process.duration (histogram, seconds): handler calls.
//   - queen.client.leases.lost (counter): leases a renewal found lost.
//
// error.type is the HTTP status of a broker refusal ("503"), "timeout" or
// "canceled" for an ended context, "panic" for a handler that panicked,
// "push_failed" for messages a push answer did not store, "refused" for
// acks the broker refused, and "_OTHER" otherwise.
//
// # Linking the consumer to the producer
//
// A Queen message carries no trace context, only an optional trace id: a
// UUID given at push (Item.TraceID, PushBuilder.TraceID). An OpenTelemetry
// trace id is 16 bytes, the size of a UUID, so TraceID(ctx) writes the
// current trace id as one, for the producer to set. When a popped message
// carries a trace id, its process span gets a link to that trace (with
// the attribute queen.link = "message.traceId"). The link names the trace
// only: a message carries no span id, so the link cannot point at the
// producer's span, and its span id is zero (some backends show it as a
// link to the trace, others ignore it).
//
// Which brokers keep the trace id between push and pop:
//
//   - 2.x brokers keep it on pushes made in a transaction
//     (Client.Transaction().Queue(q).Push(...)) and drop it on plain pushes:
//     messages pushed with PushBuilder are never linked on 2.x.
//   - 0.15.1 brokers keep it on every push when it is a valid UUID.
//
// Nothing else links a process span to its producer: the process span's
// parent is the consume loop's ctx, not the producer's span.
//
// Transaction pushes are not reported as push spans (only by queen's
// RequestHook, which this package does not use).
package queenotel
