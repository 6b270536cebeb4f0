package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/queen-go/queen"
)

// queueOption is a queue-option flag of queues create and configure: the
// flag, the broker's name of the option (--json prints it), and where the
// flag's value goes in a QueueConfig and comes from in one (nil: unset).
// Each is a duration, an integer or a boolean option.
type queueOption struct {
	flag, name, usage string
	dur               func(*queen.QueueConfig) **time.Duration
	num               func(*queen.QueueConfig) **int
	flg               func(*queen.QueueConfig) **bool
	ms                bool // a duration the broker counts in milliseconds (else seconds)
}

var queueOptions = []queueOption{
	{flag: "lease-time", name: "leaseTime", usage: "how long a pop leases its messages (30s, 5m)",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.LeaseTime }},
	{flag: "retry-limit", name: "retryLimit", usage: "failures a message may have and still come back",
		num: func(c *queen.QueueConfig) **int { return &c.RetryLimit }},
	{flag: "retry-delay", name: "retryDelay", usage: "how long a failed message waits before it comes back (500ms, 2s)", ms: true,
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.RetryDelay }},
	{flag: "priority", name: "priority", usage: "order among the queues of a namespace or task",
		num: func(c *queen.QueueConfig) **int { return &c.Priority }},
	{flag: "delayed-processing", name: "delayedProcessing", usage: "hide each new message that long",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.DelayedProcessing }},
	{flag: "window-buffer", name: "windowBuffer", usage: "hold a partition back until it has been quiet that long",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.WindowBuffer }},
	{flag: "max-size", name: "maxSize", usage: "most messages the queue holds",
		num: func(c *queen.QueueConfig) **int { return &c.MaxSize }},
	{flag: "ttl", name: "ttl", usage: "drop messages older than that",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.TTL }},
	{flag: "retention", name: "retentionSeconds", usage: "keep messages that long (with --retention-enabled)",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.Retention }},
	{flag: "completed-retention", name: "completedRetentionSeconds", usage: "keep completed messages that long",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.CompletedRetention }},
	{flag: "max-wait-time", name: "maxWaitTimeSeconds", usage: "drop messages at that age",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.MaxWaitTime }},
	{flag: "min-pop-wait-time", name: "minPopWaitTime", usage: "the shortest wait of a waiting pop", ms: true,
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.MinPopWaitTime }},
	{flag: "dedup-window", name: "dedupWindowSeconds", usage: "how long a repeated transaction id is a duplicate (0: no dedup)",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.DedupWindow }},
	{flag: "retention-sink-hold-max", name: "retentionSinkHoldMaxSeconds", usage: "the longest a retention sink may hold messages (1m to 365 days)",
		dur: func(c *queen.QueueConfig) **time.Duration { return &c.RetentionSinkHoldMax }},
	{flag: "dead-letter-queue", name: "deadLetterQueue", usage: "keep dead-lettered messages in the queue's DLQ (true|false)",
		flg: func(c *queen.QueueConfig) **bool { return &c.DeadLetterQueue }},
	{flag: "dlq-after-max-retries", name: "dlqAfterMaxRetries", usage: "dead-letter once the retries are spent (true|false)",
		flg: func(c *queen.QueueConfig) **bool { return &c.DLQAfterMaxRetries }},
	{flag: "retention-enabled", name: "retentionEnabled", usage: "turn retention on (true|false)",
		flg: func(c *queen.QueueConfig) **bool { return &c.RetentionEnabled }},
	{flag: "encryption", name: "encryptionEnabled", usage: "store payloads encrypted (true|false)",
		flg: func(c *queen.QueueConfig) **bool { return &c.EncryptionEnabled }},
}

// queueFlags holds the values of the option flags, read once parsed.
type queueFlags struct {
	fs        *flag.FlagSet
	durations map[string]*time.Duration
	ints      map[string]*int
	bools     map[string]*bool
	namespace *string
	task      *string
}

func addQueueFlags(fs *flag.FlagSet) *queueFlags {
	qf := &queueFlags{fs: fs, durations: map[string]*time.Duration{}, ints: map[string]*int{}, bools: map[string]*bool{}}
	for _, o := range queueOptions {
		switch {
		case o.dur != nil:
			qf.durations[o.flag] = fs.Duration(o.flag, 0, o.usage)
		case o.num != nil:
			qf.ints[o.flag] = fs.Int(o.flag, 0, o.usage)
		default:
			qf.bools[o.flag] = fs.Bool(o.flag, false, o.usage)
		}
	}
	qf.namespace = fs.String("namespace", "", "the queue's namespace (discovery pops)")
	qf.task = fs.String("task", "", "the queue's task (discovery pops)")
	return qf
}

// config returns the QueueConfig of the flags given (the others stay nil:
// a merge keeps them, a replace resets them) and how many were given.
func (qf *queueFlags) config() (queen.QueueConfig, int, error) {
	given := map[string]bool{}
	qf.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var cfg queen.QueueConfig
	n := 0
	for _, o := range queueOptions {
		if !given[o.flag] {
			continue
		}
		n++
		switch {
		case o.dur != nil:
			d := *qf.durations[o.flag]
			if d < 0 {
				return cfg, 0, usagef("--%s must not be negative", o.flag)
			}
			*o.dur(&cfg) = &d
		case o.num != nil:
			v := *qf.ints[o.flag]
			if v < 0 {
				return cfg, 0, usagef("--%s must not be negative", o.flag)
			}
			*o.num(&cfg) = &v
		default:
			v := *qf.bools[o.flag]
			*o.flg(&cfg) = &v
		}
	}
	if given["namespace"] {
		cfg.Namespace, n = *qf.namespace, n+1
	}
	if given["task"] {
		cfg.Task, n = *qf.task, n+1
	}
	return cfg, n, nil
}

// configJSON is a QueueConfig as --json prints it: the options set, named
// as the broker names them (leaseTime, retryLimit, ...), each time in the
// broker's unit (milliseconds for retryDelay and minPopWaitTime, seconds
// for the others), rounded up as the client sends it.
func configJSON(cfg queen.QueueConfig) map[string]any {
	out := map[string]any{}
	for _, o := range queueOptions {
		switch {
		case o.dur != nil:
			if d := *o.dur(&cfg); d != nil {
				unit := time.Second
				if o.ms {
					unit = time.Millisecond
				}
				out[o.name] = int64((*d + unit - 1) / unit)
			}
		case o.num != nil:
			if v := *o.num(&cfg); v != nil {
				out[o.name] = *v
			}
		default:
			if v := *o.flg(&cfg); v != nil {
				out[o.name] = *v
			}
		}
	}
	if cfg.Namespace != "" {
		out["namespace"] = cfg.Namespace
	}
	if cfg.Task != "" {
		out["task"] = cfg.Task
	}
	return out
}

// queueJSON is a queue of queues list and show as --json prints it.
type queueJSON struct {
	queen.QueueSummary
	Config map[string]any `json:"config"`
}

type queueDetailJSON struct {
	queueJSON
	PartitionList []queen.QueuePartition `json:"partitionList"`
}

// queueResultJSON is what queues create, configure and delete print.
type queueResultJSON struct {
	Queue   string         `json:"queue"`
	Config  map[string]any `json:"config,omitempty"`
	Deleted *bool          `json:"deleted,omitempty"`
	Existed *bool          `json:"existed,omitempty"`
}

func (c *cli) queues(args []string) error {
	fs := c.flagSet("queues")
	qf := addQueueFlags(fs)
	replace := fs.Bool("replace", false, "configure: reset every option not given to the broker's default")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	verb := "list"
	switch {
	case len(pos) > 0 && slices.Contains([]string{"list", "show", "create", "configure", "delete"}, pos[0]):
		verb, pos = pos[0], pos[1:]
	case len(pos) == 1:
		verb = "show"
	}
	want := map[string]int{"list": 0, "show": 1, "create": 1, "configure": 1, "delete": 1}[verb]
	if len(pos) != want {
		return usagef("queues %s takes %d arguments, got %d", verb, want, len(pos))
	}
	cfg, nOpts, err := qf.config()
	if err != nil {
		return err
	}
	if nOpts > 0 && verb != "create" && verb != "configure" {
		return usagef("queue options go with queues create and queues configure")
	}
	if *replace && verb != "configure" {
		return usagef("--replace goes with queues configure")
	}
	if verb == "configure" && nOpts == 0 {
		return usagef("queues configure needs at least one option (see queen help)")
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	admin := cl.Admin()
	switch verb {
	case "create", "configure":
		var info queen.QueueInfo
		if *replace {
			info, err = admin.ReplaceQueueConfig(c.ctx, pos[0], cfg)
		} else {
			info, err = admin.ConfigureQueue(c.ctx, pos[0], cfg)
		}
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(queueResultJSON{Queue: info.Name, Config: configJSON(info.Config)})
		}
		_, err = fmt.Fprintf(c.stdout, "%s %s: %s\n", map[string]string{"create": "created", "configure": "configured"}[verb], info.Name, configText(info.Config))
		return err
	case "delete":
		res, err := admin.DeleteQueue(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(queueResultJSON{Queue: pos[0], Deleted: &res.Deleted, Existed: &res.Existed})
		}
		if !res.Existed {
			_, err = fmt.Fprintf(c.stdout, "no queue %s: nothing deleted\n", pos[0])
			return err
		}
		_, err = fmt.Fprintf(c.stdout, "deleted %s\n", pos[0])
		return err
	case "show":
		d, err := admin.GetQueue(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(queueDetailJSON{queueJSON: queueJSON{QueueSummary: d.QueueSummary, Config: configJSON(d.Config)}, PartitionList: d.PartitionList})
		}
		tw := c.table("PARTITION", "TOTAL", "PENDING", "PROCESSING", "COMPLETED", "DEAD_LETTER", "NEWEST")
		for _, p := range d.PartitionList {
			newest := "-"
			if !p.NewestMessage.IsZero() {
				newest = p.NewestMessage.UTC().Format(time.RFC3339)
			}
			m := p.Messages
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, m.Total, m.Pending, m.Processing, m.Completed, m.DeadLetter, newest)
		}
		return tw.Flush()
	}
	qs, err := admin.ListQueues(c.ctx)
	if err != nil {
		return err
	}
	if c.json {
		rows := make([]queueJSON, len(qs))
		for i, q := range qs {
			rows[i] = queueJSON{QueueSummary: q, Config: configJSON(q.Config)}
		}
		return c.printJSON(rows)
	}
	tw := c.table("QUEUE", "PARTITIONS", "TOTAL", "PENDING", "PROCESSING", "CREATED")
	for _, q := range qs {
		created := "-"
		if !q.CreatedAt.IsZero() {
			created = q.CreatedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", q.Name, q.Partitions, q.Messages.Total, q.Messages.Pending, q.Messages.Processing, created)
	}
	return tw.Flush()
}

// configText is a configuration as name=value pairs, by name.
func configText(cfg queen.QueueConfig) string {
	m := configJSON(cfg)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%v", k, m[k])
	}
	if len(parts) == 0 {
		return "(the broker reported no options)"
	}
	return strings.Join(parts, " ")
}
