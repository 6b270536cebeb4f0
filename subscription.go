package queen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Where a consumer group starts (SubscriptionMode, SubscriptionFrom) is
// the start point its pops carry (subscriptionMode, subscriptionFrom).
// Which pops carry it depends on the broker's generation (wire.Generation),
// which a Client asks once (GET /health) before the first pop of a group
// that names one. If that question fails, the pop fails with its error and
// nothing is popped: leaving the start point out skips messages on 2.x,
// and sending it again can skip messages on 0.15.1, so there is no choice
// that is safe on both without knowing.
//
//   - 2.x: every pop of the group carries it. The broker registers a group
//     on its first queue-wide (or discovery) pop only, and from then on the
//     stored policy wins over what any pop carries, on every route. A
//     pinned pop (Partition) of a group that is not registered registers
//     nothing: it starts its partition, if the group has no cursor there
//     yet, where the start point it carries says, and a pop that carries
//     none gets the broker's default, "new". A group read partition by
//     partition, or registered by a queue-wide pop after pinned ones, would
//     otherwise skip the backlog of every partition but the first. The
//     broker's group view (GET /api/v1/consumer-groups/{group}) lists the
//     group's cursors, those of pinned pops of a group that is not
//     registered included, so it cannot say whether a group is registered;
//     it is not asked.
//     A pinned pop in mode "new" (or subscriptionFrom=now) of a group that
//     is not registered starts its partition at the tail and the broker
//     keeps that start only in memory (wire.Generation.PinnedStartInMemory):
//     it is taken again at the tail, skipping what was pushed meanwhile,
//     when the partition did not exist yet, after a broker restart or
//     leader change, and when a queue-wide pop registers the group. So once
//     a pinned pop of such a group is answered, every later pop of the
//     group (pinned or queue-wide) carries a fixed start time instead:
//     the broker's clock when the group's first pinned pop was sent (see
//     pinnedStart). A group whose first answered pop was queue-wide is
//     registered by the broker, durably: its pops are left as they are.
//   - 0.15.1 (wire.Generation.SubscriptionOnEveryPop): the broker applies a
//     pop's start point wherever the group's cursor is at a partition's
//     start and no stored start time covers that partition, and "new" (or
//     "now") means the time of that pop: sent again, it moves a cursor that
//     is back at a partition's start (after a failed or retried first
//     message, a lease expiry, a seek back in time) to the end of the
//     partition, and every message before it is skipped (PROTOCOL.md §16).
//     So before a (queue, group)'s first pop the Client asks the broker
//     whether the group has a position on the queue; if it has, the start
//     point is never sent. Otherwise it goes on pops until one is answered,
//     and then on none, except a start time: the broker stores a time with
//     the partition a pinned pop claimed, or with the queue when a
//     queue-wide pop claims a partition at its start, and a partition no
//     stored time covers would start at its first message. A time is the
//     same whichever pop carries it (and a stored one wins over it), so
//     once a pop that carried one was answered, the pops that carry that
//     same time go on carrying it, and the others carry none. ("all" is
//     that broker's default.)
//
// The memory lasts as long as the Client; a group deleted through
// Admin.DeleteConsumerGroup is forgotten, so that its next pop registers it
// anew.

// LegacyBatch is the batch the client asks for on a broker that does not
// size pops itself (a broker older than autopilot, such as 0.15.1, hands out
// one message per pop when no batch is sent: wire.Generation.Autopilot and
// DefaultPopBatch). It applies only when the
// application set no Batch: a Batch set by the application is never changed.
const LegacyBatch = 100

// groupKey names a consumer group on a queue; a discovery pop's key has
// the namespace and task in place of the queue.
type groupKey struct{ queue, group string }

// brokerMemory is what a Client learns about its broker from the answers:
// where its groups stand (groupState), whether the broker sizes pops, and
// its generation (wire.Generation, the one place that says what each
// generation does).
type brokerMemory struct {
	mu     sync.Mutex
	groups map[groupKey]groupState
	// noAutopilot is set once a pop that asked the broker to size it was
	// answered with messages and no autopilot echo.
	noAutopilot atomic.Bool
	// gen is what GET /health said of the broker; nil until asked.
	gen atomic.Pointer[wire.Generation]
	// starts are the fixed start times of groups read through pinned
	// pops, on a broker that keeps their start in memory (guarded by mu).
	starts map[groupKey]*pinnedStart
	// noDate is set once a pinned pop's answer came without a Date.
	noDate atomic.Bool
}

// pinnedStart is the start of a group, in mode "new", that a Client reads
// through pinned pops of a broker that keeps such a start only in memory
// (wire.Generation.PinnedStartInMemory). from is fixed by the first
// answered pinned pop: its Date (the broker's clock, in whole seconds,
// rounded down) less the time since the group's first pinned pop was sent
// (this Client's clock), rounded down to the second. That is no later
// than the moment the broker started any partition for the group (its
// pops start the partition when they arrive, a long poll at the start of
// its wait), and the broker starts a group at a time with the first
// message created at or after it (rsm/consume/frames.rs seed_from_ts), so
// nothing pushed after the group's first pop is skipped; up to a second,
// plus that pop's round trip and wait, of what was pushed before it may
// be read.
type pinnedStart struct {
	sent time.Time // when the group's first pinned pop was sent
	from string    // the fixed start time (RFC 3339), once known
	// wide: a queue-wide pop of the group was answered before a time was
	// fixed; the broker registered the group, and nothing is fixed.
	wide bool
}

// groupState is what a Client knows of a group on a queue of a broker that
// applies start points on every pop (wire.Generation.SubscriptionOnEveryPop);
// the zero value is "not asked yet".
type groupState struct {
	stage groupStage
	// from is the start time of the first answered pop (stage groupTimed).
	from string
}

type groupStage uint8

const (
	groupUnknown groupStage = iota
	// groupNew: the broker had no position of the group on the queue
	// before this Client's first pop of it; the start point goes on pops
	// (see withSubscription).
	groupNew
	// groupTimed: a pop that carried a start time (from) was answered;
	// the pops that carry that same time go on carrying it, the others
	// carry none.
	groupTimed
	// groupRegistered: the group is registered; its pops carry no start
	// point.
	groupRegistered
)

// generation returns the broker's generation (wire.GenerationOf its
// /health answer). It asks once per Client.
func (c *Client) generation(ctx context.Context) (*wire.Generation, error) {
	if g := c.mem.gen.Load(); g != nil {
		return g, nil
	}
	h, err := c.Admin().Health(ctx)
	if err != nil {
		return nil, fmt.Errorf("queen: ask the broker's generation (GET /health): %w", err)
	}
	g := wire.GenerationOf(wire.HealthResponse{Engine: h.Engine})
	c.mem.gen.Store(&g)
	return &g, nil
}

// sizesPops says whether the broker sizes a pop that asks for autopilot:
// not once an answer came without the echo, nor when its generation is
// known not to (wire.Generation.Autopilot).
func (c *Client) sizesPops() bool {
	if c.mem.noAutopilot.Load() {
		return false
	}
	g := c.mem.gen.Load()
	return g == nil || g.Autopilot
}

// seekTime is the timestamp to send for a seek that must read everything
// stored at or after ts (an RFC 3339 time, validated by the caller). On a
// generation that places the cursor on the last message at or before the
// time (wire.Generation.SeekAtOrBefore), messages stored at exactly that
// time would be skipped: there the time sent is one tick of the broker's
// precision (wire.SeekPrecision) earlier.
func seekTime(g *wire.Generation, ts string) string {
	if !g.SeekAtOrBefore {
		return ts
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts // seekBody validated it; nothing to adjust
	}
	us := t.Truncate(wire.SeekPrecision)
	if us.Before(t) {
		us = us.Add(wire.SeekPrecision) // the first instant a message can have at or after t
	}
	return us.Add(-wire.SeekPrecision).UTC().Format(time.RFC3339Nano)
}

func (m *brokerMemory) state(k groupKey) groupState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.groups[k]
}

// set records st for k, unless what is known already is as far along: a
// group once registered stays so, and the first start time stays.
func (m *brokerMemory) set(k groupKey, st groupState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups == nil {
		m.groups = make(map[groupKey]groupState)
	}
	if m.groups[k].stage < st.stage {
		m.groups[k] = st
	}
}

// forget drops what is known of group: on queue, or on every queue when
// queue is "".
func (m *brokerMemory) forget(group, queue string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.groups {
		if k.group == group && (queue == "" || k.queue == queue) {
			delete(m.groups, k)
		}
	}
	for k := range m.starts {
		if k.group == group && (queue == "" || k.queue == queue) {
			delete(m.starts, k)
		}
	}
}

// startsNew says whether r's start point is "new": subscriptionFrom=now
// (which wins over the mode), or mode "new" without a time.
func (r *popRequest) startsNew() bool {
	if r.query.SubscriptionFrom != "" {
		return strings.EqualFold(r.query.SubscriptionFrom, "now")
	}
	return strings.EqualFold(r.query.SubscriptionMode, string(SubscriptionModeNew))
}

// pinnedKey is the key of r's group when its start needs a fixed time (see
// pinnedStart): a named group in mode "new" on a queue of a broker that
// keeps the start of pinned pops in memory. Discovery pops are left out.
func (c *Client) pinnedKey(r *popRequest) (groupKey, bool) {
	g := c.mem.gen.Load()
	if g == nil || !g.PinnedStartInMemory || r.discover || !r.startsNew() {
		return groupKey{}, false
	}
	return r.key()
}

// startFrom is the fixed start time r's pop carries instead of "new", or
// "" while there is none.
func (c *Client) startFrom(r *popRequest) string {
	k, ok := c.pinnedKey(r)
	if !ok {
		return ""
	}
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	if st := c.mem.starts[k]; st != nil {
		return st.from
	}
	return ""
}

// pinnedSent notes that a pinned pop of r's group is being sent: the first
// one starts the clock of pinnedStart.
func (c *Client) pinnedSent(r *popRequest) {
	k, ok := c.pinnedKey(r)
	if !ok || !r.pinned {
		return
	}
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	if c.mem.starts == nil {
		c.mem.starts = make(map[groupKey]*pinnedStart)
	}
	if c.mem.starts[k] == nil {
		c.mem.starts[k] = &pinnedStart{sent: time.Now()}
	}
}

// startAnswered records what an answered pop of r tells of its group's
// start (see pinnedStart): a pinned pop's Date fixes the time, a
// queue-wide pop answered first leaves the group to its registration.
func (c *Client) startAnswered(r *popRequest, res *popResult) {
	k, ok := c.pinnedKey(r)
	if !ok {
		return
	}
	if r.pinned && res.date.IsZero() {
		if c.mem.noDate.CompareAndSwap(false, true) {
			c.log.Warn("queen: the broker's pop answer has no Date header; a group read through pinned pops in mode new keeps its start only in the broker's memory (lost at a restart)",
				"queue", r.queue, "group", r.query.ConsumerGroup)
		}
		return
	}
	c.mem.mu.Lock()
	defer c.mem.mu.Unlock()
	if c.mem.starts == nil {
		c.mem.starts = make(map[groupKey]*pinnedStart)
	}
	st := c.mem.starts[k]
	switch {
	case st != nil && (st.from != "" || st.wide):
	case !r.pinned:
		if st == nil {
			c.mem.starts[k] = &pinnedStart{wide: true}
		}
		// A queue-wide pop answered after a pinned one was sent and
		// before any was answered registered the group as "new": the
		// first answered pinned pop still fixes the time for the
		// partitions started from then on.
	case st != nil:
		st.from = fixedStart(res.date, time.Since(st.sent))
	}
}

// fixedStart is the start time of pinnedStart: date less elapsed, rounded
// down to the second, in RFC 3339.
func fixedStart(date time.Time, elapsed time.Duration) string {
	return date.Add(-max(elapsed, 0)).Truncate(time.Second).UTC().Format(time.RFC3339)
}

// key is the registration key of r's group, and false for queue mode
// (which has no start point to choose).
func (r *popRequest) key() (groupKey, bool) {
	if r.query.ConsumerGroup == "" {
		return groupKey{}, false
	}
	q := r.queue
	if r.discover {
		q = "\x00" + r.query.Namespace + "\x00" + r.query.Task
	}
	return groupKey{queue: q, group: r.query.ConsumerGroup}, true
}

// withSubscription says whether r's next pop carries the group's start
// point (see the rules at the top of this file). The first time, it asks
// the broker's generation and, on a generation that applies start points
// on every pop, whether the group exists on the queue; an error of either
// question is the pop's error, since popping without knowing could skip
// messages.
func (c *Client) withSubscription(ctx context.Context, r *popRequest) (bool, error) {
	k, ok := r.key()
	if !ok || !r.hasSubscription() {
		return false, nil
	}
	switch st := c.mem.state(k); st.stage {
	case groupRegistered:
		return false, nil
	case groupTimed:
		return r.startTime() && r.query.SubscriptionFrom == st.from, nil
	case groupNew:
		return true, nil
	case groupUnknown:
		// The first pop of the group by this Client: ask below.
	}
	g, err := c.generation(ctx)
	if err != nil {
		return false, fmt.Errorf("queen: consumer group %q of %s: whether its start point goes on this pop depends on the broker's generation: %w",
			k.group, r.scope(), err)
	}
	if !g.SubscriptionOnEveryPop || r.discover {
		// 2.x: the start point goes on every pop. (A discovery pop spans
		// queues that are not known in advance; 0.15.1 has no such route.)
		c.pinnedSent(r)
		return true, nil
	}
	exists, err := c.groupOnQueue(ctx, k.group, k.queue)
	if err != nil {
		return false, fmt.Errorf("queen: look up consumer group %q on queue %q before its first pop (its start point must reach the broker only when it registers): %w",
			k.group, k.queue, err)
	}
	if exists {
		c.mem.set(k, groupState{stage: groupRegistered})
		return false, nil
	}
	c.mem.set(k, groupState{stage: groupNew})
	return true, nil
}

// scope names what r pops from, for errors.
func (r *popRequest) scope() string {
	if r.discover {
		return fmt.Sprintf("namespace %q task %q", r.query.Namespace, r.query.Task)
	}
	return fmt.Sprintf("queue %q", r.queue)
}

// startTime says whether r's start point is a fixed time (SubscriptionFrom
// other than "now"), which a 0.15.1 broker applies alike whichever pop
// carries it.
func (r *popRequest) startTime() bool {
	return r.query.SubscriptionFrom != "" && !strings.EqualFold(r.query.SubscriptionFrom, "now")
}

// groupOnQueue asks the broker whether group has a position on queue. A
// 404, or an answer without the queue, means it has none; 0.15.1 answers a
// group it does not know with 200 and null.
func (c *Client) groupOnQueue(ctx context.Context, group, queue string) (bool, error) {
	path := wire.RouteGroup.Path(group)
	resp, err := c.do(ctx, call{method: http.MethodGet, path: path})
	if err != nil {
		var be *BrokerError
		if errors.As(err, &be) && be.Status == http.StatusNotFound {
			return false, nil
		}
		return false, err
	}
	var queues map[string]json.RawMessage
	if len(resp.body) > 0 {
		if err := json.Unmarshal(resp.body, &queues); err != nil {
			// An error object of a 0.15.1 broker, or something else: not
			// an answer to the question.
			return false, &BrokerError{Status: resp.status, Method: http.MethodGet, Path: path,
				Body: resp.body, Message: "undecodable consumer-group answer: " + err.Error()}
		}
	}
	if msg, ok := queues["error"]; ok && len(queues) == 1 {
		var s string
		_ = json.Unmarshal(msg, &s)
		return false, &BrokerError{Status: resp.status, Method: http.MethodGet, Path: path,
			Body: resp.body, Message: s}
	}
	_, ok := queues[queue]
	return ok, nil
}

// hasSubscription says whether r's query carries a start point.
func (r *popRequest) hasSubscription() bool {
	return r.query.SubscriptionMode != "" || r.query.SubscriptionFrom != ""
}

// popQuery encodes the query of one pop of r: with or without the group's
// start point (a fixed start time in place of "new" once the group has one,
// see pinnedStart), with an explicit batch on a broker that does not size
// pops, and capped to n messages when n > 0 (the rest of a Limit).
func (c *Client) popQuery(r *popRequest, withSub bool, n int, nowait bool) (string, error) {
	legacy := !c.sizesPops() && r.autopilotBatch()
	if n > 0 && !r.capChanges(legacy, n) {
		n = 0 // the cap changes nothing: the query encoded once will do
	}
	nowait = nowait && r.wait
	from := ""
	if withSub {
		from = c.startFrom(r)
	}
	if n > 0 {
		return r.values(withSub, legacy, n, nowait, from)
	}
	i := 0
	if withSub {
		i |= 1
	}
	if legacy {
		i |= 2
	}
	if nowait {
		i |= 4
	}
	if from != "" {
		i |= 8
	}
	if e := r.encoded[i].Load(); e != nil && e.from == from {
		return e.query, nil
	}
	q, err := r.values(withSub, legacy, 0, nowait, from)
	if err != nil {
		return "", err
	}
	r.encoded[i].Store(&encodedQuery{from: from, query: q})
	return q, nil
}

// encodedQuery is a pop query encoded once, with the fixed start time it
// carries ("" for none): a group forgotten and read again gets a new one.
type encodedQuery struct{ from, query string }

// capChanges says whether capping r's batch to n changes its query.
func (r *popRequest) capChanges(legacy bool, n int) bool {
	switch b := r.query.Batch; {
	case b != nil:
		return *b > n
	case legacy:
		return LegacyBatch > n
	default:
		return n < autopilotMaxBatch
	}
}

// autopilotBatch says whether r leaves its batch to the broker.
func (r *popRequest) autopilotBatch() bool { return r.query.Autopilot && r.query.Batch == nil }

// values encodes r's query (see popQuery); from, when set, is the start
// time sent in place of r's "new".
func (r *popRequest) values(withSub, legacy bool, n int, nowait bool, from string) (string, error) {
	q := r.query
	switch {
	case !withSub:
		q.SubscriptionMode, q.SubscriptionFrom = "", ""
	case from != "":
		q.SubscriptionMode, q.SubscriptionFrom = "", from
	}
	if nowait {
		no := false
		q.Wait, q.Timeout = &no, nil
	}
	if legacy && q.Autopilot && q.Batch == nil {
		b := LegacyBatch
		q.Batch = &b
		// The broker ignores autopilot; with both sizes set none travels
		// (PROTOCOL.md 3.3), else the partitions stay left to it.
		q.Autopilot = q.Partitions == nil
	}
	if n > 0 {
		switch {
		case q.Batch != nil && *q.Batch <= n:
		case q.Batch == nil && n >= autopilotMaxBatch:
		default:
			if q.Batch == nil {
				// The batch becomes a pin; autopilot still sizes the
				// partitions if they are not set.
				q.Autopilot = q.Autopilot && q.Partitions == nil
			}
			q.Batch = &n
		}
	}
	vals, err := q.Values()
	if err != nil {
		return "", fmt.Errorf("queen: encode pop query: %w", err)
	}
	return vals.Encode(), nil
}

// popAnswered records what a pop's answer tells about the broker: on a
// generation that applies start points on every pop, that the group is
// registered (unless its start point is a time: see the top of this file),
// and whether the broker sizes pops. It warns of a
// claim answered without messages to a pop that sent a start point other
// than "all", the mark of a 0.15.1 broker that moved the group's cursor
// (PROTOCOL.md §16). A 0.15.1 broker also claims, with no messages, a
// pinned partition that has nothing left to read (queue mode or a group,
// with or without a start point): that is not warned of unless the pop
// sent such a start point, since only those move a cursor.
func (c *Client) popAnswered(r *popRequest, withSub bool, res *popResult) {
	if withSub {
		c.startAnswered(r, res)
	}
	g := c.mem.gen.Load()
	everyPop := g != nil && g.SubscriptionOnEveryPop
	if k, ok := r.key(); ok && withSub && everyPop {
		st := groupState{stage: groupRegistered}
		if r.startTime() {
			st = groupState{stage: groupTimed, from: r.query.SubscriptionFrom}
		}
		c.mem.set(k, st)
	}
	if len(res.messages) > 0 && res.autopilot == nil && r.query.Autopilot && !r.pinned &&
		!r.query.Conflation && c.sizesPops() {
		if c.mem.noAutopilot.CompareAndSwap(false, true) {
			c.log.Info("queen: the broker does not size pops (no autopilot echo); pops without a Batch now ask for a fixed one",
				"batch", LegacyBatch, "path", r.path)
		}
	}
	if everyPop && // a 0.15.1 broker's mark only
		len(res.messages) == 0 && res.leaseID != "" && withSub && r.hasSubscription() && r.query.SubscriptionMode != string(SubscriptionModeAll) {
		c.log.Warn("queen: the broker claimed a partition and answered no messages; on a 0.15.1 broker this means it moved the group's cursor past them",
			"queue", r.queue, "group", r.query.ConsumerGroup, "partition", res.partition, "leaseId", res.leaseID)
	}
}
