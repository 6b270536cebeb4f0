package queentest

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// The whole broker state lives here, behind one mutex: queues with their
// configuration, partitions as ordered logs, one cursor per (partition,
// consumer group) with its lease, consumer-group registrations and the
// dead-letter queue. Route files (push.go, pop.go, ack.go, ...) read and
// change it only while holding broker.mu, so every request is applied
// atomically and concurrent clients are safe.

const queueModeGroup = wire.QueueModeGroup

// groupOrQueueMode is the cursor key of a consumer group as sent: "" means
// queue mode.
func groupOrQueueMode(group string) string {
	if group == "" {
		return queueModeGroup
	}
	return group
}

// nameBudget is the 2.x broker's bound on queue + max(group, partition)
// bytes (511-byte store key minus 64 bytes of overhead); past it the broker
// answers 413 name_too_long.
const nameBudget = 511 - 64

type broker struct {
	mu       sync.Mutex
	clock    Clock
	defaults QueueConfig

	queues  map[string]*queue
	parts   map[int64]*partition // by partition id (the wire partitionId)
	nextPID int64
	groups  map[groupKey]*groupMeta
	dlq     map[string]*dlqRow
	dlqSeq  int64
	msgSeq  int64 // every stored message gets the next number
	// recent is how many of a group's last consumed messages a repeated
	// ack still recognises (recentlyConsumed).
	recent int64
	// entryMax bounds the planned size of one (queue, partition) group of
	// a 2.x push or transaction (WithEntryMaxBytes).
	entryMax int

	// changed is closed and replaced on every state change (and when a
	// FakeClock moves): parked long polls wait on it.
	changed chan struct{}
	applied uint64

	// pushed is closed and replaced when a push stores messages, and
	// pushes counts them per queue: the 0.15.1 profile's parked pops wake
	// on a push to their queue only (pop_015.go).
	pushed chan struct{}
	pushes map[string]uint64

	ap autopilot

	// legacy is the 0.15.1 profile (Broker015): partitions are named by
	// UUIDs and subscriptions live in subs rather than groups.
	legacy bool
	// partsByUUID finds a partition by its 0.15.1 id.
	partsByUUID map[string]*partition
	// subs are 0.15.1's consumer_groups_metadata rows, by (queue, group,
	// partition name or "" for the whole queue). Deleting a queue keeps
	// them, as 0.15.1 does.
	subs map[subKey]*groupMeta
}

// subKey is the key of a 0.15.1 subscription row.
type subKey struct{ queue, group, partition string }

type groupKey struct{ queue, group string }

type queue struct {
	name      string
	id        string
	namespace string
	task      string
	cfg       QueueConfig
	createdAt time.Time
	parts     []*partition // creation order
	byName    map[string]*partition
}

type partition struct {
	id        int64
	uuid      string // the 0.15.1 partition id
	name      string
	q         *queue
	createdAt time.Time
	lastWrite time.Time          // the newest message's creation; a delete leaves it (0.15.1 partition_lookup)
	msgs      []*message         // offset = index (0.15.1: a deleted message leaves, removeMessage015)
	byTxn     map[string][]int64 // transactionId -> the offsets stored under it, ascending
	cursors   map[string]*cursor
}

type message struct {
	id        string
	txn       string
	traceID   *string
	payload   json.RawMessage
	createdAt time.Time
	offset    int64
	seq       int64 // broker-wide push order
	// row is the place of the message's row in 0.15.1's messages table
	// (broker-wide, ascending): a 0.15.1 push stores its rows by partition
	// id, then transaction id (storeRows015); otherwise it is seq.
	row int64
}

// cursor is one consumer group's position on one partition. On the 0.15.1
// profile, committed -1 is the NULL cursor of a group that consumed nothing
// there, and batchSize / ackedCount are partition_consumers' columns.
type cursor struct {
	committed  int64 // last consumed offset; -1 before the first
	batchSize  int   // 0.15.1: the claim's size, for the release on the last ack
	ackedCount int   // 0.15.1: completed acks counted against batchSize
	lease      *lease
	batchRetry int // retries spent by the batch at the cursor
	// attemptOff is the first offset of the last leased claim (-1: none)
	// and attemptCount its deliveryAttempt: a claim starting there again
	// is a redelivery (2.x rsm/consume/pop.rs claim_one).
	attemptOff     int64
	attemptCount   int
	released       *releasedLease
	totalConsumed  int64
	lastConsumedAt time.Time
	// deletedBelow: a 0.15.1 cursor at -1 whose last consumed message was
	// deleted (DELETE /api/v1/messages/...). PostgreSQL's cursor still names
	// that message, so it is not the NULL cursor of a group that consumed
	// nothing (null015).
	deletedBelow bool
	// row: the 2.x broker keeps a cursor row for it, written when the
	// group first had something delivered, acked or sought here (or by a
	// conflating pinned registration, on every partition). A cursor without
	// one is only the start the broker would give the partition: acks find
	// no cursor there, the views do not list it, and a restart forgets it
	// (rsm/consume/state.rs Part::has_row, rsm/consume/ack.rs ack_target).
	// A pinned pop of an unregistered group seeds one from its own
	// subscription; the group's registration seeds it again by the group's
	// policy (rsm/consume/load.rs register).
	row bool
}

type lease struct {
	id        string
	acquired  time.Time
	expires   time.Time
	end       int64   // last leased offset (the batch end)
	delivered []int64 // offsets handed out under this lease
	conflated bool
	// foreign: granted before the last Restart. The 2.x engine reloads a
	// lease from its cursor row as granted before its term (another
	// clock's) and holds it restartLeaseGrace past its expiry
	// (rsm/consume/state.rs Cur::from_row, Cur::leased).
	foreign bool
	// the cursor's attempt marker before this claim, put back when the
	// claim is given back unanswered
	prevAttemptOff   int64
	prevAttemptCount int
}

// releasedLease remembers the batch the last settling ack released, so that
// an identical repeat of that ack is answered as the first time (2.x
// repeat_of_released).
type releasedLease struct {
	id     string
	lo, hi int64
}

// groupMeta is a named consumer group's registration on a queue, fixed at
// its first pop.
type groupMeta struct {
	mode         string // "new", "all" or "timestamp"
	subTS        time.Time
	registeredAt time.Time
	regSeq       int64 // the last message stored when the group registered
	conflation   bool
}

type dlqRow struct {
	id         string
	seq        int64
	queue      string
	pid        int64
	wireID     string // the partitionId as the profile writes it
	partition  string
	group      string
	offset     int64
	messageID  string
	txn        string
	payload    json.RawMessage
	errMsg     string
	retryCount int
	failedAt   time.Time
	row        int64 // the message's row (message.row)
}

func newBroker(clock Clock, defaults QueueConfig, legacy bool) *broker {
	return &broker{
		legacy:      legacy,
		partsByUUID: map[string]*partition{},
		subs:        map[subKey]*groupMeta{},
		clock:       clock,
		defaults:    defaults,
		queues:      map[string]*queue{},
		parts:       map[int64]*partition{},
		groups:      map[groupKey]*groupMeta{},
		dlq:         map[string]*dlqRow{},
		changed:     make(chan struct{}),
		recent:      recentlyConsumed,
		entryMax:    defaultEntryMaxBytes,
		ap:          newAutopilot(),
		pushed:      make(chan struct{}),
		pushes:      map[string]uint64{},
	}
}

// pushedTo records a push of messages to queue and wakes the parked 0.15.1
// pops. Callers hold mu.
func (b *broker) pushedTo(queue string) {
	b.pushes[queue]++
	close(b.pushed)
	b.pushed = make(chan struct{})
}

// bump records a state change and wakes every parked waiter. Callers hold mu.
func (b *broker) bump() {
	close(b.changed)
	b.changed = make(chan struct{})
	b.applied++
}

// wake is bump for callers that do not hold mu (a FakeClock move).
func (b *broker) wake() {
	b.mu.Lock()
	b.bump()
	b.mu.Unlock()
}

// now is the broker's time. 0.15.1 keeps PostgreSQL's microseconds: a
// message's createdAt is exactly what its pop shows, and every message of
// one request shares it (the transaction's NOW()).
func (b *broker) now() time.Time {
	if b.legacy {
		return b.clock.Now().Truncate(time.Microsecond)
	}
	return b.clock.Now()
}

// queueOf returns the queue named name, creating it with cfg when it does
// not exist.
func (b *broker) queueOf(name string, cfg QueueConfig, now time.Time) *queue {
	q := b.queues[name]
	if q == nil {
		q = &queue{name: name, id: newUUID(), cfg: cfg, createdAt: now, byName: map[string]*partition{}}
		b.queues[name] = q
	}
	return q
}

func (b *broker) implicitConfig() QueueConfig {
	c := b.defaults
	if c.LeaseTime <= 0 {
		c.LeaseTime = 60
	}
	return c
}

// partitionOf returns q's partition named name, creating it when it does
// not exist.
func (b *broker) partitionOf(q *queue, name string, now time.Time) *partition {
	p := q.byName[name]
	if p == nil {
		b.nextPID++
		p = &partition{
			id: b.nextPID, uuid: newUUID4(), name: name, q: q, createdAt: now,
			byTxn: map[string][]int64{}, cursors: map[string]*cursor{},
		}
		q.byName[name] = p
		q.parts = append(q.parts, p)
		b.parts[p.id] = p
		b.partsByUUID[p.uuid] = p
	}
	return p
}

func (b *broker) deleteQueue(q *queue) {
	for _, p := range q.parts {
		delete(b.parts, p.id)
		delete(b.partsByUUID, p.uuid)
	}
	delete(b.queues, q.name)
	for k := range b.groups {
		if k.queue == q.name {
			delete(b.groups, k)
		}
	}
	for id, r := range b.dlq {
		if r.queue == q.name {
			delete(b.dlq, id)
		}
	}
}

func (p *partition) pid() string { return strconv.FormatInt(p.id, 10) }

// wireID is p's partitionId as the served profile writes it: the decimal
// pid on 2.x, a UUID on 0.15.1.
func (b *broker) wireID(p *partition) string {
	if b.legacy {
		return p.uuid
	}
	return p.pid()
}

func (p *partition) lastOffset() int64 { return int64(len(p.msgs)) - 1 }

// firstOffset is the offset of the first message stored under txn. (On
// 0.15.1 there is never more than one; on 2.x a transactionId is stored
// again once its dedup window has passed.)
func (p *partition) firstOffset(txn string) (int64, bool) {
	if offs := p.byTxn[txn]; len(offs) > 0 {
		return offs[0], true
	}
	return 0, false
}

// visible reports whether m can be delivered at now (delayedProcessing).
func (p *partition) visible(m *message, now time.Time) bool {
	d := p.q.cfg.DelayedProcessing
	return d <= 0 || !m.createdAt.Add(time.Duration(d)*time.Second).After(now)
}

// windowHeld reports whether the queue's windowBuffer holds p at now: its
// newest message was written less than windowBuffer seconds ago, so no
// pop claims it until then (2.x rsm/consume/pop.rs claim_one, a burst is
// one batch). at is when the hold ends.
func (p *partition) windowHeld(now time.Time) (at time.Time, held bool) {
	w := p.q.cfg.WindowBuffer
	if w <= 0 || len(p.msgs) == 0 {
		return time.Time{}, false
	}
	at = p.msgs[len(p.msgs)-1].createdAt.Add(time.Duration(w) * time.Second)
	return at, now.Before(at)
}

func (p *partition) visibleAt(m *message) time.Time {
	d := p.q.cfg.DelayedProcessing
	if d <= 0 {
		return m.createdAt
	}
	return m.createdAt.Add(time.Duration(d) * time.Second)
}

// firstAtOrAfter is the offset of the first message created at or after ts,
// or -1 when there is none.
func (p *partition) firstAtOrAfter(ts time.Time) int64 {
	// A linear scan: a FakeClock may be set backwards, so timestamps are not
	// guaranteed to grow along the log.
	for _, m := range p.msgs {
		if !m.createdAt.Before(ts) {
			return m.offset
		}
	}
	return -1
}

// liveLease returns c's lease if it is live at now. An expired lease stays
// on the cursor, holding nothing, until the next claim replaces it (a
// lease-less ack still settles its batch, as on the 2.x broker). Expiry
// spends no retry: the cursor stays where it is and the messages go to the
// next pop as a redelivery.
func (c *cursor) liveLease(now time.Time) *lease {
	if c.lease != nil && now.After(c.lease.until()) {
		return nil
	}
	return c.lease
}

// until is when l stops holding its partition: its expiry, plus the grace
// of a lease granted before a Restart.
func (l *lease) until() time.Time {
	if l.foreign {
		return l.expires.Add(restartLeaseGrace)
	}
	return l.expires
}

// clearAttempt forgets the attempt marker: the next claim is attempt 1.
func (c *cursor) clearAttempt() {
	c.attemptOff, c.attemptCount = -1, 0
}

func (c *cursor) release() { c.lease = nil }

// setCommitted moves the committed position to off.
func (c *cursor) setCommitted(off int64, now time.Time) {
	if off > c.committed {
		c.totalConsumed += off - c.committed
		c.lastConsumedAt = now
	}
	c.committed = off
}

// cursorOf returns the cursor of group on p, creating it (seeded by the
// group's subscription) when there is none.
func (b *broker) cursorOf(p *partition, group string) *cursor {
	c := p.cursors[group]
	if c == nil {
		c = &cursor{committed: b.seed(p, group), attemptOff: -1}
		p.cursors[group] = c
	}
	return c
}

// seed is where a new cursor of group on p starts. Queue mode and `all`
// start before the first message. A `new` group skips what was stored
// before it registered and reads everything stored since, so a partition
// created after its registration is read from its start (PROTOCOL.md §13);
// registration order is the broker's push sequence, not a timestamp, so a
// FakeClock that never moves changes nothing. A subscriptionFrom group
// starts at its first message created at or after the timestamp.
func (b *broker) seed(p *partition, group string) int64 {
	if group == queueModeGroup {
		return -1
	}
	m := b.groups[groupKey{p.q.name, group}]
	if m == nil {
		return -1
	}
	switch m.mode {
	case "timestamp":
		if off := p.firstAtOrAfter(m.subTS); off >= 0 {
			return off - 1
		}
		return p.lastOffset()
	case "new":
		for _, msg := range p.msgs {
			if msg.seq > m.regSeq {
				return msg.offset - 1
			}
		}
		return p.lastOffset()
	}
	return -1
}

// seedIntent is where a cursor of p starts for a pop's subscription taken
// now, without a registration (a pinned pop of an unregistered group): a
// time starts it before its first message at or after the time, "all"
// before its first message, "new" (or "now") after its last (2.x
// rsm/consume/load.rs seed, rsm/planner/mod.rs seed_from_intent).
func (p *partition) seedIntent(sub subscription) int64 {
	switch sub.mode {
	case "all":
		return -1
	case "timestamp":
		if off := p.firstAtOrAfter(sub.ts); off >= 0 {
			return off - 1
		}
	}
	return p.lastOffset()
}

// subscription is what a pop asks for a group that registers with it.
type subscription struct {
	mode       string // "new", "all" or "timestamp"
	ts         time.Time
	conflation bool
}

// registerGroup registers a named group on queue name at its first pop and
// returns its stored registration (the first one wins, later requests never
// change it). Cursors for the partitions that exist now are created at the
// subscription's start, without a row; those with a row (a seek or a
// delivery placed them) are never re-seeded. A cursor that a pinned pop
// seeded from its own subscription and that delivered nothing is seeded
// again, by the registration (2.x rsm/consume/load.rs register drops those
// parts and the group's load seeds them by its policy).
func (b *broker) registerGroup(name, group string, sub subscription, now time.Time) *groupMeta {
	k := groupKey{name, group}
	if m := b.groups[k]; m != nil {
		return m
	}
	m := &groupMeta{mode: sub.mode, subTS: sub.ts, registeredAt: now, regSeq: b.msgSeq, conflation: sub.conflation}
	b.groups[k] = m
	if q := b.queues[name]; q != nil {
		for _, p := range q.parts {
			if c := p.cursors[group]; c != nil && !c.row && c.lease == nil {
				c.committed = b.seed(p, group)
			}
			b.cursorOf(p, group)
		}
	}
	return m
}

// fileDLQ adds a dead letter for offset off of p.
func (b *broker) fileDLQ(p *partition, group string, off int64, errMsg string, retryCount int, now time.Time) {
	m := p.msgs[off]
	b.dlqSeq++
	r := &dlqRow{
		id: newUUID(), seq: b.dlqSeq, queue: p.q.name, pid: p.id, wireID: b.wireID(p), partition: p.name,
		group: group, offset: off, messageID: m.id, txn: m.txn, payload: m.payload,
		errMsg: errMsg, retryCount: retryCount, failedAt: now, row: m.row,
	}
	b.dlq[r.id] = r
}

// leasedMessages counts the messages delivered under live leases of group on
// q and not yet committed.
func (b *broker) leasedMessages(q *queue, group string, now time.Time) int {
	n := 0
	for _, p := range q.parts {
		c := p.cursors[group]
		if c == nil || c.liveLease(now) == nil {
			continue
		}
		for _, off := range c.lease.delivered {
			if off > c.committed {
				n++
			}
		}
	}
	return n
}

// ---------------------------------------------------------------- ids, time

var uuidState struct {
	sync.Mutex
	ms  int64
	seq uint16
}

// newUUID returns a version-7 UUID (time-ordered, like the broker's ids).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	uuidState.Lock()
	ms := time.Now().UnixMilli()
	if ms <= uuidState.ms {
		ms = uuidState.ms
		uuidState.seq++
		if uuidState.seq >= 0x0fff {
			ms++
			uuidState.seq = 0
		}
	} else {
		uuidState.seq = uint16(b[7]) & 0x03ff
	}
	uuidState.ms = ms
	seq := uuidState.seq
	uuidState.Unlock()
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(ms))
	copy(b[0:6], t[2:8])
	b[6] = 0x70 | byte(seq>>8)&0x0f
	b[7] = byte(seq)
	b[8] = 0x80 | b[8]&0x3f
	return uuidText(b)
}

// uuidText writes b in the canonical 8-4-4-4-12 hex form.
func uuidText(b [16]byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, v := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[v>>4], hex[v&0x0f])
	}
	return string(out)
}

// newUUID4 returns a random (version 4) UUID, like PostgreSQL's
// gen_random_uuid, which names 0.15.1's partitions and queues.
func newUUID4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = 0x40 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	return uuidText(b)
}

// isoMillis renders t as the broker's pop createdAt (UTC, milliseconds).
func isoMillis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// isoMicros renders t as the broker's other timestamps (UTC, microseconds).
func isoMicros(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// parseTime reads the timestamps clients send (subscriptionFrom, seek, DLQ
// filters): RFC 3339 with or without fraction, or without a zone (UTC).
func parseTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// null015 reports whether c is a NULL 0.15.1 cursor: its group consumed
// nothing on the partition.
func (c *cursor) null015() bool { return c.committed < 0 && !c.deletedBelow }

// removeMessage015 deletes the message at offset off of p as 0.15.1's
// delete_message_v1 does (DELETE FROM queen.messages): it leaves the log,
// and its dead-letter rows go with it (ON DELETE CASCADE). A cursor, a
// lease or a dead-letter row past it keeps pointing at the same messages
// (offsets above off move down by one); a cursor at or past it stays past
// it, and a repeat of its transactionId is stored again. Callers hold mu.
func (b *broker) removeMessage015(p *partition, off int64) {
	m := p.msgs[off]
	p.msgs = append(p.msgs[:off], p.msgs[off+1:]...)
	for _, later := range p.msgs[off:] {
		later.offset--
	}
	down := func(o int64) int64 {
		if o >= off {
			return o - 1
		}
		return o
	}
	delete(p.byTxn, m.txn)
	for txn, offs := range p.byTxn {
		for i, o := range offs {
			offs[i] = down(o)
		}
		p.byTxn[txn] = offs
	}
	for _, c := range p.cursors {
		if c.committed >= off {
			c.committed--
			if c.committed < 0 {
				c.deletedBelow = true
			}
		}
		if l := c.lease; l != nil {
			l.end = down(l.end)
			kept := l.delivered[:0]
			for _, o := range l.delivered {
				if o != off {
					kept = append(kept, down(o))
				}
			}
			l.delivered = kept
		}
	}
	for id, r := range b.dlq {
		switch {
		case r.pid != p.id:
		case r.offset == off:
			delete(b.dlq, id)
		case r.offset > off:
			r.offset--
		}
	}
}
