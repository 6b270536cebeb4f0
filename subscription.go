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

// Which pops carry a group's start point (subscriptionMode,
// subscriptionFrom) depends on the broker's generation; the rules and the
// upstream facts behind them are in docs/ARCHITECTURE.md ("Broker 0.15.1",
// "A group's start across restarts"). In short: 2.x gets it on every pop,
// with a fixed time in place of "new" once a pinned pop of an unregistered
// group was answered (pinnedStart); 0.15.1 gets it only until the group is
// registered, except a start time. If the generation cannot be learnt the
// pop fails: no choice is safe on both. The memory lasts as long as the
// Client; DeleteConsumerGroup forgets the group.

// LegacyBatch is the batch a pop without Batch asks for on a broker that
// does not size pops (0.15.1 would hand out one message). A Batch set by
// the application is never changed.
const LegacyBatch = 100

// groupKey: a discovery pop's key has the namespace and task as queue.
type groupKey struct{ queue, group string }

// brokerMemory is what a Client learns of its broker from the answers.
type brokerMemory struct {
	mu          sync.Mutex
	groups      map[groupKey]groupState
	noAutopilot atomic.Bool                     // a pop asking for autopilot got messages and no echo
	gen         atomic.Pointer[wire.Generation] // nil until GET /health was asked
	starts      map[groupKey]*pinnedStart       // guarded by mu
	noDate      atomic.Bool                     // a pinned pop's answer had no Date (warned once)
}

// pinnedStart fixes the start of a group in mode "new" read through pinned
// pops on a broker that keeps such a start only in memory: the first
// answered pinned pop's Date less the time since the group's first pinned
// pop was sent, rounded down to the second (docs/ARCHITECTURE.md, "A
// group's start across restarts"; upstream rsm/consume/frames.rs
// seed_from_ts).
type pinnedStart struct {
	sent time.Time // when the group's first pinned pop was sent
	from string    // the fixed start time (RFC 3339), once known
	wide bool      // a queue-wide pop was answered first: the broker registered the group
}

// groupState is what a Client knows of a group on a 0.15.1 broker
// (wire.Generation.SubscriptionOnEveryPop); zero is "not asked yet".
type groupState struct {
	stage groupStage
	from  string // the start time of the first answered pop (groupTimed)
}

type groupStage uint8

const (
	groupUnknown    groupStage = iota
	groupNew                   // no position before this Client's first pop: the start point goes on pops
	groupTimed                 // a pop carrying a start time was answered: only pops with that time carry it
	groupRegistered            // its pops carry no start point
)

// generation returns the broker's generation, asking GET /health once per
// Client.
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

// sizesPops says whether the broker sizes a pop that asks for autopilot.
func (c *Client) sizesPops() bool {
	if c.mem.noAutopilot.Load() {
		return false
	}
	g := c.mem.gen.Load()
	return g == nil || g.Autopilot
}

// seekTime is the timestamp to send so that a seek reads everything stored
// at or after ts: one wire.SeekPrecision earlier on a broker that places
// the cursor on the last message at or before the time (0.15.1).
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

// set records st for k unless k's stage is already as far along.
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

// startsNew: subscriptionFrom=now (which wins over the mode), or mode
// "new" without a time.
func (r *popRequest) startsNew() bool {
	if r.query.SubscriptionFrom != "" {
		return strings.EqualFold(r.query.SubscriptionFrom, "now")
	}
	return strings.EqualFold(r.query.SubscriptionMode, string(SubscriptionModeNew))
}

// pinnedKey is r's group key when its start needs a fixed time
// (pinnedStart); discovery pops never do.
func (c *Client) pinnedKey(r *popRequest) (groupKey, bool) {
	g := c.mem.gen.Load()
	if g == nil || !g.PinnedStartInMemory || r.discover || !r.startsNew() {
		return groupKey{}, false
	}
	return r.key()
}

// startFrom is the fixed time r's pop carries instead of "new", or "".
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

// pinnedSent starts pinnedStart's clock at the group's first pinned pop.
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

// startAnswered: a pinned pop's Date fixes the time; a queue-wide pop
// answered first leaves the group to its registration.
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
		// Otherwise the group was registered as "new" after a pinned pop
		// was sent: that pop's answer still fixes the time.
	case st != nil:
		st.from = fixedStart(res.date, time.Since(st.sent))
	}
}

// fixedStart is date less elapsed, rounded down to the second (RFC 3339).
func fixedStart(date time.Time, elapsed time.Duration) string {
	return date.Add(-max(elapsed, 0)).Truncate(time.Second).UTC().Format(time.RFC3339)
}

// key is r's group key; false for queue mode.
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
// point. The first time it asks the generation and, on 0.15.1, whether the
// group exists on the queue; an error of either is the pop's error.
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
	}
	g, err := c.generation(ctx)
	if err != nil {
		return false, fmt.Errorf("queen: consumer group %q of %s: whether its start point goes on this pop depends on the broker's generation: %w",
			k.group, r.scope(), err)
	}
	if !g.SubscriptionOnEveryPop || r.discover { // 0.15.1 has no discovery route
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

// startTime: r's start point is a fixed time (SubscriptionFrom but "now").
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
			return false, resp.unreadable(http.MethodGet, path, "undecodable consumer-group answer: "+err.Error())
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

func (r *popRequest) hasSubscription() bool {
	return r.query.SubscriptionMode != "" || r.query.SubscriptionFrom != ""
}

// popQuery encodes one pop of r: with or without the start point (a fixed
// time in place of "new" once there is one), with LegacyBatch on a broker
// that does not size pops, capped to n messages when n > 0 (a Limit's
// rest). Uncapped queries are cached per variant.
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

// encodedQuery is a cached pop query and the fixed start time it carries.
type encodedQuery struct{ from, query string }

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

func (r *popRequest) autopilotBatch() bool { return r.query.Autopilot && r.query.Batch == nil }

// values encodes r's query (see popQuery).
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
		// With both sizes set no autopilot flag travels (PROTOCOL.md 3.3).
		q.Autopilot = q.Partitions == nil
	}
	if n > 0 {
		switch {
		case q.Batch != nil && *q.Batch <= n:
		case q.Batch == nil && n >= autopilotMaxBatch:
		default:
			if q.Batch == nil {
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

// popAnswered records what a pop's answer tells of the broker: on 0.15.1
// that the group is registered (groupTimed for a start time), and whether
// it sizes pops. It warns of a claim without messages to a pop that sent a
// start point other than "all": a 0.15.1 broker that moved the group's
// cursor past them (PROTOCOL.md §16).
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
