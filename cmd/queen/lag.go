package main

import (
	"context"
	"fmt"

	"github.com/queen-go/queen"
)

// ---------------------------------------------------------------- lag

// lag is "lag QUEUE [--group G] [--wait] [--interval D] [--timeout D]":
// the group's pending messages on each partition of QUEUE (Admin.Lag), or,
// with --wait, once the group has drained them (Admin.AwaitDrained).
func (c *cli) lag(args []string) error {
	fs := c.flagSet("lag")
	group := fs.String("group", "", "the consumer group (default: queue mode)")
	wait := fs.Bool("wait", false, "wait until the group has settled every message")
	interval := fs.Duration("interval", queen.DefaultDrainInterval, "--wait: time between two looks")
	timeout := fs.Duration("timeout", 0, "--wait: give up after this long (0: never)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("lag takes QUEUE")
	}
	if *interval <= 0 || *timeout < 0 {
		return usagef("lag: --interval must be positive and --timeout not negative")
	}
	if !*wait && (*timeout != 0 || *interval != queen.DefaultDrainInterval) {
		return usagef("--interval and --timeout go with lag --wait")
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	var l queen.GroupLag
	if *wait {
		ctx := c.ctx
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		l, err = cl.Admin().AwaitDrained(ctx, pos[0], *group, queen.DrainOptions{Interval: *interval})
	} else {
		l, err = cl.Admin().Lag(c.ctx, pos[0], *group)
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(l)
	}
	tw := c.table("PARTITION", "PENDING")
	for _, p := range l.Partitions {
		note := ""
		if p.Estimated {
			note = " (estimated: no position there)"
		}
		fmt.Fprintf(tw, "%s\t%d%s\n", p.Partition, p.Pending, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Drained() {
		_, err = fmt.Fprintln(c.stdout, "pending 0: drained")
	} else {
		_, err = fmt.Fprintf(c.stdout, "pending %d\n", l.Pending)
	}
	return err
}
