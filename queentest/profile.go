package queentest

import (
	"fmt"
	"strings"

	"github.com/queen-go/queen/internal/wire"
)

// Profile names the broker generation a Server imitates: its routes, its
// answers (status codes and bodies) and its semantics.
type Profile string

const (
	// Profile2x is the Queen 2.x broker (Rust, replicated log): the default.
	Profile2x Profile = "2.x"
	// Profile015 is the Queen 0.15.1 broker (C++ over PostgreSQL), as its
	// routes (server/src/routes) and stored procedures
	// (lib/schema/procedures) at upstream commit ab232125 define it, and as
	// PROTOCOL.md §11, §13, §15 and §16 record it. See Broker015.
	Profile015 Profile = "0.15.1"
)

// generation is what the profile's broker does on the wire.
func (p Profile) generation() wire.Generation {
	if p == Profile015 {
		return wire.Gen015()
	}
	return wire.Gen2x()
}

// Profiles lists the profiles a Server can take, default first.
func Profiles() []Profile { return []Profile{Profile2x, Profile015} }

// ParseProfile reads a profile name as cmd/queentest's -profile flag takes
// it: "2.x" (also "2", "default" or "") or "0.15.1" (also "0.15").
func ParseProfile(s string) (Profile, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "2", "2.x", "default":
		return Profile2x, nil
	case "0.15", "0.15.1":
		return Profile015, nil
	}
	return "", fmt.Errorf("queentest: unknown broker profile %q (want %q or %q)", s, Profile2x, Profile015)
}

// WithProfile makes the Server imitate the broker generation p. An unknown
// profile is the default, Profile2x.
func WithProfile(p Profile) Option {
	return func(o *options) {
		if p == Profile015 {
			o.profile = Profile015
			return
		}
		o.profile = Profile2x
	}
}

// Broker015 makes the Server imitate a Queen 0.15.1 broker instead of a 2.x
// one (it is WithProfile(Profile015)):
//
//   - Every route that reaches the database answers HTTP 200 whatever the
//     outcome (the real broker writes its headers before its status): empty
//     pops are {"error":"no_available_partition","messages":[],"success":false}
//     (partition_not_found or lease_held on the pinned route), refused acks
//     are per-item success:false, broker errors are {"success":false,"error"}.
//     Real 400s {"error"} only for input refused before the database, 201 []
//     for a push of no items, 404 with an HTML body for an unknown route.
//
//   - Pops: default batch 1; autopilot, conflation and leaseSeconds are
//     ignored (the route always passes lease_seconds 0), partitions is
//     honoured on the wildcard route; no deliveryAttempt or offset on
//     messages; partitionId is a UUID; a long poll that times out answers
//     success:true, messages:[], leaseId:null. GET /api/v1/pop (discovery)
//     and POST /api/v1/fetch do not exist (404).
//
//   - Subscriptions follow pop_unified_batch_v4: a group's cursor on a
//     partition is NULL until it consumes something there; a NULL cursor
//     starts at the group's subscription row (consumer_groups_metadata,
//     written by a pop with subscriptionMode=new, subscriptionFrom=now or a
//     timestamp; a group registered with `all`, or with no mode, the
//     default, has none) or else at the start. A pop with
//     subscriptionMode=new on a NULL cursor with no subscription row writes
//     one dated now, finds nothing newer, and moves the cursor to the
//     partition's last message: success:true, messages:[], a leaseId,
//     partitionsClaimed:1 (PROTOCOL.md §16).
//
//   - Acks follow ack_messages_v2: a per-partition-consumer retry budget
//     (batch_retry_count, retryLimit default 3); failed and dlq share one
//     branch that always dead-letters once the budget is spent (dlq at
//     once), and a dead-lettering ack keeps the lease (leaseReleased:false)
//     until the whole leased batch is acked; a failed that does not
//     dead-letter and a retry release it; the lease is checked against the
//     state before the request, so a single ack after a release is refused
//     "Invalid or expired lease". retryDelay is not applied (0.15.1 stores
//     it and never reads it).
//
//   - windowBuffer holds a partition until its newest message is that many
//     seconds old (a delete does not end the hold): the wildcard route
//     passes it by, the pinned route answers success:true, messages:[],
//     leaseId "", windowBufferActive:true (before it reads the group, the
//     batch or a lease), which a waiting pop does not send. Not modelled:
//     the real wildcard route skips partitions not written since two
//     minutes before the group's last empty scan of the queue
//     (consumer_watermarks), so a hold longer than that can hide a
//     partition from it until the next push there (a queue with
//     windowBuffer 200 did so; the pinned route still took the message).
//
//   - Seek, configure (replace semantics; no recognised option errors yet
//     creates the queue), transactions (execute_transaction_v2), lease
//     renewal (an array answer), push (partition_id and trace_id, no
//     offset; a non-UUID traceId, or a name longer than the 255-character
//     columns, makes the whole push answer "buffered" and store nothing)
//     and /health (version "1.0.0", a database field, no engine) are the
//     0.15.1 ones.
//
//   - Path parameters are taken raw, as uWebSockets hands them to the
//     routes: a name that needs percent-escaping in a path never matches
//     the stored name.
//
//   - A waiting pop that found nothing looks again on libqueen's schedule
//     (100 ms after each of its first three empty looks, then 100 ms × n
//     × 2, at most 1 s), and at once when a push stores messages in its
//     queue; an ack, a nack or an expired lease wakes no parked pop (the
//     2.x profile wakes them on every change).
//
//   - The admin views are the 0.15.1 ones (PROTOCOL.md §17 for the DLQ):
//     the queue list ({"queues":[...]}, newest first, counts total, pending
//     without the processing ones, processing; no options) and detail
//     (partitions with stats; no options; an unknown queue is 200
//     {"error":"Queue not found"}); the consumer-group list (no
//     partitionCursors, conflation, storage or kind; totalLag null;
//     maxTimeLag the age of the newest unread message) and detail (no
//     conflation; an empty answer, no body, for a group with no partition
//     claimed, and for an empty group list); the DLQ list
//     (no total; entries carry the message's id; the limit never cuts the
//     list, an offset of 1 or more or a limit of 0 answers
//     {"success":true,"value":null}; partition, from and to are ignored;
//     letters of one failure time, such as those of one batch ack, in the
//     order the real broker's plan gave: their messages' rows, which a push
//     stores by partition id, then transaction id, not in item order).
//     The message view GET /api/v1/messages/{partitionId}/{transactionId}
//     is the 0.15.1 one (status, queueConfig, mode, consumerGroups; an
//     unknown message is 200 {"error":"Message not found"}). DELETE of
//     that route deletes the message from its partition, and its
//     dead-letter rows with it (delete_message_v1; success false with
//     "Message not found" when there is none). The message list, which the
//     real broker has, is not served (404, HTML). The 2.x profile has no
//     message view (its 404), and its DELETE deletes only dead letters.
//     There is no DLQ replay or purge route (404, HTML). The real broker
//     reads the queue counters from a statistics table it refreshes in the
//     background; the profile computes them at once.
func Broker015() Option { return WithProfile(Profile015) }

// Profile reports the broker generation the Server imitates.
func (s *Server) Profile() Profile { return s.profile }
