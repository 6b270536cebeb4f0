package queentest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// ---------------------------------------------------------------- configure

type configuredJSON struct {
	Configured  bool        `json:"configured"`
	QueueID     string      `json:"queueId"`
	PartitionID *string     `json:"partitionId"`
	Queue       string      `json:"queue"`
	Namespace   string      `json:"namespace"`
	Task        string      `json:"task"`
	Storage     string      `json:"storage"`
	Options     optionsJSON `json:"options"`
}

// handleConfigure is POST /api/v1/configure {queue, namespace?, task?,
// options?, mode?}. It creates the queue if needed and stores every option
// it names. The 2.x broker merges by default (options not named keep their
// value; a new queue starts from the configure defaults: lease 300 s,
// retryLimit 3, retryDelay 1000 ms, DLQ on) and starts from those defaults
// with mode "replace" (upstream phase2.rs api_configure). Options may also
// be given at top level, without "options". 200 with every option; 400 when
// queue is missing, mode is unknown or an option has the wrong type (the
// queue is then left as it was).
func (s *Server) handleConfigure(w *recorder, req *request) {
	var root map[string]json.RawMessage
	if !w.readJSON(req.body, &root, "") {
		return
	}
	var name string
	if raw, ok := root["queue"]; !ok || json.Unmarshal(raw, &name) != nil || name == "" {
		w.error(http.StatusBadRequest, "bad_request", "queue is required")
		return
	}
	if nameTooLong(w, name, "", "") {
		return
	}
	replace := false
	if raw, ok := root["mode"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		var mode string
		_ = json.Unmarshal(raw, &mode)
		switch mode {
		case wire.ConfigureMerge:
		case wire.ConfigureReplace:
			replace = true
		default:
			w.error(http.StatusBadRequest, "bad_request", fmt.Sprintf("mode must be \"merge\" or \"replace\", got %s", raw))
			return
		}
	}
	// Options come from "options" when it is an object, else from the top level.
	var opts map[string]json.RawMessage
	if raw, ok := root["options"]; !ok || json.Unmarshal(raw, &opts) != nil || opts == nil {
		opts = map[string]json.RawMessage{}
		for k, v := range root {
			opts[k] = v
		}
	}
	for _, k := range []string{"queue", "options", "mode"} {
		delete(opts, k)
	}
	for _, k := range []string{"namespace", "task"} {
		if _, ok := opts[k]; ok {
			continue
		}
		var v string
		if raw, ok := root[k]; ok && json.Unmarshal(raw, &v) == nil && v != "" {
			opts[k], _ = json.Marshal(v)
		}
	}

	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	old := b.queues[name]
	cfg, ns, task := configuredDefaults(), "", ""
	if old != nil && !replace {
		cfg, ns, task = old.cfg, old.namespace, old.task
	}
	n, t, err := applyOptions(&cfg, opts)
	if err != nil {
		w.error(http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if n != nil {
		ns = *n
	}
	if t != nil {
		task = *t
	}
	q := b.queueOf(name, cfg, now)
	q.cfg, q.namespace, q.task = cfg, ns, task
	b.bump()
	w.json(http.StatusOK, configuredJSON{Configured: true, QueueID: q.id, Queue: name, Namespace: ns, Task: task, Storage: "segments", Options: cfg.options()})
}

// handleDeleteQueue is DELETE /api/v1/resources/queues/{queue}: the queue,
// its partitions, cursors, consumer-group registrations and dead letters go.
// 200 {deleted, existed, queue[, message]} either way.
func (s *Server) handleDeleteQueue(w *recorder, req *request) {
	name := req.params[0]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if q == nil {
		w.json(http.StatusOK, map[string]any{"deleted": false, "existed": false, "queue": name, "message": "Queue not found, nothing was deleted"})
		return
	}
	b.deleteQueue(q)
	b.bump()
	w.json(http.StatusOK, map[string]any{"deleted": true, "existed": true, "queue": name})
}

// -------------------------------------------------------------- queue views

type segCounts struct {
	Segments int64 `json:"segments"`
	Messages int64 `json:"messages"`
}

type queueRow struct {
	ID            string             `json:"id"`
	Name          string             `json:"name"`
	Queue         string             `json:"queue"`
	Namespace     string             `json:"namespace"`
	Task          string             `json:"task"`
	Storage       string             `json:"storage"`
	Partitions    int                `json:"partitions"`
	Segments      segCounts          `json:"segments"`
	Messages      wire.MessageCounts `json:"messages"`
	RetainedBytes int64              `json:"retainedBytes"`
	Options       optionsJSON        `json:"options"`
	CreatedAt     string             `json:"createdAt"`
}

// pendingOf is how many messages of p the slowest cursor has not consumed:
// named groups first, else queue mode, else the whole log.
func pendingOf(p *partition) int64 {
	named, queueMode := int64(math.MaxInt64), int64(math.MaxInt64)
	for g, c := range p.cursors {
		if g == queueModeGroup {
			queueMode = min(queueMode, c.committed)
		} else {
			named = min(named, c.committed)
		}
	}
	from := int64(-1)
	switch {
	case named != math.MaxInt64:
		from = named
	case queueMode != math.MaxInt64:
		from = queueMode
	}
	return max(p.lastOffset()-from, 0)
}

func (p *partition) bytes() int64 {
	var n int64
	for _, m := range p.msgs {
		n += int64(len(m.payload))
	}
	return n
}

func (b *broker) queueRowOf(q *queue) queueRow {
	r := queueRow{ID: q.id, Name: q.name, Queue: q.name, Namespace: q.namespace, Task: q.task, Storage: "segments",
		Partitions: len(q.parts), Options: q.cfg.options(), CreatedAt: isoMicros(q.createdAt)}
	for _, p := range q.parts {
		total := int64(len(p.msgs))
		r.Messages.Total += total
		r.Messages.Pending += pendingOf(p)
		r.RetainedBytes += p.bytes()
		if total > 0 {
			r.Segments.Segments++
		}
	}
	r.Segments.Messages = r.Messages.Total
	r.Messages.Completed = max(r.Messages.Total-r.Messages.Pending, 0)
	return r
}

func (b *broker) queueNames() []string {
	names := make([]string, 0, len(b.queues))
	for n := range b.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// handleListQueues is GET /api/v1/resources/queues (2.x phase2.rs
// api_list_queues): {queues:[...], kvRows, kvBytes, timerRows, timerBytes}.
func (s *Server) handleListQueues(w *recorder, _ *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	rows := []queueRow{}
	for _, n := range b.queueNames() {
		rows = append(rows, b.queueRowOf(b.queues[n]))
	}
	w.json(http.StatusOK, map[string]any{"queues": rows, "kvRows": 0, "kvBytes": 0, "timerRows": 0, "timerBytes": 0})
}

type partitionView struct {
	ID            string             `json:"id"`
	Name          string             `json:"name"`
	CreatedAt     string             `json:"createdAt"`
	Messages      wire.MessageCounts `json:"messages"`
	Stats         wire.MessageCounts `json:"stats"`
	Cursor        map[string]any     `json:"cursor"`
	LastActivity  *string            `json:"lastActivity"`
	OldestMessage *string            `json:"oldestMessage"`
	NewestMessage *string            `json:"newestMessage"`
}

// handleGetQueue is GET /api/v1/resources/queues/{queue} (2.x
// queue_resource_detail): the queue with its options, per-partition counts
// and totals; 404 {"error":"Queue not found"}.
func (s *Server) handleGetQueue(w *recorder, req *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[req.params[0]]
	if q == nil {
		w.json(http.StatusNotFound, map[string]string{"error": "Queue not found"})
		return
	}
	now := b.now()
	dlqBy := map[int64]int64{}
	for _, r := range b.dlq {
		if r.queue == q.name {
			dlqBy[r.pid]++
		}
	}
	var totals wire.MessageCounts
	var seg segCounts
	var retained int64
	parts := []partitionView{}
	for _, p := range q.parts {
		total := int64(len(p.msgs))
		pending := pendingOf(p)
		var processing, consumed int64
		var last *time.Time
		for _, c := range p.cursors {
			if l := c.liveLease(now); l != nil {
				processing += max(l.end-c.committed, 0)
				if last == nil || l.acquired.After(*last) {
					t := l.acquired
					last = &t
				}
			}
			consumed += c.totalConsumed
		}
		processing = min(processing, pending)
		dead := dlqBy[p.id]
		st := wire.MessageCounts{Total: total, Pending: pending, Processing: processing, Completed: max(total-pending-dead, 0), DeadLetter: dead}
		v := partitionView{ID: p.pid(), Name: p.name, CreatedAt: isoMicros(p.createdAt), Messages: st, Stats: st,
			Cursor: map[string]any{"totalConsumed": consumed, "batchesConsumed": 0}}
		if last != nil {
			s := isoMicros(*last)
			v.LastActivity = &s
		}
		if total > 0 {
			o, n := isoMicros(p.msgs[0].createdAt), isoMicros(p.msgs[total-1].createdAt)
			v.OldestMessage, v.NewestMessage = &o, &n
			seg.Segments++
		}
		parts = append(parts, v)
		totals.Total += total
		totals.Pending += pending
		totals.Processing += processing
		totals.Completed += st.Completed
		totals.DeadLetter += dead
		retained += p.bytes()
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Name < parts[j].Name })
	seg.Messages = totals.Total
	w.json(http.StatusOK, map[string]any{
		"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
		"createdAt": isoMicros(q.createdAt), "options": q.cfg.options(), "partitions": parts,
		"segments": seg, "totals": totals, "retainedBytes": retained,
	})
}

// handleQueueDepth is GET /api/v1/resources/queues/{queue}/depth?group=
// (2.x depth_json, phase2.rs). It reads cursor rows only: with a group, a
// partition where the group has no row counts from its first message,
// whatever the group's mode and wherever the engine would seed it; without
// one, from the lowest named row, or from the first message when a named
// group registered on the queue has no row there, else from the queue-mode
// row. processing counts live leases of those rows.
func (s *Server) handleQueueDepth(w *recorder, req *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[req.params[0]]
	if q == nil {
		w.json(http.StatusNotFound, map[string]string{"error": "Queue not found"})
		return
	}
	now := b.now()
	group, hasGroup := req.query.Get("group"), req.query.Has("group")
	conflation := false
	if hasGroup {
		if m := b.groups[groupKey{q.name, group}]; m != nil {
			conflation = m.conflation
		}
	}
	type row struct {
		Partition  string `json:"partition"`
		Pending    int64  `json:"pending"`
		Processing int64  `json:"processing"`
		Ready      int64  `json:"ready"`
	}
	named := 0
	for k := range b.groups {
		if k.queue == q.name && k.group != queueModeGroup {
			named++
		}
	}
	live := func(c *cursor) int64 {
		if l := c.liveLease(now); l != nil {
			return max(l.end-c.committed, 0)
		}
		return 0
	}
	rows := []row{}
	var pending, processing, pp, pr int64
	for _, p := range q.parts {
		var pend, proc int64
		committed := int64(-1)
		if hasGroup {
			if c := p.cursors[group]; c != nil && c.row {
				committed = c.committed
				proc = live(c)
			}
		} else {
			seen, low, qm := 0, int64(math.MaxInt64), int64(math.MaxInt64)
			for g, c := range p.cursors {
				if !c.row {
					continue
				}
				if g == queueModeGroup {
					qm = min(qm, c.committed)
				} else {
					seen++
					low = min(low, c.committed)
				}
				proc += live(c)
			}
			switch {
			case seen < named:
			case seen > 0:
				committed = low
			case qm != math.MaxInt64:
				committed = qm
			}
		}
		pend = max(p.lastOffset()-committed, 0)
		proc = min(proc, pend)
		rows = append(rows, row{p.name, pend, proc, pend - proc})
		pending += pend
		processing += proc
		if pend > 0 {
			pp++
		}
		if pend-proc > 0 {
			pr++
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Partition < rows[j].Partition })
	var g any
	if hasGroup {
		g = group
	}
	eff, effReady := pending, pending-processing
	if conflation {
		eff, effReady = pp, pr
	}
	w.json(http.StatusOK, map[string]any{
		"queue": q.name, "group": g, "pending": pending, "processing": processing, "ready": pending - processing,
		"partitionsPending": pp, "partitionsReady": pr, "conflation": conflation,
		"effectivePending": eff, "effectiveReady": effReady, "partitions": rows,
	})
}

// --------------------------------------------------------------------- seek

// handleSeek is POST /api/v1/consumer-groups/{group}/queues/{queue}/seek and
// .../partitions/{partition}/seek, body {"toEnd":true} or
// {"timestamp":"ISO"}; an empty body means toEnd. toEnd skips the backlog;
// a timestamp puts the cursor just before the first message created at or
// after it (an early time rewinds to the start). Any lease on the cursor is
// dropped. 400 when neither is given, 404 when the queue (or the partition)
// is unknown (upstream phase2/admin.rs api_group_seek).
func (s *Server) handleSeek(w *recorder, req *request) {
	group, qname := req.params[0], req.params[1]
	var partName *string
	if len(req.params) > 2 {
		partName = &req.params[2]
	}
	var body struct {
		ToEnd     *bool   `json:"toEnd"`
		Timestamp *string `json:"timestamp"`
	}
	if len(bytes.TrimSpace(req.body)) == 0 {
		t := true
		body.ToEnd = &t
	} else if err := json.Unmarshal(req.body, &body); err != nil {
		w.error(http.StatusBadRequest, "bad_body", err.Error())
		return
	}
	toEnd := body.ToEnd != nil && *body.ToEnd
	ts, tsOK := time.Time{}, false
	if body.Timestamp != nil {
		ts, tsOK = parseTime(*body.Timestamp)
	}
	if !toEnd && !tsOK {
		w.json(http.StatusBadRequest, map[string]any{"success": false, "error": "Must specify toEnd=true or a timestamp", "code": "bad_request"})
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var parts []*partition
	if q := b.queues[qname]; q != nil {
		for _, p := range q.parts {
			if partName == nil || p.name == *partName {
				parts = append(parts, p)
			}
		}
	}
	if len(parts) == 0 {
		msg := "Queue not found or has no partitions"
		if partName != nil {
			msg = "Partition not found"
		}
		w.json(http.StatusNotFound, map[string]any{"success": false, "error": msg, "consumerGroup": group, "queueName": qname, "partitionsUpdated": 0})
		return
	}
	for _, p := range parts {
		target := p.lastOffset()
		if !toEnd {
			if off := p.firstAtOrAfter(ts); off >= 0 {
				target = off - 1
			}
		}
		c := p.cursors[group]
		if c == nil {
			c = &cursor{committed: -1}
			p.cursors[group] = c
		}
		c.lease = nil
		c.committed, c.row = target, true
		c.clearAttempt()
		c.batchRetry = 0
		c.released = nil
	}
	b.bump()
	var target *string
	if tsOK && !toEnd {
		t := isoMicros(ts)
		target = &t
	}
	w.json(http.StatusOK, map[string]any{
		"success": true, "consumerGroup": group, "queueName": qname, "partitionName": partName,
		"seekToEnd": toEnd, "targetTimestamp": target, "partitionsUpdated": len(parts), "updated": true,
	})
}

// ---------------------------------------------------------- consumer groups

// cursorLag is one cursor with its lag figures.
type cursorLag struct {
	queue, partition, group string
	pid                     string
	c                       *cursor
	pending                 int64
	lagSeconds              *int64 // nil when caught up
	oldest                  time.Time
	leaseLive               bool
}

func (b *broker) cursorLags(only string, now time.Time) []cursorLag {
	var out []cursorLag
	for _, qn := range b.queueNames() {
		q := b.queues[qn]
		for _, p := range q.parts {
			groups := make([]string, 0, len(p.cursors))
			for g, c := range p.cursors {
				// The views list cursor rows only: a partition the group
				// never popped, sought or acked is not in them.
				if (only == "" || g == only) && c.row {
					groups = append(groups, g)
				}
			}
			sort.Strings(groups)
			for _, g := range groups {
				c := p.cursors[g]
				l := cursorLag{queue: qn, partition: p.name, group: g, pid: p.pid(), c: c, pending: max(p.lastOffset()-c.committed, 0)}
				l.leaseLive = c.liveLease(now) != nil
				if l.pending > 0 {
					l.oldest = p.msgs[c.committed+1].createdAt
					secs := int64(math.Round(now.Sub(l.oldest).Seconds()))
					l.lagSeconds = &secs
				}
				out = append(out, l)
			}
		}
	}
	return out
}

// handleListGroups is GET /api/v1/consumer-groups: one row per (group,
// queue) with at least one cursor, queue mode included, ordered by group
// then queue (2.x reads.rs group_view). state is Lagging past 300 s of time
// lag, else Stable once anything was consumed, else Dead.
func (s *Server) handleListGroups(w *recorder, _ *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	type agg struct {
		members, withLag, totalLag, maxLag, maxConsumed int64
	}
	aggs := map[groupKey]*agg{}
	var keys []groupKey
	for _, l := range b.cursorLags("", now) {
		k := groupKey{l.queue, l.group}
		a := aggs[k]
		if a == nil {
			a = &agg{}
			aggs[k] = a
			keys = append(keys, k)
		}
		a.members++
		if l.pending > 0 {
			a.withLag++
		}
		a.totalLag += l.pending
		if l.lagSeconds != nil {
			a.maxLag = max(a.maxLag, *l.lagSeconds)
		}
		a.maxConsumed = max(a.maxConsumed, l.c.totalConsumed)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].queue < keys[j].queue
	})
	rows := []wire.ConsumerGroupRow{}
	for _, k := range keys {
		a := aggs[k]
		state := "Dead"
		switch {
		case a.maxLag > 300:
			state = "Lagging"
		case a.maxConsumed > 0:
			state = "Stable"
		}
		row := wire.ConsumerGroupRow{
			Name: k.group, Topics: []string{k.queue}, QueueName: k.queue, Members: int(a.members),
			PartitionCursors: int(a.members), PartitionsWithLag: int(a.withLag), TotalLag: &a.totalLag,
			MaxTimeLag: float64(a.maxLag), State: state, Storage: "segments", Kind: "queen",
		}
		if m := b.groups[k]; m != nil && k.group != queueModeGroup {
			mode := m.mode
			row.SubscriptionMode = &mode
			ts := m.subTS
			switch m.mode {
			case "all":
				ts = time.Unix(0, 0)
			case "new":
				ts = m.registeredAt
			}
			t, c := isoMicros(ts), isoMicros(m.registeredAt)
			row.SubscriptionTimestamp, row.SubscriptionCreatedAt = &t, &c
			row.Conflation = m.conflation
		}
		rows = append(rows, row)
	}
	w.json(http.StatusOK, rows)
}

// handleGroupDetail is GET /api/v1/consumer-groups/{group}:
// {queue: {conflation, kind, partitions:[...]}}; 404 when the group has no
// cursor anywhere.
func (s *Server) handleGroupDetail(w *recorder, req *request) {
	group := req.params[0]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := wire.GroupDetail{}
	for _, l := range b.cursorLags(group, now) {
		d := out[l.queue]
		if d.Partitions == nil {
			m := b.groups[groupKey{l.queue, group}]
			d = wire.GroupQueueDetail{Conflation: m != nil && m.conflation, Kind: "queen", Partitions: []wire.GroupPartitionDetail{}}
		}
		pd := wire.GroupPartitionDetail{Partition: l.partition, TotalConsumed: l.c.totalConsumed, OffsetLag: l.pending, LeaseActive: l.leaseLive}
		if l.leaseLive {
			id := l.c.lease.id
			pd.WorkerID = &id
		}
		if l.lagSeconds != nil {
			pd.TimeLagSeconds = float64(*l.lagSeconds)
		}
		d.Partitions = append(d.Partitions, pd)
		out[l.queue] = d
	}
	if len(out) == 0 {
		w.json(http.StatusNotFound, map[string]string{"error": "Consumer group not found"})
		return
	}
	for q, d := range out {
		sort.Slice(d.Partitions, func(i, j int) bool { return d.Partitions[i].Partition < d.Partitions[j].Partition })
		out[q] = d
	}
	w.json(http.StatusOK, out)
}

// handleLaggingGroups is GET /api/v1/consumer-groups/lagging?minLagSeconds=
// (default 3600): every cursor whose oldest unconsumed message is older,
// oldest first, in snake_case rows.
func (s *Server) handleLaggingGroups(w *recorder, req *request) {
	minLag := int64(3600)
	if v := req.query.Get("minLagSeconds"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			minLag = n
		}
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	type row struct {
		lag int64
		v   map[string]any
	}
	var rows []row
	for _, l := range b.cursorLags("", now) {
		if l.lagSeconds == nil || *l.lagSeconds <= minLag {
			continue
		}
		var worker any
		if l.leaseLive {
			worker = l.c.lease.id
		}
		rows = append(rows, row{*l.lagSeconds, map[string]any{
			"consumer_group": l.group, "queue_name": l.queue, "partition_name": l.partition,
			"partition_id": l.pid, "worker_id": worker, "kind": "queen", "offset_lag": l.pending,
			"time_lag_seconds": *l.lagSeconds, "lag_hours": math.Round(float64(*l.lagSeconds)/36) / 100,
			"oldest_unconsumed_at": isoMillis(l.oldest), "last_consumed_at": nil,
		}})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].lag > rows[j].lag })
	out := make([]map[string]any, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.v)
	}
	w.json(http.StatusOK, out)
}

// handleDeleteGroup is DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]
// ?deleteMetadata=true|false (default true): the group's cursors on that
// queue (or on every queue) go, and with them its registration, so its next
// pop registers afresh with that pop's subscription.
func (s *Server) handleDeleteGroup(w *recorder, req *request) {
	group := req.params[0]
	var only *string
	if len(req.params) > 1 {
		only = &req.params[1]
	}
	deleteMeta := req.query.Get("deleteMetadata") != "false"
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	queues := []string{}
	if only != nil {
		queues = append(queues, *only)
	} else {
		queues = append(queues, b.queueNames()...)
	}
	count := 0
	for _, qn := range queues {
		if deleteMeta {
			delete(b.groups, groupKey{qn, group})
			for k := range b.subs {
				// 0.15.1's rows of every queue go with a group-wide delete.
				if k.group == group && (k.queue == qn || only == nil) {
					delete(b.subs, k)
				}
			}
		}
		if q := b.queues[qn]; q != nil {
			for _, p := range q.parts {
				if c := p.cursors[group]; c != nil {
					delete(p.cursors, group)
					if c.row {
						count++ // the cursor rows the broker deletes
					}
				}
			}
		}
	}
	b.bump()
	w.json(http.StatusOK, map[string]any{
		"success": true, "consumerGroup": group, "queueName": only, "deletedPartitions": count,
		"metadataDeleted": deleteMeta, "queues": queues,
	})
}

// handleGroupSubscription is POST /api/v1/consumer-groups/{group}/subscription
// {"subscriptionTimestamp":"ISO"}: the group's registrations switch to that
// time (it only decides where cursors created from now on start).
func (s *Server) handleGroupSubscription(w *recorder, req *request) {
	var body struct {
		TS *string `json:"subscriptionTimestamp"`
	}
	if !w.readJSON(req.body, &body, "") {
		return
	}
	if body.TS == nil {
		w.error(http.StatusBadRequest, "bad_request", "subscriptionTimestamp is required")
		return
	}
	ts, ok := parseTime(*body.TS)
	if !ok {
		w.error(http.StatusBadRequest, "bad_request", "subscriptionTimestamp is invalid")
		return
	}
	group := req.params[0]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, m := range b.groups {
		if k.group == group {
			m.mode, m.subTS = "timestamp", ts
			n++
		}
	}
	for k, m := range b.subs {
		if k.group == group {
			m.subTS = ts // 0.15.1 moves the time and keeps the mode
			n++
		}
	}
	w.json(http.StatusOK, map[string]any{"success": true, "consumerGroup": group, "newTimestamp": *body.TS, "rowsUpdated": n})
}

// ------------------------------------------------------------------- health

// handleHealth is GET /health in the 2.x shape: 200
// {status:"healthy", engine:"raft", version, raft:{...}} (one node, always
// the leader, storage ready).
func (s *Server) handleHealth(w *recorder, _ *request) {
	s.b.mu.Lock()
	applied := s.b.applied
	s.b.mu.Unlock()
	w.json(http.StatusOK, wire.HealthResponse{
		Status: "healthy", Engine: "raft", Version: Version,
		Raft: &wire.HealthRaft{Role: "leader", Leader: true, Term: 1, Applied: applied, Commit: applied, StorageReady: true},
	})
}

// handleStatsRefresh is the 2.x no-op POST /api/v1/stats/refresh.
func (s *Server) handleStatsRefresh(w *recorder, _ *request) {
	w.json(http.StatusOK, map[string]any{"success": true, "refreshed": false, "engine": "raft"})
}
