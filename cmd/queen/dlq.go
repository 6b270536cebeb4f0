package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/queen-go/queen"
)

// ---------------------------------------------------------------- dlq

// dlq is "dlq [list] QUEUE", "dlq replay ID...", "dlq replay QUEUE --all",
// "dlq delete ADDRESS..." and "dlq purge QUEUE".
func (c *cli) dlq(args []string) error {
	fs := c.flagSet("dlq")
	group := fs.String("group", "", "only messages dead-lettered by this group")
	partition := fs.String("partition", "", "only this partition")
	from := fs.String("from", "", "only failures at or after this RFC 3339 time")
	to := fs.String("to", "", "only failures before this RFC 3339 time")
	limit := fs.Int("limit", 0, "page size (default: the broker's)")
	offset := fs.Int("offset", 0, "skip this many messages")
	all := fs.Bool("all", false, "every dead letter, page after page (--limit: the page size)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	verb := "list"
	if len(pos) > 0 {
		switch pos[0] {
		case "list", "replay", "delete", "purge":
			verb, pos = pos[0], pos[1:]
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	listFlags := []string{"group", "partition", "from", "to", "limit", "offset", "all"}
	allowed := map[string][]string{
		"list":   listFlags,
		"replay": nil,
		"delete": nil,
		"purge":  {"group"},
	}[verb]
	if verb == "replay" && *all {
		allowed = listFlags
	}
	for _, name := range listFlags {
		if set[name] && !slices.Contains(allowed, name) {
			return usagef("dlq %s does not take --%s", verb, name)
		}
	}
	switch verb {
	case "replay":
		if !*all {
			return c.dlqReplay(pos)
		}
	case "delete":
		return c.dlqDelete(pos)
	case "purge":
		if len(pos) != 1 {
			return usagef("dlq purge takes QUEUE")
		}
		return c.dlqPurge(pos[0], *group)
	}
	if len(pos) != 1 {
		return usagef("dlq takes QUEUE; dlq replay ID... or QUEUE --all; dlq delete ADDRESS...; dlq purge QUEUE")
	}
	opts := queen.DLQListOptions{ConsumerGroup: *group, Partition: *partition, Limit: *limit, Offset: *offset}
	for _, t := range []struct {
		flag string
		in   string
		out  *time.Time
	}{{"--from", *from, &opts.From}, {"--to", *to, &opts.To}} {
		if t.in == "" {
			continue
		}
		v, err := agoTime(t.in, c.now())
		if err != nil {
			return usagef("dlq: %s %q is neither an RFC 3339 time (2026-10-22T00:00:00Z) nor a duration ago (1h, 30m, 90s)", t.flag, t.in)
		}
		*t.out = v
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	if verb == "replay" {
		return c.dlqReplayAll(cl, pos[0], opts)
	}
	if *all {
		return c.dlqAll(cl, pos[0], opts)
	}
	page, err := cl.Admin().ListDLQ(c.ctx, pos[0], opts)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(page)
	}
	if err := c.dlqTable(page.Messages); err != nil {
		return err
	}
	return c.dlqSummary(page)
}

// letterArg reads a dead letter named on the command line: a 2.x row id,
// or an ADDRESS, PARTITION_ID/TRANSACTION_ID (a transaction id may hold
// '/': the partition id never does).
func letterArg(arg string, needAddress bool) (queen.DeadLetter, error) {
	pid, txn, ok := strings.Cut(arg, "/")
	switch {
	case ok && pid != "" && txn != "":
		return queen.DeadLetter{PartitionID: pid, TransactionID: txn}, nil
	case ok || arg == "":
		return queen.DeadLetter{}, usagef("%q is no dead letter: an ID, or PARTITION_ID/TRANSACTION_ID", arg)
	case needAddress:
		return queen.DeadLetter{}, usagef("%q is no ADDRESS: a dead letter is deleted by PARTITION_ID/TRANSACTION_ID (the dlq table's ADDRESS; partitionId and transactionId in --json)", arg)
	}
	return queen.DeadLetter{ID: arg}, nil
}

// dlqAll prints every dead letter (Admin.DeadLetters): in JSON as
// {messages, total}, total the number of messages, written as the pages
// come; as text, the table and "total N". A page that fails ends it with
// its error, after the rows already had (the JSON value is then cut off).
func (c *cli) dlqAll(cl *queen.Client, queue string, opts queen.DLQListOptions) error {
	var rows []queen.DeadLetter
	n := 0
	for dl, err := range cl.Admin().DeadLetters(c.ctx, queue, opts) {
		if err != nil {
			if !c.json && len(rows) > 0 {
				_ = c.dlqTable(rows)
			}
			return err
		}
		if !c.json {
			rows = append(rows, dl)
			continue
		}
		b, err := json.MarshalIndent(dl, "    ", "  ")
		if err != nil {
			return err
		}
		sep := ",\n    "
		if n == 0 {
			sep = "{\n  \"messages\": [\n    "
		}
		if _, err := fmt.Fprintf(c.stdout, "%s%s", sep, b); err != nil {
			return err
		}
		n++
	}
	if c.json {
		open := "\n  ]"
		if n == 0 {
			open = "{\n  \"messages\": []"
		}
		_, err := fmt.Fprintf(c.stdout, "%s,\n  \"total\": %d\n}\n", open, n)
		return err
	}
	if err := c.dlqTable(rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "total %d\n", len(rows))
	return err
}

// dlqTable prints dead letters as a table. A 0.15.1 broker has no
// dead-letter ids: the first column is then the ADDRESS,
// PARTITION_ID/TRANSACTION_ID, by which dlq replay and dlq delete name a
// letter there.
func (c *cli) dlqTable(msgs []queen.DeadLetter) error {
	byAddress := len(msgs) > 0
	for _, m := range msgs {
		byAddress = byAddress && m.ID == ""
	}
	idHeader := "ID"
	if byAddress {
		idHeader = "ADDRESS"
	}
	tw := c.table(idHeader, "PARTITION", "GROUP", "FAILED_AT", "RETRIES", "ERROR", "PAYLOAD")
	for _, m := range msgs {
		failedAt := "-"
		if !m.FailedAt.IsZero() {
			failedAt = m.FailedAt.UTC().Format(time.RFC3339)
		}
		id := m.ID
		if byAddress && m.PartitionID != "" && m.TransactionID != "" {
			id = m.PartitionID + "/" + m.TransactionID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", orDash(id), orDash(m.Partition), orDash(m.ConsumerGroup), failedAt, m.RetryCount, m.Error, m.Payload)
	}
	return tw.Flush()
}

// dlqSummary ends the dlq table with the total and, when the page holds
// fewer rows than there are, which ones it shows and how to see the rest.
func (c *cli) dlqSummary(page queen.DLQPage) error {
	n := len(page.Messages)
	if page.Offset == 0 && n >= page.Total {
		_, err := fmt.Fprintf(c.stdout, "total %d\n", page.Total)
		return err
	}
	if n == 0 {
		_, err := fmt.Fprintf(c.stdout, "total %d; none shown from offset %d\n", page.Total, page.Offset)
		return err
	}
	msg := fmt.Sprintf("total %d; showing %d-%d", page.Total, page.Offset+1, page.Offset+n)
	if page.Offset+n < page.Total {
		msg += fmt.Sprintf("; more with --offset %d (and --limit)", page.Offset+n)
	}
	_, err := fmt.Fprintln(c.stdout, msg)
	return err
}

// orDash is s, or "-" when s is empty (a table cell must not be blank).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// dlqReplay replays the dead letters named, one line each: RESULT, the
// name given, QUEUE/PARTITION, the copy's offset (-1 when unknown).
func (c *cli) dlqReplay(args []string) error {
	if len(args) == 0 {
		return usagef("dlq replay takes ID... (or PARTITION_ID/TRANSACTION_ID...), or QUEUE --all")
	}
	letters := make([]queen.DeadLetter, len(args))
	for i, a := range args {
		dl, err := letterArg(a, false)
		if err != nil {
			return err
		}
		letters[i] = dl
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	var results []queen.ReplayResult
	for i, dl := range letters {
		r, err := cl.Admin().ReplayDLQ(c.ctx, dl)
		if err != nil {
			if c.json && len(results) > 0 {
				_ = c.printJSON(results)
			}
			return fmt.Errorf("replay %s: %w", args[i], err)
		}
		results = append(results, r)
		if !c.json {
			fmt.Fprintf(c.stdout, "%s\t%s\t%s/%s\t%d\n", r.Result, args[i], r.Queue, r.Partition, r.Offset)
		}
	}
	if c.json {
		return c.printJSON(results)
	}
	return nil
}

// dlqReplayAll replays every dead letter of queue that opts select
// (Admin.ReplayDeadLetters): a line per letter as dlq replay prints them
// (the original transaction id for the name), then the counts.
func (c *cli) dlqReplayAll(cl *queen.Client, queue string, opts queen.DLQListOptions) error {
	rep, err := cl.Admin().ReplayDeadLetters(c.ctx, queue, opts)
	if c.json {
		if err != nil && len(rep.Results) == 0 {
			return err
		}
		if perr := c.printJSON(rep); perr != nil && err == nil {
			err = perr
		}
		return err
	}
	for _, r := range rep.Results {
		fmt.Fprintf(c.stdout, "%s\t%s\t%s/%s\t%d\n", r.Result, r.OriginalTransactionID, r.Queue, r.Partition, r.Offset)
	}
	fmt.Fprintf(c.stdout, "moved %d, kept %d, duplicate %d, gone %d; %d letters removed\n", rep.Moved, rep.Kept, rep.Duplicate, rep.Gone, rep.Removed)
	return err
}

// dlqDelete removes the dead letters named by ADDRESS, one line each:
// "deleted ADDRESS", or "gone ADDRESS" when there was none.
func (c *cli) dlqDelete(args []string) error {
	if len(args) == 0 {
		return usagef("dlq delete takes PARTITION_ID/TRANSACTION_ID...")
	}
	letters := make([]queen.DeadLetter, len(args))
	for i, a := range args {
		dl, err := letterArg(a, true)
		if err != nil {
			return err
		}
		letters[i] = dl
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	type deleted struct {
		Address string `json:"address"`
		Removed bool   `json:"removed"`
	}
	var out []deleted
	for i, dl := range letters {
		removed, err := cl.Admin().DeleteDeadLetter(c.ctx, dl)
		if err != nil {
			if c.json && len(out) > 0 {
				_ = c.printJSON(out)
			}
			return fmt.Errorf("delete %s: %w", args[i], err)
		}
		out = append(out, deleted{args[i], removed})
		if !c.json {
			word := "deleted"
			if !removed {
				word = "gone"
			}
			fmt.Fprintf(c.stdout, "%s\t%s\n", word, args[i])
		}
	}
	if c.json {
		return c.printJSON(out)
	}
	return nil
}

// dlqPurge removes every dead letter of queue, or group's.
func (c *cli) dlqPurge(queue, group string) error {
	cl, err := c.connect()
	if err != nil {
		return err
	}
	n, err := cl.Admin().PurgeDLQ(c.ctx, queue, group)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]any{"queue": queue, "deleted": n})
	}
	_, err = fmt.Fprintf(c.stdout, "purged %d dead letters of %s\n", n, queue)
	return err
}
