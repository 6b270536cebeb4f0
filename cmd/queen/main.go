// Command queen is a small command-line client of a Queen broker for shell
// scripts and operators, built on the queen Go client.
//
//	queen [--url URL] [--token TOKEN] [--json] COMMAND [flags] [args]
//
// Commands:
//
//	seek GROUP QUEUE (--to-end | --time T) [--partition P] [--create]
//	groups [GROUP]                      list groups, or one group's partitions
//	groups delete GROUP [--queue Q] [--keep-metadata]
//	queues [QUEUE]                      list queues, or one queue's partitions
//	queues create QUEUE [OPTIONS]       create a queue, or set options of one
//	queues configure QUEUE OPTIONS [--replace]
//	queues delete QUEUE                 delete a queue with its messages
//	push QUEUE [--partition P] [--txid ID] [JSON...]   (no JSON: one per line of stdin)
//	pop QUEUE [--group G] [--partition P] [--batch N] [--wait] [--timeout-ms N]
//	          [--subscription-mode new|all] [--ack]
//	fetch QUEUE PARTITION... [--offset N] [--max-bytes N] [--all]
//	dlq [list] QUEUE [--group G] [--partition P] [--from T] [--to T] [--limit N] [--offset N] [--all]
//	dlq replay ID...                    ID: a row id (2.x) or PARTITION_ID/TRANSACTION_ID
//	dlq replay QUEUE --all [--group G] [--partition P] [--from T] [--to T]
//	dlq delete PARTITION_ID/TRANSACTION_ID...
//	dlq purge QUEUE [--group G]
//	lag QUEUE [--group G] [--wait [--interval D] [--timeout D]]
//	health
//
// The broker URL comes from --url or QUEEN_URL; with neither, the command
// says on stderr that it talks to http://localhost:6632. For the brokers of
// a cluster, repeat --url or give a comma list (in --url or QUEEN_URL): the
// client spreads its calls over them. The bearer token
// comes from --token or QUEEN_TOKEN. Flags may come before or after the
// command's arguments.
//
// # Seek
//
// seek --time takes an RFC 3339 time (2026-10-22T00:00:00Z) or a duration
// that means that long ago (1h, 30m, 90s, 1h30m). Before moving anything,
// seek looks the group up in the list of groups (the library's check,
// queen.SeekConsumerGroupOptions.CreateIfMissing) and refuses a group that
// has no position on QUEUE, since a seek would create it: a mistyped group
// name changes nothing. --create seeks all the same, for a group that is to
// start at that position. (A 0.15.1 broker records a group only once one of
// its pops claimed a partition, and moves only positions that exist.)
//
// # Queues
//
// The OPTIONS of queues create and configure set the queue's options, each
// flag one option: --lease-time D, --retry-limit N, --retry-delay D,
// --priority N, --delayed-processing D, --window-buffer D, --max-size N,
// --ttl D, --retention D, --completed-retention D, --max-wait-time D,
// --dead-letter-queue, --dlq-after-max-retries, --retention-enabled and
// --encryption (booleans; =false turns one off), --namespace NS and --task
// T. D is a duration (30s, 5m). Options not given keep their value
// (configure --replace resets them to the broker's defaults; a 0.15.1
// broker always resets them). Both print the options the broker reports
// after the change.
//
// # Pop
//
// pop prints the messages it got, one per line (PARTITION, TRANSACTION_ID,
// PAYLOAD). What stdout cannot show goes to stderr, exit status 0: an empty
// answer ("no messages in QUEUE [for group G]"), and, without --ack, the
// messages left leased: how many, the lease, and until about when (the
// pop's time plus the queue's lease time, which a 0.15.1 broker does not
// report; the line then says so). Unacked, they are delivered again once
// the lease ends.
//
// # Dead letters
//
// dlq prints one row per dead letter, then "total N", or, when it printed
// fewer rows than there are, "total N; showing A-B; more with --offset C".
// --limit defaults to 100. With --all, dlq prints every dead letter from
// --offset on, reading page after page (--limit is the page size), and
// ends with "total N", N the rows printed (the queen.Admin.DeadLetters
// iterator: a list that changes meanwhile may show a row twice or miss
// one).
//
// A dead letter is named by its ID (2.x) or by its ADDRESS,
// PARTITION_ID/TRANSACTION_ID, on both generations. A 0.15.1 broker has no
// dead-letter ids: the table's first column is then the ADDRESS.
//
// dlq replay puts each letter's message back at the tail of its partition,
// where every consumer group of the queue reads it again (not only the
// group that dead-lettered it), and removes the letter where the broker can
// (queen.Admin.ReplayDLQ: on 0.15.1 the client pushes a copy under the
// transaction id "dlq:" + the original's, then deletes the original). It
// prints a line per letter: RESULT (moved; kept: the copy is stored, the
// letter stays listed; duplicate: the copy was already there, nothing was
// stored), the name given, QUEUE/PARTITION and the copy's offset (-1 when
// unknown). Replaying a letter twice stores one copy. dlq replay QUEUE --all
// replays every letter the filters select, oldest first, a message
// dead-lettered by several groups once (queen.Admin.ReplayDeadLetters); its
// lines name the original transaction id, and a last line counts them.
//
// dlq delete removes letters without replaying them ("deleted ADDRESS", or
// "gone ADDRESS" when there was none; on 0.15.1 it deletes the message,
// and refuses while a group has not read it). dlq purge removes every
// letter of QUEUE, or of --group's (2.x; on 0.15.1 exit 1, "not supported
// by this broker").
//
// # Lag
//
// lag prints the messages the group (--group; queue mode without it) has
// not settled on each partition of QUEUE, those it never read included,
// then "pending N", or "pending 0: drained" (queen.Admin.Lag). A 0.15.1
// broker counts a partition the group has no position on only in its
// statistics: the line says "(estimated: no position there)". With --wait
// it looks every --interval (1s) until the group has drained QUEUE, then
// prints the last look (queen.Admin.AwaitDrained); --timeout D gives up
// after D (exit 1). Without --wait, exit status 0 whatever the lag.
//
// # JSON output
//
// With --json every command prints one JSON value on stdout, with these
// field names, which stay as they are (fields in brackets are left out
// when the broker does not report them). Times are RFC 3339, time lags are
// in seconds, payloads are the JSON that was pushed.
//
//	push           [{index, status, transactionId, queue, offset, [messageId, partitionId, error]}]
//	               status: queued, duplicate or error; offset -1 when unknown
//	pop            [{queue, partition, partitionId, transactionId, payload,
//	                 [leaseId, consumerGroup, offset, deliveryAttempt, createdAt]}]
//	fetch          {PARTITION: {records, highWatermark, logStartOffset, [error]}}
//	               records: [{partition, offset, transactionId, payload, [timestamp]}]
//	groups         [{name, queue, partitionCursors, partitionsWithLag, totalLag, maxTimeLag,
//	                 state, conflation, [subscriptionMode, subscriptionTimestamp, subscriptionCreatedAt,
//	                 storage, kind]}]
//	               totalLag: -1 from a 0.15.1 broker, which does not count it
//	groups GROUP   {name, queues: {QUEUE: {conflation, partitions: [{partition, totalConsumed,
//	                 offsetLag, timeLag, leaseActive, [workerId, lastConsumedAt]}], [kind]}}}
//	groups delete  {consumerGroup, deletedPartitions, metadataDeleted, [queue, queues]}
//	seek           {consumerGroup, queue, toEnd, partitionsUpdated, [partition, timestamp]}
//	dlq            {messages, total, limit, offset}
//	               messages: [{id, queue, offset, transactionId, payload, retryCount,
//	                 [partition, partitionId, consumerGroup, messageId, error, failedAt,
//	                 messageCreatedAt, producerSub]}]
//	               id: "" from a 0.15.1 broker (messageId is then the message's id;
//	               partitionId/transactionId is the ADDRESS)
//	dlq --all      {messages, total}: messages as dlq's, every page; total: how many
//	               (written as the pages come: a page that fails cuts it off, exit 1)
//	dlq replay     [{moved, result, removed, offset, [queue, partition, transactionId, messageId,
//	                 originalTransactionId]}]
//	dlq replay --all
//	               {results, moved, kept, duplicate, removed, gone}: results as dlq replay's
//	dlq delete     [{address, removed}]
//	dlq purge      {queue, deleted}
//	lag            {queue, group, pending, partitions: [{partition, pending, [estimated]}]}
//	health         {healthy, status, httpStatus, [engine, version, database, server, workerId,
//	                 workerStatus, sharedState, raft]}
//	queues         [{name, partitions, messages, config, [id, namespace, task, retainedBytes, createdAt]}]
//	               messages: {total, pending, processing, completed, deadLetter, [failed]};
//	               config: the options reported, named as the broker names them, times in
//	               the units the broker uses ({} from a 0.15.1 broker, which sends none)
//	queues QUEUE   {name, partitions, messages, config, partitionList, [id, namespace, task,
//	                 retainedBytes, createdAt]}
//	               partitionList: [{name, messages, [id, createdAt, lastActivity, oldestMessage,
//	                 newestMessage]}]
//	queues create, queues configure
//	               {queue, config}
//	queues delete  {queue, deleted, existed}
//
// Errors go to stderr as text, with or without --json.
//
// # Exit status
//
//	0  success
//	1  the broker refused the request or could not be reached (its message
//	   on stderr), an unhealthy broker for health, seek of a group that
//	   has no position on the queue (without --create), or lag --wait
//	   ended by --timeout or a signal before the group drained
//	2  usage error: a bad command line, flag or value, or a name or option
//	   the client refuses; nothing was sent
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
