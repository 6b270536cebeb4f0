package main

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/queen-go/queen"
)

// queueOption is a queue-option flag of queues create and configure: the
// flag, the QueueConfig field it sets, and for a time, the unit the field
// counts in while it is an integer.
type queueOption struct {
	flag, field, usage string
	kind               byte // 'd' a duration, 'i' an integer, 'b' a boolean
	unit               time.Duration
}

var queueOptions = []queueOption{
	{"lease-time", "LeaseTime", "how long a pop leases its messages (30s, 5m)", 'd', time.Second},
	{"retry-limit", "RetryLimit", "failed acks per partition and group before a message is dead-lettered", 'i', 0},
	{"retry-delay", "RetryDelay", "how long a failed message waits before it comes back (500ms, 2s)", 'd', time.Millisecond},
	{"priority", "Priority", "order among the queues of a namespace or task", 'i', 0},
	{"delayed-processing", "DelayedProcessing", "hide each new message that long", 'd', time.Second},
	{"window-buffer", "WindowBuffer", "hold a partition back until it has been quiet that long", 'd', time.Second},
	{"max-size", "MaxSize", "most messages the queue holds", 'i', 0},
	{"ttl", "TTL", "drop messages older than that", 'd', time.Second},
	{"retention", "RetentionSeconds", "keep messages that long (with --retention-enabled)", 'd', time.Second},
	{"completed-retention", "CompletedRetentionSeconds", "keep completed messages that long", 'd', time.Second},
	{"max-wait-time", "MaxWaitTimeSeconds", "drop messages at that age", 'd', time.Second},
	{"dead-letter-queue", "DeadLetterQueue", "keep dead-lettered messages in the queue's DLQ (true|false)", 'b', 0},
	{"dlq-after-max-retries", "DLQAfterMaxRetries", "dead-letter once the retries are spent (true|false)", 'b', 0},
	{"retention-enabled", "RetentionEnabled", "turn retention on (true|false)", 'b', 0},
	{"encryption", "EncryptionEnabled", "store payloads encrypted (true|false)", 'b', 0},
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
		switch o.kind {
		case 'd':
			qf.durations[o.flag] = fs.Duration(o.flag, 0, o.usage)
		case 'i':
			qf.ints[o.flag] = fs.Int(o.flag, 0, o.usage)
		case 'b':
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
	v := reflect.ValueOf(&cfg).Elem()
	for _, o := range queueOptions {
		if !given[o.flag] {
			continue
		}
		n++
		var err error
		switch o.kind {
		case 'd':
			if *qf.durations[o.flag] < 0 {
				return cfg, 0, usagef("--%s must not be negative", o.flag)
			}
			err = setOption(v.FieldByName(o.field), reflect.ValueOf(*qf.durations[o.flag]), o.unit)
		case 'i':
			if *qf.ints[o.flag] < 0 {
				return cfg, 0, usagef("--%s must not be negative", o.flag)
			}
			err = setOption(v.FieldByName(o.field), reflect.ValueOf(*qf.ints[o.flag]), 0)
		case 'b':
			err = setOption(v.FieldByName(o.field), reflect.ValueOf(*qf.bools[o.flag]), 0)
		}
		if err != nil {
			return cfg, 0, usagef("--%s: %v", o.flag, err)
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

// setOption stores val in the pointer field f of QueueConfig, whatever the
// field's element type: a duration goes into a time.Duration as is, and
// into an integer counted in unit; an integer or a boolean as is.
func setOption(f reflect.Value, val reflect.Value, unit time.Duration) error {
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return fmt.Errorf("no such queue option in this client")
	}
	elem := f.Type().Elem()
	p := reflect.New(elem)
	switch {
	case val.Type() == elem:
		p.Elem().Set(val)
	case val.Type() == reflect.TypeOf(time.Duration(0)) && elem.Kind() == reflect.Int && unit > 0:
		d := val.Interface().(time.Duration)
		if d%unit != 0 {
			return fmt.Errorf("%s is not a whole number of %s", d, unit)
		}
		p.Elem().SetInt(int64(d / unit))
	default:
		return fmt.Errorf("cannot store a %s in the option (a %s)", val.Type(), elem)
	}
	f.Set(p)
	return nil
}

// configJSON is a QueueConfig as --json prints it: the options set, named
// as the broker names them (leaseTime, retryLimit, ...), each time in the
// broker's unit (milliseconds for retryDelay and minPopWaitTime, seconds
// for the others), whether the field holds an integer or a time.Duration.
func configJSON(cfg queen.QueueConfig) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		f, sf := v.Field(i), t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name := lowerCamel(sf.Name)
		switch {
		case f.Kind() == reflect.Pointer && f.IsNil():
		case f.Kind() == reflect.Pointer:
			val := f.Elem().Interface()
			if d, ok := val.(time.Duration); ok {
				val = d.Seconds() // in the broker's unit, as an integer field holds it
				if sf.Name == "RetryDelay" || sf.Name == "MinPopWaitTime" {
					val = float64(d.Milliseconds())
				}
			}
			out[name] = val
		case f.Kind() == reflect.String && f.String() != "":
			out[name] = f.String()
		}
	}
	return out
}

// lowerCamel lowers a Go name's leading capitals: TTL ttl, DLQAfterMaxRetries
// dlqAfterMaxRetries, LeaseTime leaseTime.
func lowerCamel(s string) string {
	r := []rune(s)
	for i := range r {
		if r[i] < 'A' || r[i] > 'Z' {
			break
		}
		if i > 0 && i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z' {
			break
		}
		r[i] += 'a' - 'A'
	}
	return string(r)
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
