package queen

// A consumer group's lag on a queue, and the wait for it to reach zero
// (docs/ADMIN.md#lag-and-drain).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// GroupLag is a consumer group's backlog on one queue: the messages it
// has not settled yet, those leased to it included.
type GroupLag struct {
	Queue   string `json:"queue"`
	Group   string `json:"group"` // "__QUEUE_MODE__" for queue mode
	Pending int64  `json:"pending"`
	// Partitions lists every partition of the queue, by name, those the
	// group never read included.
	Partitions []PartitionLag `json:"partitions"`
}

// Drained reports whether the group has settled every message of the
// queue: Pending is 0.
func (l GroupLag) Drained() bool { return l.Pending == 0 }

// PartitionLag is a group's backlog on one partition.
type PartitionLag struct {
	Partition string `json:"partition"`
	Pending   int64  `json:"pending"`
	// Estimated: the group has no position on the partition, so Pending is
	// not counted from one: 0 when the partition's newest message is not
	// after the group's start (modes new and timestamp), else the
	// partition's message count (0.15.1: from the broker's statistics; 2.x:
	// from its first kept message), an upper bound.
	Estimated bool `json:"estimated,omitempty"`
}

// Lag answers how many messages of queue the consumer group has not
// settled (completed, failed for good or dead-lettered), on every
// partition of the queue, partitions the group never read included; group
// "" is queue mode. An unknown queue fails with an error matching
// ErrQueueNotFound; a group that never read the queue has every message
// pending.
//
// On 2.x this is the broker's depth view (GET
// /api/v1/resources/queues/{queue}/depth?group=), which counts a partition
// the group has no position on from its first kept message whatever the
// group's mode; when that leaves something pending, the client reads the
// group's start (ListConsumerGroups), positions (GetConsumerGroup) and the
// partitions' newest messages (GetQueue), and counts 0 on a partition
// without a position whose newest message is not after the group's start
// (PartitionLag.Estimated). A group with no position anywhere is not listed
// with its start, so every message counts. 0.15.1 has no
// such view: the client reads the group's position on each partition
// (GetConsumerGroup: live counts) and the queue's partitions (GetQueue),
// and for a partition the group has no position on it counts the
// partition's messages from the broker's statistics (PartitionLag.Estimated),
// asking the broker to refresh them first (POST /api/v1/stats/refresh,
// which needs admin rights; without them the statistics may be minutes
// old).
func (a *Admin) Lag(ctx context.Context, queue, group string) (GroupLag, error) {
	l, _, err := a.lag(ctx, queue, group, true)
	return l, err
}

// lag is Lag; refresh asks for fresh statistics when a partition is
// counted from them (0.15.1), and stale is the refusal of that refresh.
func (a *Admin) lag(ctx context.Context, queue, group string, refresh bool) (l GroupLag, stale, err error) {
	l, err = a.lagOf(ctx, queue, group, refresh, &stale)
	return l, stale, err
}

func (a *Admin) lagOf(ctx context.Context, queue, group string, refresh bool, stale *error) (GroupLag, error) {
	if err := checkName(queueName, queue); err != nil {
		return GroupLag{}, err
	}
	if group == "" {
		group = wire.QueueModeGroup
	} else if err := checkName(groupName, group); err != nil {
		return GroupLag{}, err
	}
	g, err := a.c.generation(ctx)
	if err != nil {
		return GroupLag{}, err
	}
	if g.Serves(http.MethodGet, wire.RouteQueueDepth) {
		l, err := a.depth(ctx, queue, group)
		if err == nil && !l.Drained() && group != wire.QueueModeGroup {
			l, err = a.fromGroupStart(ctx, l)
		}
		if !errors.Is(err, ErrNotSupported) {
			return l, err
		}
	}
	return a.lagFromViews(ctx, queue, group, refresh, stale)
}

// depth reads the 2.x depth view.
func (a *Admin) depth(ctx context.Context, queue, group string) (GroupLag, error) {
	path := wire.RouteQueueDepth.Path(queue)
	var out struct {
		Pending    int64 `json:"pending"`
		Partitions []struct {
			Partition string `json:"partition"`
			Pending   int64  `json:"pending"`
		} `json:"partitions"`
	}
	_, err := a.c.doObject(ctx, call{method: http.MethodGet, path: path, query: url.Values{"group": {group}}}, &out)
	var be *BrokerError
	switch {
	case err != nil && errors.As(err, &be) && routeMissing(be):
		return GroupLag{}, fmt.Errorf("%w: no depth view (GET %s answered %d)", ErrNotSupported, path, be.Status)
	case err != nil && errors.As(err, &be) && unknownQueue(be):
		return GroupLag{}, fmt.Errorf("%w: %q: %w", ErrQueueNotFound, queue, err)
	case err != nil:
		return GroupLag{}, err
	}
	l := GroupLag{Queue: queue, Group: group, Partitions: make([]PartitionLag, 0, len(out.Partitions))}
	for _, p := range out.Partitions {
		l.Partitions = append(l.Partitions, PartitionLag{Partition: p.Partition, Pending: p.Pending})
		l.Pending += p.Pending
	}
	slices.SortFunc(l.Partitions, func(x, y PartitionLag) int { return cmp.Compare(x.Partition, y.Partition) })
	return l, nil
}

// fromGroupStart corrects a depth view (2.x) on the partitions where the
// group has no cursor row, which the view counts from their first message
// whatever the group's mode: there a group that started reading the queue
// at a time (modes new and timestamp) reads nothing stored before it, so a
// partition whose newest message is not after that time has nothing
// pending for it; another keeps the view's count, an upper bound. Either
// is marked Estimated.
func (a *Admin) fromGroupStart(ctx context.Context, l GroupLag) (GroupLag, error) {
	start, err := a.groupStart(ctx, l.Queue, l.Group)
	if err != nil || start.IsZero() {
		return l, err
	}
	d, err := a.GetConsumerGroup(ctx, l.Group)
	if err != nil && !errors.Is(err, ErrGroupNotFound) {
		return GroupLag{}, err
	}
	rows := map[string]bool{}
	for _, p := range d.Queues[l.Queue].Partitions {
		rows[p.Partition] = true
	}
	qd, err := a.GetQueue(ctx, l.Queue)
	if err != nil {
		return GroupLag{}, err
	}
	newest := make(map[string]time.Time, len(qd.PartitionList))
	for _, p := range qd.PartitionList {
		newest[p.Name] = p.NewestMessage
	}
	l.Pending = 0
	for i := range l.Partitions {
		p := &l.Partitions[i]
		if !rows[p.Partition] && p.Pending > 0 {
			p.Estimated = true
			if n, ok := newest[p.Partition]; ok && !n.IsZero() && !n.After(start) {
				p.Pending = 0
			}
		}
		l.Pending += p.Pending
	}
	return l, nil
}

// lagFromViews counts the lag from the group and queue views (0.15.1).
// refresh asks the broker to refresh its statistics first when a partition
// has to be counted from them.
func (a *Admin) lagFromViews(ctx context.Context, queue, group string, refresh bool, stale *error) (GroupLag, error) {
	d, err := a.GetConsumerGroup(ctx, group)
	if err != nil && !errors.Is(err, ErrGroupNotFound) {
		return GroupLag{}, err
	}
	positions := map[string]int64{}
	for _, p := range d.Queues[queue].Partitions {
		positions[p.Partition] = p.OffsetLag
	}
	qd, err := a.GetQueue(ctx, queue)
	if err != nil {
		return GroupLag{}, err
	}
	unread := slices.ContainsFunc(qd.PartitionList, func(p QueuePartition) bool { _, ok := positions[p.Name]; return !ok })
	var start time.Time
	if unread {
		if refresh {
			*stale = a.refreshStats(ctx)
			if qd, err = a.GetQueue(ctx, queue); err != nil {
				return GroupLag{}, err
			}
		}
		if start, err = a.groupStart(ctx, queue, group); err != nil {
			return GroupLag{}, err
		}
	}
	l := GroupLag{Queue: queue, Group: group, Partitions: make([]PartitionLag, 0, len(qd.PartitionList))}
	for _, p := range qd.PartitionList {
		pl := PartitionLag{Partition: p.Name}
		if n, ok := positions[p.Name]; ok {
			pl.Pending = n
			delete(positions, p.Name)
		} else {
			pl.Estimated = true
			if start.IsZero() || p.NewestMessage.IsZero() || p.NewestMessage.After(start) {
				pl.Pending = max(p.Messages.Total, 0)
			}
		}
		l.Partitions = append(l.Partitions, pl)
	}
	for name, n := range positions { // a partition the queue view did not list yet
		l.Partitions = append(l.Partitions, PartitionLag{Partition: name, Pending: n})
	}
	slices.SortFunc(l.Partitions, func(x, y PartitionLag) int { return cmp.Compare(x.Partition, y.Partition) })
	for _, p := range l.Partitions {
		l.Pending += p.Pending
	}
	return l, nil
}

// groupStart is the time a group that names one started reading queue
// from (modes new and timestamp), zero when it reads from the start or
// has no row there.
func (a *Admin) groupStart(ctx context.Context, queue, group string) (time.Time, error) {
	rows, err := a.ListConsumerGroups(ctx)
	if err != nil {
		return time.Time{}, err
	}
	for _, r := range rows {
		if r.Name == group && r.Queue == queue && r.SubscriptionMode != "" && r.SubscriptionMode != string(SubscriptionModeAll) {
			return r.SubscriptionTimestamp, nil
		}
	}
	return time.Time{}, nil
}

// refreshStats asks a 0.15.1 broker to refresh the statistics its queue
// views show. A refusal (it needs admin rights) leaves them as they are,
// and is returned.
func (a *Admin) refreshStats(ctx context.Context) error {
	_, err := a.c.doObject(ctx, call{method: http.MethodPost, path: wire.RouteStatsRefresh.Path(), body: struct{}{}}, nil)
	if err != nil {
		a.c.log.Debug("queen: statistics refresh refused; counting from the broker's last ones", "err", err)
	}
	return err
}

// DefaultDrainInterval is the time between two looks of AwaitDrained when
// DrainOptions.Interval is zero.
const DefaultDrainInterval = time.Second

// DrainOptions tune AwaitDrained.
type DrainOptions struct {
	// Interval is the time between two looks at the lag (0:
	// DefaultDrainInterval).
	Interval time.Duration
}

// AwaitDrained waits until the consumer group has settled every message
// of queue, looking at its Lag every opts.Interval, and returns the look
// that found it drained; messages pushed after that look are not waited
// for. A look that fails for a reason that may pass (the broker
// unreachable, a 5xx or 429) is logged and taken again at the next
// interval; any other error ends the wait with it. When ctx ends first,
// it returns the last lag it saw with ctx's error, which matches
// ErrNotSent when no look reached the broker.
//
// On 0.15.1 a drain that rests on a partition the group has no position
// on (PartitionLag.Estimated) is confirmed only with statistics the broker
// refreshed for the look (POST /api/v1/stats/refresh, which needs admin
// rights): while it refuses, AwaitDrained looks again, and ends with its
// ctx with an error that says so.
func (a *Admin) AwaitDrained(ctx context.Context, queue, group string, opts DrainOptions) (GroupLag, error) {
	every := cmp.Or(opts.Interval, DefaultDrainInterval)
	if every < 0 {
		return GroupLag{}, fmt.Errorf("%w: drain interval %v is negative", ErrInvalidOption, opts.Interval)
	}
	var last GroupLag
	sent := false   // a look may have reached the broker
	var stale error // the last look's drain rested on statistics the broker would not refresh
	warned := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			err := fmt.Errorf("queen: %s not drained on %s (%d pending at the last look): %w", groupLabel(group), queue, last.Pending, context.Cause(ctx))
			if stale != nil {
				err = fmt.Errorf("queen: %s looks drained on %s, but a partition it has no position on is counted from the broker's statistics, "+
					"which it would not refresh (%v): %w", groupLabel(group), queue, stale, context.Cause(ctx))
			}
			if !sent {
				return last, &notSentError{err}
			}
			return last, err
		case <-t.C:
		}
		if ctx.Err() != nil {
			continue
		}
		l, _, err := a.lag(ctx, queue, group, false)
		sent = sent || !errors.Is(err, ErrNotSent)
		var refused error
		if err == nil && l.Drained() && slices.ContainsFunc(l.Partitions, func(p PartitionLag) bool { return p.Estimated }) {
			l, refused, err = a.lag(ctx, queue, group, true) // the statistics may be old: fresh ones decide
		}
		if err == nil {
			stale = refused
		}
		switch {
		case err == nil && l.Drained() && stale != nil:
			// Not confirmed: the statistics may miss what was pushed since
			// the broker's last refresh of them. Look again.
			last = l
			level := slog.LevelDebug
			if !warned {
				level, warned = slog.LevelWarn, true
			}
			a.c.log.Log(ctx, level, "queen: drain not confirmed: the broker would not refresh its statistics; looking again", "queue", queue, "group", group, "err", stale)
		case err == nil && l.Drained():
			return l, nil
		case err == nil:
			last = l
		case ctx.Err() != nil:
			continue
		case !transient(err):
			return last, err
		default:
			a.c.log.Warn("queen: lag look failed; looking again", "queue", queue, "group", group, "err", err)
		}
		t.Reset(every)
	}
}

// transient: a call that failed so may succeed later.
func transient(err error) bool {
	var be *BrokerError
	switch {
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrClosed), errors.Is(err, ErrQueueNotFound), errors.Is(err, ErrNotSupported):
		return false
	case errors.As(err, &be):
		return be.Temporary()
	}
	return true
}

func groupLabel(group string) string {
	if group == "" {
		return "queue mode"
	}
	return fmt.Sprintf("group %q", group)
}
