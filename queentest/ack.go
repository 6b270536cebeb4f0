package queentest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Per-item ack errors of the 2.x broker (rsm/facade/real.rs render_ack).
const (
	errInvalidLease = "invalid or expired lease"
	errStaleAck     = "transaction is unresolvable, already committed, or acknowledgment is stale"
	errNotPID       = "partitionId is not a partition id"
	defaultDLQError = "Retries exhausted"
)

// ackBodyItem is one acknowledgment as it arrives (both body shapes).
type ackBodyItem struct {
	TransactionID *string `json:"transactionId"`
	PartitionID   *string `json:"partitionId"`
	Status        *string `json:"status"`
	LeaseID       *string `json:"leaseId"`
	Error         *string `json:"error"`
}

type ackBody struct {
	ackBodyItem
	ConsumerGroup   *string       `json:"consumerGroup"`
	Acknowledgments []ackBodyItem `json:"acknowledgments"`
}

// ackIn is one acknowledgment, normalised.
type ackIn struct {
	index   int
	txn     string
	pid     string
	status  string // completed, failed, retry or dlq
	leaseID string
	errMsg  *string
}

// ackOut is the verdict on one acknowledgment.
type ackOut struct {
	success       bool
	err           string
	leaseReleased bool
	dlq           bool
	noop          bool
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ackStatus maps the wire status: anything unknown is `completed` (2.x
// ack_status_of, case-insensitive).
func ackStatus(s string) string {
	switch strings.ToLower(s) {
	case wire.StatusFailed:
		return wire.StatusFailed
	case wire.StatusDLQ:
		return wire.StatusDLQ
	case wire.StatusRetry:
		return wire.StatusRetry
	}
	return wire.StatusCompleted
}

func isSignal(status string) bool { return status != wire.StatusCompleted }

// signalRank orders signals at one position: dlq beats failed beats retry.
func signalRank(status string) int {
	switch status {
	case wire.StatusDLQ:
		return 0
	case wire.StatusFailed:
		return 1
	case wire.StatusRetry:
		return 2
	}
	return 3
}

func (it ackBodyItem) in(i int) ackIn {
	return ackIn{index: i, txn: str(it.TransactionID), pid: str(it.PartitionID), status: ackStatus(str(it.Status)), leaseID: str(it.LeaseID), errMsg: it.Error}
}

// handleAck is POST /api/v1/ack and POST /api/v1/ack/batch; both accept both
// body shapes (one acknowledgment at top level, or `acknowledgments`). The
// consumer group is top-level only. The answer is 200 with one result per
// acknowledgment; a refused one has success:false and an error.
func (s *Server) handleAck(w *recorder, req *request) {
	var body ackBody
	if !w.readJSON(req.body, &body, "bad ack body: ") {
		return
	}
	group := groupOrQueueMode(str(body.ConsumerGroup))
	if nameTooLong(w, "", group, "") {
		return
	}
	var items []ackIn
	if len(body.Acknowledgments) > 0 {
		for i, it := range body.Acknowledgments {
			items = append(items, it.in(i))
		}
	} else {
		items = append(items, body.ackBodyItem.in(0))
	}

	b := s.b
	b.mu.Lock()
	now := b.now()
	outs := b.ack(group, items, now)
	// Autopilot drain samples: runs of one lease acked together.
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].leaseID == items[i].leaseID {
			j++
		}
		b.ap.acked(items[i].leaseID, j-i, now)
		i = j
	}
	b.bump()
	b.mu.Unlock()

	res := make([]wire.AckResult, len(items))
	for i, it := range items {
		o := outs[i]
		res[i] = wire.AckResult{Index: i, TransactionID: it.txn, Success: o.success, LeaseReleased: o.leaseReleased, DLQ: o.dlq, Noop: o.noop}
		if o.err != "" {
			e := o.err
			res[i].Error = &e
		}
	}
	w.json(http.StatusOK, res)
}

// ackTargetKey groups acknowledgments by (partition, lease): each group is
// settled against one cursor, in first-seen order.
type ackTargetKey struct {
	pid   int64
	lease string
}

// ack applies plain acknowledgments of group. Callers hold mu.
func (b *broker) ack(group string, items []ackIn, now time.Time) []ackOut {
	outs := make([]ackOut, len(items))
	var order []ackTargetKey
	targets := map[ackTargetKey][]int{}
	for i, it := range items {
		pid, err := strconv.ParseInt(it.pid, 10, 64)
		if err != nil || pid < 0 {
			outs[i] = ackOut{err: errNotPID}
			continue
		}
		if b.parts[pid] == nil {
			outs[i] = ackOut{err: fmt.Sprintf("no partition %d", pid)}
			continue
		}
		k := ackTargetKey{pid, it.leaseID}
		if _, ok := targets[k]; !ok {
			order = append(order, k)
		}
		targets[k] = append(targets[k], i)
	}
	for _, k := range order {
		p := b.parts[k.pid]
		idx := targets[k]
		in := make([]ackIn, len(idx))
		for j, i := range idx {
			in[j] = items[i]
		}
		tr := ackTarget(p, p.cursors[group], k.lease, in, b.recent, now, true)
		b.commitTarget(p, group, tr, now)
		for j, i := range idx {
			outs[i] = tr.per[j]
		}
	}
	return outs
}

// commitTarget stores a settled cursor and files its dead letters.
func (b *broker) commitTarget(p *partition, group string, tr targetResult, now time.Time) {
	if tr.cur == nil {
		return
	}
	p.cursors[group] = tr.cur
	for _, f := range tr.files {
		b.fileDLQ(p, group, f.off, f.errMsg, f.retry, now)
	}
}

type dlqFile struct {
	off    int64
	errMsg string
	retry  int
}

// targetResult is the outcome of settling one (partition, lease) target.
type targetResult struct {
	per   []ackOut
	cur   *cursor // the new cursor; nil when the group has none here
	files []dlqFile
	stale bool // some acknowledgment was refused
}

func (c *cursor) clone() *cursor {
	n := *c
	if c.lease != nil {
		l := *c.lease
		l.delivered = append([]int64(nil), c.lease.delivered...)
		n.lease = &l
	}
	if c.released != nil {
		r := *c.released
		n.released = &r
	}
	return &n
}

// ackTarget settles acknowledgments of one (partition, lease) against the
// group's cursor cur0, as the 2.x engine does (rsm/consume/ack.rs):
//
//   - A non-empty leaseId must be the cursor's live lease; if not, every
//     item is refused "invalid or expired lease", except the identical
//     repeat of an ack that released this lease, answered as the first time
//     (plain acks only: repeatOK). An empty leaseId skips the check.
//   - `completed` advances over the acked prefix: the highest completed
//     position below the first signal (implicit ack of what precedes it).
//     The lease is released once the leased batch is settled; a partial ack
//     keeps it.
//   - The lowest signal decides the rest: `dlq` files that message and moves
//     past it; `failed` spends one retry of the batch and releases, so it
//     and what follows can be claimed again at once (the broker does not
//     apply retryDelay), or, with the budget spent, files it in the DLQ
//     (dropped when the queue has none); `retry`
//     releases without spending. After a dlq or a spent failure, the later
//     positions this call names are settled in order.
//   - An item below the cursor is a noop success (a signal there is stale);
//     an item not in the leased span is stale.
//   - dlq:true marks the items whose own message this call filed in the
//     dead-letter queue, not every signal of a target that filed one.
//
// cur0 is not modified: the result holds a new cursor.
func ackTarget(p *partition, cur0 *cursor, worker string, items []ackIn, recent int64, now time.Time, repeatOK bool) targetResult {
	cfg := p.q.cfg
	res := targetResult{per: make([]ackOut, len(items))}
	refuse := func(msg string) targetResult {
		for i := range items {
			res.per[i] = ackOut{err: msg}
		}
		res.stale = true
		return res
	}
	if cur0 == nil || !cur0.row {
		// No cursor row: the group never popped, acked or sought here.
		if worker != "" {
			return refuse(errInvalidLease)
		}
		return refuse(errStaleAck)
	}
	c := cur0.clone()
	res.cur = c
	l := c.liveLease(now)
	if worker != "" && (l == nil || l.id != worker) {
		if repeatOK && c.released != nil && c.released.id == worker {
			any := false
			for i, it := range items {
				off, ok, _ := p.resolveTxn(it.txn, c.released.lo, c.released.hi, c.committed, recent, now)
				if ok && off <= c.committed {
					res.per[i] = ackOut{success: true, leaseReleased: true}
					any = true
				} else {
					// Not of the released batch: refused like any item
					// under a lease that is not the live one.
					res.per[i] = ackOut{err: errInvalidLease}
					res.stale = true
				}
			}
			if any {
				return res
			}
			res.stale = false
		}
		return refuse(errInvalidLease)
	}

	// From here the batch is the lease on the cursor, live or expired: an
	// expired lease still bounds a lease-less ack until a pop claims again.
	committed0 := c.committed
	l = c.lease
	hasLease := l != nil
	end := int64(math.MaxInt64)
	if hasLease {
		end = l.end
	}
	type resolved struct {
		off   int64
		found bool // in the span (committed, end]
		below bool // at or below the cursor
	}
	rs := make([]resolved, len(items))
	for i, it := range items {
		off, found, below := p.resolveTxn(it.txn, committed0+1, end, committed0, recent, now)
		rs[i] = resolved{off: off, found: found, below: below && !found}
	}

	// The head signal: the lowest signalled position.
	sig := -1
	for i, it := range items {
		if !rs[i].found || !isSignal(it.status) {
			continue
		}
		if sig < 0 || rs[i].off < rs[sig].off || rs[i].off == rs[sig].off && signalRank(it.status) < signalRank(items[sig].status) {
			sig = i
		}
	}
	sigOff, sigKind := int64(-1), ""
	if sig >= 0 {
		sigOff, sigKind = rs[sig].off, items[sig].status
	}
	maxOK, maxOKAll := int64(-2), int64(-2)
	for i, it := range items {
		if !rs[i].found || it.status != wire.StatusCompleted {
			continue
		}
		maxOKAll = max(maxOKAll, rs[i].off)
		if sig < 0 || rs[i].off < sigOff {
			maxOK = max(maxOK, rs[i].off)
		}
	}
	next := committed0
	if maxOK > -2 {
		next = maxOK
	}

	dlqError := func() string {
		if sig >= 0 && items[sig].errMsg != nil {
			return *items[sig].errMsg
		}
		for _, it := range items {
			if it.status != wire.StatusCompleted && it.errMsg != nil {
				return *it.errMsg
			}
		}
		return defaultDLQError
	}
	retryLimit := max(cfg.RetryLimit, 0)
	filedAt := map[int64]bool{}
	file := func(off int64, msg string, retry int) {
		res.files = append(res.files, dlqFile{off: off, errMsg: msg, retry: retry})
		filedAt[off] = true
	}

	// settle walks the positions above the head signal in order, as far as
	// this call decides them; it reports whether it stopped at a `failed`
	// whose budget remains.
	settle := func(exhausted bool, retry int) bool {
		type named struct {
			status string
			i      int
		}
		above := map[int64]named{}
		for i, it := range items {
			if !rs[i].found || rs[i].off <= sigOff {
				continue
			}
			cur, ok := above[rs[i].off]
			if !ok || signalRank(it.status) < signalRank(cur.status) {
				above[rs[i].off] = named{it.status, i}
			}
		}
		last := int64(-2)
		stopped := false
	walk:
		for pos := sigOff + 1; hasLease && pos <= end; pos++ {
			e, ok := above[pos]
			switch {
			case ok && e.status == wire.StatusDLQ:
				file(pos, orDefault(items[e.i].errMsg, dlqError()), retry)
			case ok && e.status == wire.StatusFailed && exhausted:
				if cfg.dlqEnabled() {
					file(pos, orDefault(items[e.i].errMsg, dlqError()), retry)
				}
			case ok && e.status == wire.StatusFailed:
				stopped = true
				break walk
			case ok && e.status == wire.StatusCompleted:
			case ok:
				break walk
			case maxOKAll > pos:
			default:
				break walk
			}
			last = pos
		}
		if last > -2 {
			c.setCommitted(last, now)
		}
		return stopped
	}

	releasedForRetry := false
	brc0 := c.batchRetry
	switch {
	case sigKind == wire.StatusDLQ && hasLease:
		c.setCommitted(max(next, sigOff), now)
		file(sigOff, dlqError(), brc0)
		c.release()
		c.clearAttempt()
		c.batchRetry = 0
		if settle(brc0 >= retryLimit, brc0) {
			c.batchRetry = brc0 // the rest keeps the budget it used
		}
	case sigKind == wire.StatusFailed && hasLease:
		switch {
		case brc0 < retryLimit:
			c.setCommitted(next, now)
			c.release()
			c.batchRetry = brc0 + 1
			releasedForRetry = true
		case cfg.dlqEnabled():
			c.setCommitted(sigOff, now)
			file(sigOff, dlqError(), brc0)
			c.release()
			c.clearAttempt()
			c.batchRetry = 0
			settle(true, brc0)
		default: // no DLQ: the poison is dropped
			c.setCommitted(sigOff, now)
			c.release()
			c.batchRetry = 0
			settle(true, brc0)
		}
	case sigKind == wire.StatusRetry && hasLease:
		c.setCommitted(next, now)
		c.release()
	default: // all completed, or a lease-less ack
		if hasLease && l.conflated && maxOK > -2 {
			next = l.end // a clean ack retires the whole conflated span
		}
		c.setCommitted(next, now)
		switch {
		case hasLease && next >= l.end:
			c.release()
			c.clearAttempt()
			c.batchRetry = 0
		case hasLease:
			// A partial ack keeps the lease; a redelivery of the rest starts
			// at the first message it left.
			c.attemptOff = next + 1
		}
	}

	leaseReleased := hasLease && c.lease == nil
	if hasLease && leaseReleased && !releasedForRetry && c.committed >= l.end && worker != "" {
		c.released = &releasedLease{id: worker, lo: committed0 + 1, hi: l.end}
	}
	for i, it := range items {
		r := rs[i]
		switch {
		case r.found:
			res.per[i] = ackOut{success: true}
		case r.below && !isSignal(it.status):
			res.per[i] = ackOut{success: true, noop: true}
		default:
			res.per[i] = ackOut{err: errStaleAck}
			res.stale = true
		}
		res.per[i].leaseReleased = leaseReleased
		// dlq: this item's own message was filed by this call; a failed one
		// released for redelivery, or dropped by a queue without a DLQ, was
		// not (rsm/facade/real.rs render_ack).
		res.per[i].dlq = r.found && filedAt[r.off] && (it.status == wire.StatusDLQ || it.status == wire.StatusFailed)
	}
	return res
}

func orDefault(p *string, def string) string {
	if p != nil {
		return *p
	}
	return def
}

// resolveTxn finds an acknowledged transactionId in p as the 2.x ack does
// (rsm/dedup.rs resolve): off is the lowest offset stored under it in
// [lo, hi] (found), and below reports whether it is also stored at or
// below committed, as a message the broker still recognises there
// (recognised).
func (p *partition) resolveTxn(txn string, lo, hi, committed int64, recent int64, now time.Time) (off int64, found, below bool) {
	for _, o := range p.byTxn[txn] {
		if o <= committed && p.recognised(o, committed, recent, now) {
			below = true
		}
		if o >= lo && o <= hi && !found {
			off, found = o, true
		}
	}
	return off, found, below
}

// recentlyConsumed is how many of a group's last consumed messages of a
// partition the 2.x broker recognises in a repeated ack, past the rows
// window (broker.recent; tests of this package lower it).
const recentlyConsumed = 65536

// rowsWindowMin is the least time the 2.x broker keeps a pushed message's
// transactionId row (QUEEN_RAFT_TXN_WINDOW_MIN_S).
const rowsWindowMin = 900 * time.Second

// recognised reports whether the 2.x broker still knows the consumed
// message at off for an ack (a repeated completed ack is then a no-op, not
// stale): while its transactionId row lives (the queue's dedup window, or
// completedRetentionSeconds if longer, at least 15 minutes), or while it is
// among the last 65,536 messages the group consumed from the partition
// (upstream CHANGELOG 2.2.0; PROTOCOL.md §19).
func (p *partition) recognised(off, committed, recent int64, now time.Time) bool {
	cfg := p.q.cfg
	window := max(time.Duration(max(cfg.DedupWindowSeconds, cfg.CompletedRetentionSeconds))*time.Second, rowsWindowMin)
	return committed-off < recent || !p.msgs[off].createdAt.Before(now.Add(-window))
}
