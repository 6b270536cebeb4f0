package queentest

import (
	"github.com/queen-go/queen/internal/wire"
	"math"
	"net/http"
	"sort"
	"time"
)

// The read-only admin views of the 0.15.1 profile: the queue list and
// detail (server/src/routes/resources.cpp; get_queues_v2 and get_queue_v2 in
// lib/schema/procedures/013_stats.sql) and the consumer-group list and
// detail (server/src/routes/consumer_groups.cpp; get_consumer_groups_v4 and
// get_consumer_group_details_v1 in 008_consumer_groups.sql). The real
// broker reads its counters from a statistics table refreshed in the
// background, so they may lag behind; the profile computes them at once.
// Every answer is HTTP 200, errors included (the routes write their headers
// before their status).

// unread015 is what group has not consumed on p: from its cursor, or, for a
// NULL cursor, from its subscription time (a message created at that time
// counts), or else everything. It returns the count and the oldest unread
// message (nil when none). Callers hold mu.
func (b *broker) unread015(p *partition, group string, c *cursor) (int64, *message) {
	from := c.committed + 1
	var since *time.Time
	if c.null015() {
		if m := b.subOf(p.q.name, group, p.name); m != nil && !m.subTS.IsZero() {
			since = &m.subTS
		}
	}
	var n int64
	var oldest *message
	for o := from; o <= p.lastOffset(); o++ {
		m := p.msgs[o]
		if since != nil && m.createdAt.Before(*since) {
			continue
		}
		n++
		if oldest == nil || m.createdAt.Before(oldest.createdAt) {
			oldest = m
		}
	}
	return n, oldest
}

// subs015 is the (group, queue) subscription summary get_consumer_groups_v4
// joins in: the greatest mode, time and creation time among the rows of
// that queue (the queue-wide one and the per-partition ones). ok is false
// when there is none. Callers hold mu.
func (b *broker) subs015(queue, group string) (mode string, ts, created time.Time, ok bool) {
	for k, m := range b.subs {
		if k.queue != queue || k.group != group {
			continue
		}
		ok = true
		mode = max(mode, m.mode)
		if m.subTS.After(ts) {
			ts = m.subTS
		}
		if m.registeredAt.After(created) {
			created = m.registeredAt
		}
	}
	return mode, ts, created, ok
}

// sendSP015 answers a stored procedure's JSON result as the 0.15.1 routes
// do: 200, and no body at all when the result is empty ({} or []), since
// the response registry ends an empty answer without one.
func (w *recorder) sendSP015(v any) {
	w.json(http.StatusOK, v)
	if b := w.body.String(); b == "{}" || b == "[]" {
		w.body.Reset()
	}
}

// ageSeconds is EXTRACT(EPOCH FROM (NOW() - t))::integer.
func ageSeconds(now, t time.Time) int64 { return int64(math.Round(now.Sub(t).Seconds())) }

type group015Row struct {
	Name                  string   `json:"name"`
	Topics                []string `json:"topics"`
	QueueName             string   `json:"queueName"`
	Members               int      `json:"members"`
	PartitionsWithLag     int      `json:"partitionsWithLag"`
	TotalLag              *int64   `json:"totalLag"`
	MaxTimeLag            int64    `json:"maxTimeLag"`
	State                 string   `json:"state"`
	SubscriptionMode      *string  `json:"subscriptionMode"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
}

// handleListGroups015 is GET /api/v1/consumer-groups on the 0.15.1 profile:
// an array of one row per (group, queue) on which the group has a
// partition_consumers row (one of its pops claimed a partition there; queue
// mode included), ordered by group then queue. members counts those
// partitions; a partition lags when its newest message is past the
// cursor (for a NULL cursor: past the subscription time, or at all when
// there is none); maxTimeLag is the age in seconds of the newest message of
// a lagging partition (a lower bound of the real lag), at most over the
// rows; state is Lagging past 300 s, else Stable when any cursor has a
// last-consumed time, else Dead. totalLag is always null; there is no
// partitionCursors, conflation, storage or kind. With no row at all the
// answer is 200 with no body.
func (s *Server) handleListGroups015(w *recorder, _ *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	type agg struct {
		members, withLag int
		maxLag           int64
		consumed         bool
	}
	aggs := map[groupKey]*agg{}
	var keys []groupKey
	for _, qn := range b.queueNames() {
		for _, p := range b.queues[qn].parts {
			for g, c := range p.cursors {
				k := groupKey{qn, g}
				a := aggs[k]
				if a == nil {
					a = &agg{}
					aggs[k] = a
					keys = append(keys, k)
				}
				a.members++
				if !c.lastConsumedAt.IsZero() {
					a.consumed = true
				}
				last := p.lastOffset()
				if last < 0 {
					continue
				}
				newest := p.msgs[last]
				lag := false
				switch {
				case !c.null015():
					lag = last > c.committed
				default:
					_, ts, _, ok := b.subs015(qn, g)
					lag = !ok || ts.IsZero() || !newest.createdAt.Before(ts)
				}
				if lag {
					a.withLag++
					a.maxLag = max(a.maxLag, ageSeconds(now, newest.createdAt))
				}
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].queue < keys[j].queue
	})
	rows := []group015Row{}
	for _, k := range keys {
		a := aggs[k]
		state := "Dead"
		switch {
		case a.maxLag > 300:
			state = "Lagging"
		case a.consumed:
			state = "Stable"
		}
		r := group015Row{Name: k.group, Topics: []string{k.queue}, QueueName: k.queue, Members: a.members,
			PartitionsWithLag: a.withLag, MaxTimeLag: a.maxLag, State: state}
		if mode, ts, created, ok := b.subs015(k.queue, k.group); ok {
			r.SubscriptionMode = &mode
			if !ts.IsZero() {
				t := isoMillis015(ts)
				r.SubscriptionTimestamp = &t
			}
			c := isoMillis015(created)
			r.SubscriptionCreatedAt = &c
		}
		rows = append(rows, r)
	}
	w.sendSP015(rows)
}

// handleGroupDetail015 is GET /api/v1/consumer-groups/{group} on the 0.15.1
// profile: {queue: {partitions: [...]}} over the group's partition_consumers
// rows, partitions by name; no conflation or kind. offsetLag counts the
// unread messages and timeLagSeconds is the age of the oldest (0 when
// none); workerId is the lease id of the group's last claim there while
// the cursor holds it. A group with no such row anywhere (a typo, or a
// group whose pops all found nothing) answers 200 with no body (the
// procedure's {}, which the route sends as an empty answer).
func (s *Server) handleGroupDetail015(w *recorder, req *request) {
	group := req.params[0]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	type queueDetail struct {
		Partitions []wire.GroupPartitionDetail `json:"partitions"`
	}
	out := map[string]queueDetail{}
	for _, qn := range b.queueNames() {
		var parts []wire.GroupPartitionDetail
		for _, p := range b.queues[qn].parts {
			c := p.cursors[group]
			if c == nil {
				continue
			}
			n, oldest := b.unread015(p, group, c)
			r := wire.GroupPartitionDetail{Partition: p.name, TotalConsumed: c.totalConsumed, OffsetLag: n,
				LeaseActive: c.liveLease(now) != nil}
			if c.lease != nil {
				id := c.lease.id
				r.WorkerID = &id
			}
			if !c.lastConsumedAt.IsZero() {
				t := isoMillis015(c.lastConsumedAt)
				r.LastConsumedAt = &t
			}
			if oldest != nil {
				r.TimeLagSeconds = float64(ageSeconds(now, oldest.createdAt)) // whole seconds, as the broker sends them
			}
			parts = append(parts, r)
		}
		if len(parts) > 0 {
			sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
			out[qn] = queueDetail{Partitions: parts}
		}
	}
	w.sendSP015(out)
}

type queueCounts015 struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
}

type queue015Row struct {
	ID         string         `json:"id"`
	Name       string         `json:"name"`
	Namespace  string         `json:"namespace"`
	Task       string         `json:"task"`
	CreatedAt  string         `json:"createdAt"`
	Partitions int            `json:"partitions"`
	Messages   queueCounts015 `json:"messages"`
}

// partitionStats015 is one partition's counters as the statistics table
// holds them: pending is what the slowest group has not consumed
// (processing included), processing what live leases hold.
func (b *broker) partitionStats015(p *partition, now time.Time) (total, pending, processing, dead int64, oldestPending *time.Time) {
	total = int64(len(p.msgs))
	pending = pendingOf(p)
	for _, c := range p.cursors {
		if l := c.liveLease(now); l != nil {
			processing += max(l.end-c.committed, 0)
		}
	}
	processing = min(processing, pending)
	for _, r := range b.dlq {
		if r.pid == p.id {
			dead++
		}
	}
	if pending > 0 {
		t := p.msgs[total-pending].createdAt
		oldestPending = &t
	}
	return total, pending, processing, dead, oldestPending
}

// handleListQueues015 is GET /api/v1/resources/queues on the 0.15.1
// profile: {"queues":[{id, name, namespace, task, createdAt, partitions (a
// count), messages:{total, pending, processing}}]}, newest queue first;
// pending there excludes the messages being processed. No options,
// completed, deadLetter or retainedBytes.
func (s *Server) handleListQueues015(w *recorder, _ *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	qs := make([]*queue, 0, len(b.queues))
	for _, n := range b.queueNames() {
		qs = append(qs, b.queues[n])
	}
	sort.SliceStable(qs, func(i, j int) bool { return qs[i].createdAt.After(qs[j].createdAt) })
	rows := []queue015Row{}
	for _, q := range qs {
		r := queue015Row{ID: q.id, Name: q.name, Namespace: q.namespace, Task: q.task, CreatedAt: isoMillis015(q.createdAt), Partitions: len(q.parts)}
		for _, p := range q.parts {
			total, pending, processing, _, _ := b.partitionStats015(p, now)
			r.Messages.Total += total
			r.Messages.Pending += pending
			r.Messages.Processing += processing
		}
		r.Messages.Pending = max(r.Messages.Pending-r.Messages.Processing, 0)
		rows = append(rows, r)
	}
	w.json(http.StatusOK, map[string]any{"queues": rows})
}

type partitionStats015 struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	DeadLetter int64 `json:"deadLetter"`
}

type partition015View struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	CreatedAt     string            `json:"createdAt"`
	Stats         partitionStats015 `json:"stats"`
	OldestMessage *string           `json:"oldestMessage"`
	NewestMessage *string           `json:"newestMessage"`
}

// handleGetQueue015 is GET /api/v1/resources/queues/{queue} on the 0.15.1
// profile: {id, name, namespace, task, createdAt, partitions:[{id (the
// partition's UUID), name, createdAt, stats:{total, pending, processing,
// completed, failed (always 0), deadLetter}, oldestMessage (the oldest
// pending), newestMessage}], totals:{...}}, partitions by name; no options.
// An unknown queue is 200 {"error":"Queue not found"}.
func (s *Server) handleGetQueue015(w *recorder, req *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[req.params[0]]
	if q == nil {
		w.json(http.StatusOK, map[string]string{"error": "Queue not found"})
		return
	}
	now := b.now()
	var totals partitionStats015
	parts := []partition015View{}
	for _, p := range q.parts {
		total, pending, processing, dead, oldest := b.partitionStats015(p, now)
		st := partitionStats015{Total: total, Pending: pending, Processing: processing, Completed: max(total-pending-dead, 0), DeadLetter: dead}
		v := partition015View{ID: p.uuid, Name: p.name, CreatedAt: isoMillis015(p.createdAt), Stats: st}
		if oldest != nil {
			o := isoMillis015(*oldest)
			v.OldestMessage = &o
		}
		if total > 0 {
			n := isoMillis015(p.msgs[total-1].createdAt)
			v.NewestMessage = &n
		}
		parts = append(parts, v)
		totals.Total += st.Total
		totals.Pending += st.Pending
		totals.Processing += st.Processing
		totals.Completed += st.Completed
		totals.DeadLetter += st.DeadLetter
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Name < parts[j].Name })
	w.json(http.StatusOK, map[string]any{
		"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task, "createdAt": isoMillis015(q.createdAt),
		"partitions": parts, "totals": totals,
	})
}
