// Command queen is a small command-line client of a Queen broker for shell
// scripts and operators, built on the queen Go client.
//
//	queen [--url URL] [--token TOKEN] [--json] COMMAND [flags] [args]
//
// Commands:
//
//	seek GROUP QUEUE (--to-end | --time RFC3339) [--partition P]
//	groups [GROUP]                      list groups, or one group's partitions
//	groups delete GROUP [--queue Q] [--keep-metadata]
//	push QUEUE [--partition P] [--txid ID] [JSON...]   (no JSON: one per line of stdin)
//	pop QUEUE [--group G] [--partition P] [--batch N] [--wait] [--timeout-ms N]
//	          [--subscription-mode new|all] [--ack]
//	fetch QUEUE PARTITION... [--offset N] [--max-bytes N] [--all]
//	dlq [list] QUEUE [--group G] [--partition P] [--from T] [--to T] [--limit N] [--offset N]
//	dlq replay ID...
//	health
//
// The broker URL comes from --url or QUEEN_URL (default
// http://localhost:6632), the bearer token from --token or QUEEN_TOKEN.
// Flags may come before or after the command's arguments. --json prints
// JSON instead of text (time lags in seconds, times in RFC 3339). The exit
// status is 0 on success, 1 when the broker or the network failed (with
// the broker's message on stderr), and 2 for a usage error.
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
