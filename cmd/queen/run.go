package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/queen-go/queen"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the broker refused, or the network failed
	exitUsage = 2 // bad command line; nothing was sent
)

const defaultURL = "http://localhost:6632"

const usageText = `usage: queen [--url URL] [--token TOKEN] [--json] COMMAND [flags] [args]

commands:
  seek GROUP QUEUE (--to-end | --time T) [--partition P] [--create]
                                        T: RFC 3339, or a duration ago (1h, 30m);
                                        --create: seek a group not yet on QUEUE
  groups [GROUP]                        list consumer groups, or one group's partitions
  groups delete GROUP [--queue Q] [--keep-metadata]
  queues [QUEUE]                        list queues, or one queue's partitions
  queues create QUEUE [OPTIONS]         create a queue (or set options of an existing one)
  queues configure QUEUE OPTIONS [--replace]
                                        set options; --replace resets the others
  queues delete QUEUE                   delete a queue with its messages
                                        OPTIONS: --lease-time D --retry-limit N --retry-delay D
                                        --priority N --delayed-processing D --window-buffer D
                                        --max-size N --ttl D --retention D --completed-retention D
                                        --max-wait-time D --dead-letter-queue[=false]
                                        --dlq-after-max-retries[=false] --retention-enabled[=false]
                                        --encryption[=false] --namespace NS --task T  (D: 30s, 5m)
  push QUEUE [--partition P] [--txid ID] [JSON...]   no JSON args: one value per stdin line
  pop QUEUE [--group G] [--partition P] [--batch N] [--wait] [--timeout-ms N]
            [--subscription-mode new|all] [--ack]
  fetch QUEUE PARTITION... [--offset N] [--max-bytes N] [--all]
  dlq [list] QUEUE [--group G] [--partition P] [--from T] [--to T] [--limit N] [--offset N] [--all]
                                        --all: every page (--limit: the page size)
  dlq replay ID...                      ID: the dlq table's ID or ADDRESS (PARTITION_ID/TRANSACTION_ID)
  dlq replay QUEUE --all [--group G] [--partition P] [--from T] [--to T]
                                        every dead letter, oldest first; a copy reaches every group
  dlq delete ADDRESS...                 remove dead letters without replaying them
  dlq purge QUEUE [--group G]           remove every dead letter (2.x)
  lag QUEUE [--group G] [--wait [--interval D] [--timeout D]]
                                        pending messages per partition; --wait: until drained
  health

The URL defaults to $QUEEN_URL, then ` + defaultURL + ` (said on stderr); the token to $QUEEN_TOKEN.
For a cluster, repeat --url or give a comma list (in --url or $QUEEN_URL).
--json prints JSON with stable field names (go doc github.com/queen-go/queen/cmd/queen).
Exit status: 0 ok, 1 broker refused or unreachable, 2 usage error (nothing sent).
`

// usageError is a bad command line.
type usageError string

// Error returns the message.
func (e usageError) Error() string { return string(e) }

func usagef(format string, args ...any) error { return usageError(fmt.Sprintf(format, args...)) }

// cli holds one run's settings and streams.
type cli struct {
	ctx    context.Context
	now    func() time.Time // the clock of relative --time values
	urls   []string         // --url, else $QUEEN_URL; empty: defaultURL (see connect)
	urlSet bool             // a --url was given: it replaced $QUEEN_URL
	token  string
	json   bool
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	client *queen.Client
}

// run executes one command line and returns the exit status. env reads the
// environment (os.Getenv in main).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	c := &cli{ctx: ctx, now: time.Now, urls: splitURLs(env("QUEEN_URL")), token: env("QUEEN_TOKEN"), stdin: stdin, stdout: stdout, stderr: stderr}
	fs := c.flagSet("queen")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		return c.fail("", usageError(err.Error()))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return c.fail("", usagef("no command"))
	}
	cmd, rest := rest[0], rest[1:]
	commands := map[string]func([]string) error{
		"seek": c.seek, "groups": c.groups, "queues": c.queues, "push": c.push, "pop": c.pop, "fetch": c.fetch, "dlq": c.dlq, "lag": c.lag, "health": c.health,
	}
	if cmd == "help" {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	f, ok := commands[cmd]
	if !ok {
		return c.fail("", usagef("unknown command %q", cmd))
	}
	err := f(rest)
	if c.client != nil {
		_ = c.client.Close(context.WithoutCancel(ctx))
	}
	return c.fail(cmd, err)
}

// fail reports err on stderr and returns the exit status for it.
func (c *cli) fail(cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	prefix := "queen"
	if cmd != "" {
		prefix += " " + cmd
	}
	msg := strings.TrimPrefix(err.Error(), "queen: ")
	fmt.Fprintf(c.stderr, "%s: %s\n", prefix, msg)
	var ue usageError
	isUsage := errors.As(err, &ue)
	if isUsage {
		fmt.Fprintln(c.stderr, "run 'queen help' for usage")
	}
	if isUsage || errors.Is(err, queen.ErrInvalidArgument) {
		return exitUsage
	}
	return exitFail
}

// flagSet returns a flag set with the global flags, which every command
// accepts too.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(urlFlag{c}, "url", "broker URL, repeated or a comma list for a cluster ($QUEEN_URL)")
	fs.StringVar(&c.token, "token", c.token, "bearer token ($QUEEN_TOKEN)")
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	return fs
}

// urlFlag is --url: each one, a URL or a comma list, adds brokers of one
// cluster; the first replaces $QUEEN_URL.
type urlFlag struct{ c *cli }

func (f urlFlag) String() string {
	if f.c == nil {
		return ""
	}
	return strings.Join(f.c.urls, ",")
}

func (f urlFlag) Set(v string) error {
	if !f.c.urlSet {
		f.c.urls, f.c.urlSet = nil, true
	}
	f.c.urls = append(f.c.urls, splitURLs(v)...)
	return nil
}

// splitURLs splits a comma list of URLs, dropping empty items.
func splitURLs(v string) []string {
	var out []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// parse parses flags and positional arguments in any order; everything
// after "--" is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError(err.Error())
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// connect makes the client once the command line is known to be good.
// With neither --url nor $QUEEN_URL it says on stderr which broker it
// talks to.
func (c *cli) connect() (*queen.Client, error) {
	if len(c.urls) == 0 {
		c.urls = []string{defaultURL}
		fmt.Fprintf(c.stderr, "queen: no --url or QUEEN_URL given; using %s\n", defaultURL)
	}
	opts := []queen.Option{queen.WithURLs(c.urls[1:]...)}
	if c.token != "" {
		opts = append(opts, queen.WithBearerToken(c.token))
	}
	cl, err := queen.New(c.urls[0], opts...)
	if err != nil {
		return nil, err
	}
	c.client = cl
	return cl, nil
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table starts a tab-aligned text table with a header.
func (c *cli) table(header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

// ---------------------------------------------------------------- seek

func (c *cli) seek(args []string) error {
	fs := c.flagSet("seek")
	toEnd := fs.Bool("to-end", false, "skip everything not read yet")
	ts := fs.String("time", "", "read again from this RFC 3339 time, or from this long ago (1h, 30m)")
	partition := fs.String("partition", "", "seek one partition only")
	create := fs.Bool("create", false, "seek even a group that has no position on the queue yet (creating it)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("seek takes GROUP QUEUE, got %d arguments", len(pos))
	}
	if *toEnd == (*ts != "") {
		return usagef("seek needs exactly one of --to-end and --time")
	}
	opts := queen.SeekConsumerGroupOptions{ToEnd: *toEnd}
	if *ts != "" {
		if opts.Timestamp, err = seekTime(*ts, c.now()); err != nil {
			return err
		}
	}
	group, queue := pos[0], pos[1]
	cl, err := c.connect()
	if err != nil {
		return err
	}
	opts.CreateIfMissing = *create
	var res queen.SeekResult
	if *partition != "" {
		res, err = cl.Admin().SeekPartition(c.ctx, group, queue, *partition, opts)
	} else {
		res, err = cl.Admin().SeekConsumerGroup(c.ctx, group, queue, opts)
	}
	if errors.Is(err, queen.ErrGroupNotFound) {
		return fmt.Errorf("group %q has no position on queue %q, so a seek would create it; check the names, or pass --create (%w)",
			group, queue, queen.ErrGroupNotFound)
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(res)
	}
	where := "to the end"
	if !res.ToEnd {
		where = "to " + res.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	target := res.Queue
	if res.Partition != "" {
		target += "/" + res.Partition
	}
	_, err = fmt.Fprintf(c.stdout, "%s on %s: %d partitions moved %s\n", res.ConsumerGroup, target, res.PartitionsUpdated, where)
	return err
}

// agoTime reads a time flag (dlq's --from and --to): an RFC 3339 time, or
// a duration that is not negative (1h, 30m, 90s) meaning that long before
// now, as seek's --time takes it.
func agoTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, err
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("negative duration %s", d)
	}
	return now.Add(-d), nil
}

// seekTime reads the value of seek's --time: an RFC 3339 time, or a
// duration (1h, 30m, 90s) meaning that long before now. It returns the
// time in RFC 3339, UTC.
func seekTime(v string, now time.Time) (string, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return "", usagef("seek: --time %q is neither an RFC 3339 time (2026-10-22T00:00:00Z) nor a duration ago (1h, 30m, 90s)", v)
	}
	if d < 0 {
		return "", usagef("seek: --time %q: a duration means that long ago and must not be negative", v)
	}
	return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
}

// ---------------------------------------------------------------- groups

func (c *cli) groups(args []string) error {
	fs := c.flagSet("groups")
	queue := fs.String("queue", "", "delete: only on this queue")
	keep := fs.Bool("keep-metadata", false, "delete: keep the group's registration")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	verb := "list"
	switch {
	case len(pos) > 0 && (pos[0] == "delete" || pos[0] == "show" || pos[0] == "list"):
		verb, pos = pos[0], pos[1:]
	case len(pos) == 1:
		verb = "show"
	}
	want := map[string]int{"list": 0, "show": 1, "delete": 1}[verb]
	if len(pos) != want {
		return usagef("groups %s takes %d arguments, got %d", verb, want, len(pos))
	}
	if verb != "delete" && (*queue != "" || *keep) {
		return usagef("--queue and --keep-metadata go with groups delete")
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	switch verb {
	case "delete":
		res, err := cl.Admin().DeleteConsumerGroup(c.ctx, pos[0], queen.DeleteConsumerGroupOptions{Queue: *queue, KeepMetadata: *keep})
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(res)
		}
		_, err = fmt.Fprintf(c.stdout, "deleted %s: %d partition positions\n", res.ConsumerGroup, res.DeletedPartitions)
		return err
	case "show":
		d, err := cl.Admin().GetConsumerGroup(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(groupDetailJSONOf(d))
		}
		tw := c.table("QUEUE", "PARTITION", "LAG", "TIME_LAG", "CONSUMED", "LEASED")
		for _, q := range slices.Sorted(maps.Keys(d.Queues)) {
			for _, p := range d.Queues[q].Partitions {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%t\n", q, p.Partition, p.OffsetLag, p.TimeLag, p.TotalConsumed, p.LeaseActive)
			}
		}
		return tw.Flush()
	}
	gs, err := cl.Admin().ListConsumerGroups(c.ctx)
	if err != nil {
		return err
	}
	if c.json {
		rows := make([]groupJSON, len(gs))
		for i, g := range gs {
			rows[i] = groupJSON{ConsumerGroup: g, MaxTimeLag: g.MaxTimeLag.Seconds()}
		}
		return c.printJSON(rows)
	}
	tw := c.table("GROUP", "QUEUE", "STATE", "LAG", "PARTITIONS_LAGGING", "MAX_TIME_LAG", "MODE")
	for _, g := range gs {
		mode := g.SubscriptionMode
		if mode == "" {
			mode = "-"
		}
		lag := "-" // a 0.15.1 broker does not count it
		if g.TotalLag >= 0 {
			lag = strconv.FormatInt(g.TotalLag, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", g.Name, g.Queue, g.State, lag, g.PartitionsWithLag, g.MaxTimeLag, mode)
	}
	return tw.Flush()
}

// groupJSON is a consumer group as --json prints it: its time lag in
// seconds, as the broker reports it, not in Go's nanoseconds.
type groupJSON struct {
	queen.ConsumerGroup
	MaxTimeLag float64 `json:"maxTimeLag"`
}

// groupDetailJSON is a group's detail as --json prints it, time lags in
// seconds.
type groupDetailJSON struct {
	Name   string                    `json:"name"`
	Queues map[string]groupQueueJSON `json:"queues"`
}

type groupQueueJSON struct {
	Conflation bool                 `json:"conflation"`
	Partitions []partitionStateJSON `json:"partitions"`
}

type partitionStateJSON struct {
	queen.GroupPartitionState
	TimeLag float64 `json:"timeLag"`
}

func groupDetailJSONOf(d queen.ConsumerGroupDetail) groupDetailJSON {
	out := groupDetailJSON{Name: d.Name, Queues: make(map[string]groupQueueJSON, len(d.Queues))}
	for q, st := range d.Queues {
		parts := make([]partitionStateJSON, len(st.Partitions))
		for i, p := range st.Partitions {
			parts[i] = partitionStateJSON{GroupPartitionState: p, TimeLag: p.TimeLag.Seconds()}
		}
		out.Queues[q] = groupQueueJSON{Conflation: st.Conflation, Partitions: parts}
	}
	return out
}

// ---------------------------------------------------------------- push

func (c *cli) push(args []string) error {
	fs := c.flagSet("push")
	partition := fs.String("partition", "", "partition (default: the broker's Default)")
	txid := fs.String("txid", "", "transaction id of a single message (a retried push is then deduplicated)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		return usagef("push takes QUEUE [JSON...]")
	}
	queue, docs := pos[0], pos[1:]
	if len(docs) == 0 {
		sc := bufio.NewScanner(c.stdin)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				docs = append(docs, line)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
	if len(docs) == 0 {
		return usagef("push: no message (give JSON arguments or lines on stdin)")
	}
	payloads := make([]any, len(docs))
	for i, d := range docs {
		if !json.Valid([]byte(d)) {
			return usagef("push: message %d is not JSON: %q", i+1, d)
		}
		payloads[i] = json.RawMessage(d)
	}
	if *txid != "" && len(payloads) != 1 {
		return usagef("push: --txid needs exactly one message, got %d", len(payloads))
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	pb := cl.Queue(queue).Partition(*partition).Push(payloads...)
	if *txid != "" {
		pb = pb.TransactionID(*txid)
	}
	res, err := pb.Execute(c.ctx)
	if res != nil {
		if c.json {
			if perr := c.printJSON(res); perr != nil && err == nil {
				err = perr
			}
		} else {
			for _, r := range res {
				fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", r.Status, r.TransactionID, r.MessageID)
			}
		}
	}
	return err
}

// ---------------------------------------------------------------- pop

// poppedMessage is the CLI's view of a popped message.
type poppedMessage struct {
	Queue           string          `json:"queue"`
	Partition       string          `json:"partition"`
	PartitionID     string          `json:"partitionId"`
	TransactionID   string          `json:"transactionId"`
	LeaseID         string          `json:"leaseId,omitempty"`
	ConsumerGroup   string          `json:"consumerGroup,omitempty"`
	Offset          *int64          `json:"offset,omitempty"`
	DeliveryAttempt int             `json:"deliveryAttempt,omitempty"`
	CreatedAt       time.Time       `json:"createdAt,omitzero"`
	Payload         json.RawMessage `json:"payload"`
}

func (c *cli) pop(args []string) error {
	fs := c.flagSet("pop")
	group := fs.String("group", "", "consumer group (default: queue mode)")
	partition := fs.String("partition", "", "pop this partition only")
	batch := fs.Int("batch", 0, "at most this many messages (default: the broker decides)")
	wait := fs.Bool("wait", false, "wait for messages instead of returning empty")
	timeoutMs := fs.Int("timeout-ms", 0, "with --wait: longest wait in ms (default 30000, at most 60000)")
	mode := fs.String("subscription-mode", "", "where a new group starts: new or all")
	ack := fs.Bool("ack", false, "ack the messages as completed after printing them")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("pop takes QUEUE, got %d arguments", len(pos))
	}
	if *batch < 0 || *timeoutMs < 0 {
		return usagef("pop: --batch and --timeout-ms must not be negative")
	}
	if *timeoutMs > 0 && !*wait {
		return usagef("pop: --timeout-ms goes with --wait")
	}
	if *mode != "" && *group == "" {
		return usagef("pop: --subscription-mode goes with --group (queue mode reads everything)")
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	qb := cl.Queue(pos[0]).Wait(*wait)
	if *group != "" {
		qb = qb.Group(*group)
	}
	if *partition != "" {
		qb = qb.Partition(*partition)
	}
	if *batch > 0 {
		qb = qb.Batch(*batch)
	}
	if *timeoutMs > 0 {
		qb = qb.TimeoutMillis(*timeoutMs)
	}
	if *mode != "" {
		qb = qb.SubscriptionMode(queen.SubscriptionMode(*mode))
	}
	msgs, err := qb.Pop(c.ctx)
	if err != nil {
		return err
	}
	popped := c.now()
	if len(msgs) == 0 {
		fmt.Fprintf(c.stderr, "queen pop: no messages in %s%s\n", pos[0], forGroup(*group))
		return nil
	}
	out := make([]poppedMessage, len(msgs))
	for i, m := range msgs {
		out[i] = poppedMessage{Queue: m.Queue, Partition: m.Partition, PartitionID: m.PartitionID, TransactionID: m.TransactionID,
			LeaseID: m.LeaseID, ConsumerGroup: m.ConsumerGroup, DeliveryAttempt: m.DeliveryAttempt, CreatedAt: m.CreatedAt, Payload: m.Raw}
		if m.Offset >= 0 {
			out[i].Offset = &m.Offset
		}
	}
	if c.json {
		if err := c.printJSON(out); err != nil {
			return err
		}
	} else {
		for _, m := range out {
			fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", m.Partition, m.TransactionID, m.Payload)
		}
	}
	if !*ack {
		c.leftLeased(cl, pos[0], *group, msgs, popped)
		return nil
	}
	settle := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		settle[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
	}
	_, err = cl.SettleBatch(context.WithoutCancel(c.ctx), settle, queen.AckOptions{ConsumerGroup: *group})
	return err
}

// forGroup names the group of a pop for a stderr line ("" in queue mode).
func forGroup(group string) string {
	if group == "" {
		return ""
	}
	return " for group " + group
}

// leftLeased says on stderr that the messages of a pop without --ack stay
// leased, and until when: the pop's time plus the queue's lease time, read
// from the broker (a 0.15.1 broker does not report it: then the line says
// so). Messages without a lease (none when popped without
// commit-on-delivery) are not counted.
func (c *cli) leftLeased(cl *queen.Client, queue, group string, msgs []*queen.Message, popped time.Time) {
	leased := 0
	lease := ""
	for _, m := range msgs {
		if m.LeaseID != "" {
			leased++
			lease = m.LeaseID
		}
	}
	if leased == 0 {
		return
	}
	until := "until the queue's lease time has passed (this broker does not report it)"
	if d, err := cl.Admin().GetQueue(c.ctx, queue); err == nil && d.Config.LeaseTime != nil {
		until = "until about " + popped.Add(*d.Config.LeaseTime).UTC().Format(time.RFC3339) + " (lease time " + d.Config.LeaseTime.String() + ")"
	}
	noun, back := "messages", "they are"
	if leased == 1 {
		noun, back = "message", "it is"
	}
	fmt.Fprintf(c.stderr, "queen pop: %d %s left leased%s (lease %s) %s; unacked, %s delivered again then (--ack acks at once)\n",
		leased, noun, forGroup(group), lease, until, back)
}

// ---------------------------------------------------------------- fetch

// fetchedPartition is the CLI's view of one partition read.
type fetchedPartition struct {
	Records        []queen.FetchedRecord `json:"records"`
	HighWatermark  int64                 `json:"highWatermark"`
	LogStartOffset int64                 `json:"logStartOffset"`
	Error          string                `json:"error,omitempty"`
}

func (c *cli) fetch(args []string) error {
	fs := c.flagSet("fetch")
	offset := fs.Int64("offset", -1, "start offset (default: the oldest kept record)")
	maxBytes := fs.Int("max-bytes", 0, "payload byte budget per partition (default: the broker's, 1 MiB)")
	all := fs.Bool("all", false, "read each partition to its end, page after page")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("fetch takes QUEUE PARTITION...")
	}
	var opts []queen.FetchOption
	if *offset >= 0 {
		opts = append(opts, queen.FetchFrom(*offset))
	} else if *offset != -1 {
		return usagef("fetch: --offset must not be negative")
	}
	if *maxBytes != 0 {
		opts = append(opts, queen.FetchMaxBytes(*maxBytes))
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	qb := cl.Queue(pos[0])
	read, err := qb.Fetch(c.ctx, pos[1:], opts...)
	if err != nil {
		return err
	}
	out := map[string]*fetchedPartition{}
	var failed []error
	for _, p := range pos[1:] {
		if p == "" {
			p = "Default"
		}
		if _, done := out[p]; done {
			continue
		}
		pr := read[p]
		fp := &fetchedPartition{Records: pr.Records, HighWatermark: pr.HighWatermark, LogStartOffset: pr.LogStartOffset}
		out[p] = fp
		if pr.Err != nil {
			fp.Error = pr.Err.Error()
			failed = append(failed, pr.Err)
			continue
		}
		if *all && pr.NextOffset() < pr.HighWatermark {
			for rec, err := range qb.ReadPartition(c.ctx, p, pr.NextOffset()) {
				if err != nil {
					fp.Error = err.Error()
					failed = append(failed, err)
					break
				}
				fp.Records = append(fp.Records, rec)
			}
		}
		if !c.json {
			for _, r := range fp.Records {
				fmt.Fprintf(c.stdout, "%s\t%d\t%s\n", p, r.Offset, r.Payload)
			}
		}
	}
	if c.json {
		if err := c.printJSON(out); err != nil {
			return err
		}
	}
	return errors.Join(failed...)
}

// ---------------------------------------------------------------- health

func (c *cli) health(args []string) error {
	fs := c.flagSet("health")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("health takes no arguments")
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	h, err := cl.Admin().Health(c.ctx)
	if err != nil {
		return err
	}
	if c.json {
		err = c.printJSON(h)
	} else {
		engine := h.Engine
		if engine == "" {
			engine = "postgres"
		}
		_, err = fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", h.Status, engine, h.Version)
	}
	if err == nil && !h.Healthy {
		err = fmt.Errorf("broker is not healthy (%s, HTTP %d)", h.Status, h.HTTPStatus)
	}
	return err
}
