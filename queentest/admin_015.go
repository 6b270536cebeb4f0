package queentest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The configure, seek, lease, queue-delete and health routes of the 0.15.1
// profile (server/src/routes/{configure,consumer_groups,leases,resources,
// health}.cpp; 012_configure.sql, 008_consumer_groups.sql,
// 005_renew_lease.sql, 007_analytics.sql).

// isoMillis015 renders t as PostgreSQL's to_char(..., 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"').
func isoMillis015(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// configure015Options are the options configure passes on, in the order the
// route reads them back after the database answered; ints are integers,
// the others booleans.
var configure015Options = []struct {
	key   string
	isInt bool
	set   func(c *QueueConfig, v int, b bool)
}{
	{"priority", true, func(c *QueueConfig, v int, _ bool) { c.Priority = v }},
	{"leaseTime", true, func(c *QueueConfig, v int, _ bool) { c.LeaseTime = v }},
	{"retryLimit", true, func(c *QueueConfig, v int, _ bool) { c.RetryLimit = v }},
	{"retryDelay", true, func(c *QueueConfig, v int, _ bool) { c.RetryDelay = v }},
	{"maxSize", true, func(c *QueueConfig, v int, _ bool) { c.MaxSize = v }},
	{"ttl", true, func(c *QueueConfig, v int, _ bool) { c.TTL = v }},
	{"deadLetterQueue", false, func(c *QueueConfig, _ int, b bool) { c.DeadLetterQueue = b }},
	{"dlqAfterMaxRetries", false, func(c *QueueConfig, _ int, b bool) { c.DLQAfterMaxRetries = b }},
	{"delayedProcessing", true, func(c *QueueConfig, v int, _ bool) { c.DelayedProcessing = v }},
	{"windowBuffer", true, func(c *QueueConfig, v int, _ bool) { c.WindowBuffer = v }},
	{"retentionSeconds", true, func(c *QueueConfig, v int, _ bool) { c.RetentionSeconds = v }},
	{"completedRetentionSeconds", true, func(c *QueueConfig, v int, _ bool) { c.CompletedRetentionSeconds = v }},
	{"encryptionEnabled", false, func(c *QueueConfig, _ int, b bool) { c.EncryptionEnabled = b }},
	// Not read back by the route:
	{"retentionEnabled", false, func(c *QueueConfig, _ int, b bool) { c.RetentionEnabled = b }},
	{"maxWaitTimeSeconds", true, func(c *QueueConfig, v int, _ bool) { c.MaxWaitTimeSeconds = v }},
}

// readBack015 is how many of configure015Options the route reads back.
const readBack015 = 13

// handleConfigure015 is POST /api/v1/configure on the 0.15.1 profile:
// replace semantics. The queue (and its Default partition) is created or
// overwritten with the options given and the defaults for every other
// (lease 300 s, retryLimit 3, retryDelay 1000 ms, ttl 3600 s, no DLQ flag).
// 400 "queue is required" when queue is not a string. A value the database
// cannot cast (a fraction or a word for an integer) is a database error and
// changes nothing. When the request names no option at all (no namespace,
// no task, no known key in options), or an option is not of the JSON type
// the route reads back (a number as a string, a null), the queue is still
// configured but the answer is {"error":"[json.exception...]"}: 0.15.1's
// route fails after the database answered.
func (s *Server) handleConfigure015(w *recorder, req *request) {
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	name, ok := jsonString(body["queue"])
	if !ok {
		w.plainError(http.StatusBadRequest, "queue is required")
		return
	}
	named := 0
	ns, task := "", ""
	if v, ok := jsonString(body["namespace"]); ok {
		ns, named = v, named+1
	}
	if v, ok := jsonString(body["task"]); ok {
		task, named = v, named+1
	}
	var opts map[string]json.RawMessage
	if jsonKind(body["options"]) == "object" {
		_ = json.Unmarshal(body["options"], &opts)
	}
	cfg := defaultQueueConfig015()
	postErr := ""
	for i, o := range configure015Options {
		raw, present := opts[o.key]
		if !present {
			continue
		}
		named++
		kind := jsonKind(raw)
		text, notNull := sqlText(raw)
		if !notNull {
			if i < readBack015 && postErr == "" {
				postErr = "[json.exception.type_error.302] type must be " + map[bool]string{true: "number", false: "boolean"}[o.isInt] + ", but is null"
			}
			continue // NULL: the default
		}
		if o.isInt {
			v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 32)
			if err != nil {
				w.dbError("invalid input syntax for type integer: \"" + text + "\"")
				return
			}
			o.set(&cfg, int(v), false)
			if kind != "number" && i < readBack015 && postErr == "" {
				postErr = "[json.exception.type_error.302] type must be number, but is " + kind
			}
			continue
		}
		v, ok := pgBool(text)
		if !ok {
			w.dbError("invalid input syntax for type boolean: \"" + text + "\"")
			return
		}
		o.set(&cfg, 0, v)
		if kind != "bool" && i < readBack015 && postErr == "" {
			postErr = "[json.exception.type_error.302] type must be boolean, but is " + kind
		}
	}
	if tooLong015(name) || tooLong015(ns) || tooLong015(task) {
		w.dbError(errTooLong015)
		return
	}
	if named == 0 {
		postErr = "[json.exception.type_error.306] cannot use value() with null"
	}

	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	q := b.queueOf(name, cfg, now)
	q.cfg, q.namespace, q.task = cfg, ns, task
	def := b.partitionOf(q, "Default", now)
	b.bump()
	if postErr != "" {
		w.json(http.StatusOK, map[string]string{"error": postErr})
		return
	}
	w.json(http.StatusOK, map[string]any{
		"configured": true, "queueId": q.id, "partitionId": def.uuid, "queue": name,
		"namespace": ns, "task": task,
		"options": map[string]any{
			"priority": cfg.Priority, "leaseTime": cfg.LeaseTime, "retryLimit": cfg.RetryLimit,
			"retryDelay": cfg.RetryDelay, "maxSize": cfg.MaxSize, "ttl": cfg.TTL,
			"deadLetterQueue": cfg.DeadLetterQueue, "dlqAfterMaxRetries": cfg.DLQAfterMaxRetries,
			"delayedProcessing": cfg.DelayedProcessing, "windowBuffer": cfg.WindowBuffer,
			"retentionSeconds": cfg.RetentionSeconds, "completedRetentionSeconds": cfg.CompletedRetentionSeconds,
			"retentionEnabled": cfg.RetentionEnabled, "encryptionEnabled": cfg.EncryptionEnabled,
			"maxWaitTimeSeconds": cfg.MaxWaitTimeSeconds,
		},
	})
}

// pgBool reads a boolean as PostgreSQL casts text to one.
func pgBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "t", "true", "y", "yes", "on", "1":
		return true, true
	case "f", "false", "n", "no", "off", "0":
		return false, true
	}
	return false, false
}

// handleSeek015 is POST /api/v1/consumer-groups/{group}/queues/{queue}/seek
// on the 0.15.1 profile (seek_consumer_group_v1): body {"toEnd":true} or
// {"timestamp":"ISO"}, toEnd winning; neither is 400. Only the cursors the
// group already has on the queue move (an unknown group or queue updates
// nothing and succeeds): toEnd to the partition's last message; a timestamp
// to the last message created at or before it, or back to NULL (nothing
// consumed) when there is none. Any lease on a moved cursor is dropped; the
// retry budget stays.
func (s *Server) handleSeek015(w *recorder, req *request) {
	group, qname := req.params[0], req.params[1]
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	toEnd := false
	switch k := jsonKind(body["toEnd"]); k {
	case "", "null":
	case "bool":
		toEnd = strings.TrimSpace(string(body["toEnd"])) == "true"
	default:
		w.plainError(http.StatusInternalServerError, "[json.exception.type_error.302] type must be boolean, but is "+k)
		return
	}
	tsText := ""
	switch k := jsonKind(body["timestamp"]); k {
	case "", "null":
	case "string":
		tsText, _ = jsonString(body["timestamp"])
	default:
		w.plainError(http.StatusInternalServerError, "[json.exception.type_error.302] type must be string, but is "+k)
		return
	}
	if !toEnd && tsText == "" {
		w.plainError(http.StatusBadRequest, "Must specify either 'toEnd': true or 'timestamp'")
		return
	}
	var ts time.Time
	if !toEnd {
		var ok bool
		if ts, ok = parseTime(tsText); !ok {
			w.dbError("invalid input syntax for type timestamp with time zone: \"" + tsText + "\"")
			return
		}
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	if q := b.queues[qname]; q != nil {
		now := b.now()
		for _, p := range q.parts {
			c := p.cursors[group]
			if c == nil {
				continue
			}
			target := p.lastOffset()
			if toEnd {
				if target < 0 {
					continue
				}
			} else {
				target = p.lastAtOrBefore(ts)
			}
			c.committed, c.deletedBelow = target, false
			c.lastConsumedAt = now
			c.lease, c.batchSize, c.ackedCount = nil, 0, 0
			n++
		}
		b.bump()
	}
	var target any
	if !toEnd {
		target = isoMillis015(ts)
	}
	w.json(http.StatusOK, map[string]any{
		"success": true, "consumerGroup": group, "queueName": qname, "seekToEnd": toEnd,
		"targetTimestamp": target, "partitionsUpdated": n,
	})
}

// handleSeekPartition015 is POST .../queues/{queue}/partitions/{partition}/seek
// on the 0.15.1 profile (seek_partition_v1): the body is not read at all;
// the group's cursor on the partition, if it has one, moves to the last
// message. An unknown partition is {"success":false,"error":"Partition not found"}.
func (s *Server) handleSeekPartition015(w *recorder, req *request) {
	group, qname, pname := req.params[0], req.params[1], req.params[2]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var p *partition
	if q := b.queues[qname]; q != nil {
		p = q.byName[pname]
	}
	if p == nil {
		w.json(http.StatusOK, map[string]any{"success": false, "error": "Partition not found"})
		return
	}
	updated := false
	var moved any
	if last := p.lastOffset(); last >= 0 {
		moved = isoMillis015(p.msgs[last].createdAt)
		if c := p.cursors[group]; c != nil {
			c.committed, c.deletedBelow = last, false
			c.lastConsumedAt = b.now()
			c.lease, c.batchSize, c.ackedCount = nil, 0, 0
			updated = true
			b.bump()
		}
	}
	w.json(http.StatusOK, map[string]any{
		"success": true, "consumerGroup": group, "queueName": qname, "partitionName": pname,
		"updated": updated, "cursorMovedTo": moved,
	})
}

// handleRenew015 is POST /api/v1/lease/{leaseId}/extend on the 0.15.1
// profile (renew_lease_v2): a JSON body is required, {"seconds":N} with N
// defaulting to 60. Every live lease with that id gets max(expiry,
// now+N); the answer is an array of one {index, leaseId, success, error,
// expiresAt}, expiresAt the earliest renewed expiry. Failures: "Lease not
// found" (no cursor holds that id: never leased, or released), "Lease
// already expired".
func (s *Server) handleRenew015(w *recorder, req *request) {
	id := req.params[0]
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	if body == nil {
		w.plainError(http.StatusInternalServerError, "[json.exception.type_error.306] cannot use value() with "+jsonKind(req.body))
		return
	}
	secs := 60
	if raw, ok := body["seconds"]; ok {
		if jsonKind(raw) != "number" {
			w.plainError(http.StatusInternalServerError, "[json.exception.type_error.302] type must be number, but is "+jsonKind(raw))
			return
		}
		var f float64
		_ = json.Unmarshal(raw, &f)
		secs = int(f)
	}
	b := s.b
	b.mu.Lock()
	now := b.now()
	renewed, earliest := b.renew(id, secs, now)
	errMsg := ""
	if renewed == 0 {
		errMsg = "Lease not found"
		for _, p := range b.parts {
			for _, c := range p.cursors {
				if c.lease != nil && c.lease.id == id {
					errMsg = "Lease already expired"
				}
			}
		}
	}
	b.mu.Unlock()
	res := map[string]any{"index": 0, "leaseId": id, "success": renewed > 0, "error": nil, "expiresAt": nil}
	if renewed > 0 {
		res["expiresAt"] = isoMillis015(earliest)
	} else {
		res["error"] = errMsg
	}
	w.json(http.StatusOK, []any{res})
}

// handleDeleteQueue015 is DELETE /api/v1/resources/queues/{queue} on the
// 0.15.1 profile (delete_queue_v1): 200 {deleted:true, queue, existed}.
// The group's subscription rows survive, as on the real broker.
func (s *Server) handleDeleteQueue015(w *recorder, req *request) {
	name := req.params[0]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if q != nil {
		b.deleteQueue(q)
		b.bump()
	}
	w.json(http.StatusOK, map[string]any{"deleted": true, "queue": name, "existed": q != nil})
}

// handleHealth015 is GET /health on the 0.15.1 profile: a hard-coded
// version "1.0.0", a database field, no engine.
func (s *Server) handleHealth015(w *recorder, _ *request) {
	w.json(http.StatusOK, map[string]any{
		"status": "healthy", "database": "connected", "server": "C++ Queen Server (libqueen)",
		"worker_id": 1, "version": "1.0.0", "shared_state": map[string]any{"enabled": false},
		"queen": map[string]any{"worker_id": 1, "status": "active"},
	})
}

// handleDeleteGroup015 is DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]
// on the 0.15.1 profile (delete_consumer_group_v1, and its _for_queue_v1
// twin): the group's cursors on every queue (or on the one queue) go and,
// unless deleteMetadata is given as something other than "true" or "1"
// (absent means true; "false", "yes" or "TRUE" mean false), its
// subscription rows too. Always 200 {success:true, consumerGroup,
// deletedPartitions, metadataDeleted}, with queueName added by the queue
// form; an unknown group or queue deletes nothing (deletedPartitions 0).
// There is no queues list, and no queueName in the group-wide answer.
func (s *Server) handleDeleteGroup015(w *recorder, req *request) {
	group := req.params[0]
	only := ""
	if len(req.params) > 1 {
		only = req.params[1]
	}
	deleteMeta := true
	if v := req.query.Get("deleteMetadata"); v != "" {
		deleteMeta = v == "true" || v == "1"
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	count := 0
	for name, q := range b.queues {
		if only != "" && name != only {
			continue
		}
		for _, p := range q.parts {
			if p.cursors[group] != nil {
				delete(p.cursors, group)
				count++
			}
		}
	}
	if deleteMeta {
		for k := range b.groups {
			if k.group == group && (only == "" || k.queue == only) {
				delete(b.groups, k)
			}
		}
		for k := range b.subs {
			if k.group == group && (only == "" || k.queue == only) {
				delete(b.subs, k)
			}
		}
	}
	b.bump()
	out := map[string]any{"success": true, "consumerGroup": group, "deletedPartitions": count, "metadataDeleted": deleteMeta}
	if len(req.params) > 1 {
		out["queueName"] = only
	}
	w.json(http.StatusOK, out)
}
