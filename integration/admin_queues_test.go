package integration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// countsWait bounds the wait for a queue's counters: a 0.15.1 broker reads
// them from a statistics table whose rows for new partitions, and whose
// completed and processing counts, it recomputes every 2 minutes (its
// STATS_RECONCILE interval), adding new messages every 10 s in between.
const countsWait = 150 * time.Second

// TestAdminConfigureQueue: ConfigureQueue creates a queue and reports its
// whole configuration; a second configure merges (2.x) or replaces
// (0.15.1); ReplaceQueueConfig sends the options not given back to the
// broker's defaults.
func TestAdminConfigureQueue(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()

	// A queue configured with nothing shows the broker's defaults.
	ref := unique("cfg-defaults")
	refInfo, err := a.ConfigureQueue(ctx, ref, queen.QueueConfig{})
	if err != nil {
		t.Fatalf("ConfigureQueue(%s, {}): %v", ref, err)
	}
	deleteAtEnd(t, c, ref)
	if refInfo.Name != ref {
		t.Errorf("ConfigureQueue(%s).Name = %q", ref, refInfo.Name)
	}
	if refInfo.Config.LeaseTime == nil || refInfo.Config.RetryLimit == nil {
		t.Fatalf("ConfigureQueue(%s, {}) reports no default leaseTime/retryLimit: %+v", ref, refInfo.Config)
	}
	defLease, defRetry := *refInfo.Config.LeaseTime, *refInfo.Config.RetryLimit
	if defLease == 30*time.Second || defRetry == 4 {
		t.Fatalf("the broker's defaults (lease %v, retryLimit %d) are the values this test sets; pick others", defLease, defRetry)
	}

	q := unique("cfg")
	info, err := a.ConfigureQueue(ctx, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(4), Namespace: "it-ns", Task: "it-task",
	})
	if err != nil {
		t.Fatalf("ConfigureQueue(%s): %v", q, err)
	}
	deleteAtEnd(t, c, q)
	if info.Name != q {
		t.Errorf("ConfigureQueue(%s).Name = %q", q, info.Name)
	}
	if got := info.Config.LeaseTime; got == nil || *got != 30*time.Second {
		t.Errorf("ConfigureQueue(%s).Config.LeaseTime = %v, want 30s", q, fmtPtr(got))
	}
	if got := info.Config.RetryLimit; got == nil || *got != 4 {
		t.Errorf("ConfigureQueue(%s).Config.RetryLimit = %v, want 4", q, fmtPtr(got))
	}
	if info.Config.Namespace != "it-ns" || info.Config.Task != "it-task" {
		t.Errorf("ConfigureQueue(%s) namespace/task = %q/%q, want it-ns/it-task", q, info.Config.Namespace, info.Config.Task)
	}

	// A second configure with only the retry limit: 2.x merges (the lease
	// stays), 0.15.1 replaces (the lease goes back to its default).
	info, err = a.ConfigureQueue(ctx, q, queen.QueueConfig{RetryLimit: queen.Ptr(6)})
	if err != nil {
		t.Fatalf("second ConfigureQueue(%s): %v", q, err)
	}
	if got := info.Config.RetryLimit; got == nil || *got != 6 {
		t.Errorf("second ConfigureQueue(%s).Config.RetryLimit = %v, want 6", q, fmtPtr(got))
	}
	wantLease := 30 * time.Second
	if be.profile == queentest.Profile015 {
		wantLease = defLease
	}
	if got := info.Config.LeaseTime; got == nil || *got != wantLease {
		t.Errorf("second ConfigureQueue(%s) (profile %s).Config.LeaseTime = %v, want %v", q, be.profile, fmtPtr(got), wantLease)
	}

	// Replace: everything not given goes back to the defaults.
	if _, err := a.ConfigureQueue(ctx, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(4)}); err != nil {
		t.Fatalf("third ConfigureQueue(%s): %v", q, err)
	}
	info, err = a.ReplaceQueueConfig(ctx, q, queen.QueueConfig{RetryLimit: queen.Ptr(7)})
	if err != nil {
		t.Fatalf("ReplaceQueueConfig(%s): %v", q, err)
	}
	if got := info.Config.RetryLimit; got == nil || *got != 7 {
		t.Errorf("ReplaceQueueConfig(%s).Config.RetryLimit = %v, want 7", q, fmtPtr(got))
	}
	if got := info.Config.LeaseTime; got == nil || *got != defLease {
		t.Errorf("ReplaceQueueConfig(%s).Config.LeaseTime = %v, want the default %v", q, fmtPtr(got), defLease)
	}
}

func fmtPtr[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// TestAdminQueueViews: ListQueues and GetQueue show a queue's namespace,
// task, partitions and counters; GetQueue of an unknown queue fails with
// ErrQueueNotFound.
func TestAdminQueueViews(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), countsWait+scenarioTimeout)
	defer cancel()
	a := c.Admin()
	q := unique("views")
	// The lease outlives the counters' wait, so the leased message stays
	// processing until the broker counts it.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(countsWait + time.Minute), RetryLimit: queen.Ptr(3), Namespace: "it-views", Task: "it-t"})
	push(t, c, q, "p1", numbered(0, 3, nil)...)
	push(t, c, q, "p2", numbered(3, 2, nil)...)
	got := popPushed(t, c.Queue(q).Partition("p1").Batch(1))
	if len(got) != 1 {
		t.Fatalf("pop p1: %d messages, want 1", len(got))
	}
	ackAll(t, c, "", got)
	// One more leased, not acked: processing.
	if leased := popPushed(t, c.Queue(q).Partition("p2").Batch(1)); len(leased) != 1 {
		t.Fatalf("pop p2: %d messages, want 1", len(leased))
	}

	var d queen.QueueDetail
	eventually(t, countsWait, "GetQueue counters reach total 5, completed 1, processing 1", func() bool {
		var err error
		d, err = a.GetQueue(ctx, q)
		if err != nil {
			t.Fatalf("GetQueue(%s): %v", q, err)
		}
		m := d.Messages
		return m.Total == 5 && m.Completed == 1 && m.Processing == 1
	})
	if d.Name != q {
		t.Errorf("GetQueue(%s).Name = %q", q, d.Name)
	}
	if d.Namespace != "it-views" || d.Task != "it-t" {
		t.Errorf("GetQueue(%s) namespace/task = %q/%q, want it-views/it-t", q, d.Namespace, d.Task)
	}
	if d.Messages.Pending != 4 {
		t.Errorf("GetQueue(%s).Messages.Pending = %d, want 4 (not consumed, the leased one included): %+v", q, d.Messages.Pending, d.Messages)
	}
	if d.Messages.DeadLetter != 0 {
		t.Errorf("GetQueue(%s).Messages.DeadLetter = %d, want 0", q, d.Messages.DeadLetter)
	}
	if d.CreatedAt.IsZero() {
		t.Errorf("GetQueue(%s).CreatedAt is zero", q)
	}
	byName := map[string]queen.QueuePartition{}
	for _, p := range d.PartitionList {
		byName[p.Name] = p
	}
	if d.Partitions != len(d.PartitionList) {
		t.Errorf("GetQueue(%s).Partitions = %d but %d partitions listed", q, d.Partitions, len(d.PartitionList))
	}
	for name, want := range map[string]queen.MessageCounts{
		"p1": {Total: 3, Pending: 2, Completed: 1},
		"p2": {Total: 2, Pending: 2, Processing: 1},
	} {
		p, ok := byName[name]
		if !ok {
			t.Errorf("GetQueue(%s) lists no partition %s: %+v", q, name, d.PartitionList)
			continue
		}
		got := p.Messages
		got.Failed = 0
		if got != want {
			t.Errorf("GetQueue(%s) partition %s counters = %+v, want %+v", q, name, p.Messages, want)
		}
		if p.ID == "" || p.CreatedAt.IsZero() {
			t.Errorf("GetQueue(%s) partition %s has no id or createdAt: %+v", q, name, p)
		}
		if p.NewestMessage.IsZero() {
			t.Errorf("GetQueue(%s) partition %s has messages but no newestMessage", q, name)
		}
	}

	var s queen.QueueSummary
	eventually(t, countsWait, "ListQueues lists the queue with total 5", func() bool {
		qs, err := a.ListQueues(ctx)
		if err != nil {
			t.Fatalf("ListQueues: %v", err)
		}
		i := slices.IndexFunc(qs, func(s queen.QueueSummary) bool { return s.Name == q })
		if i < 0 {
			return false
		}
		s = qs[i]
		return s.Messages.Total == 5
	})
	if s.Namespace != "it-views" || s.Task != "it-t" {
		t.Errorf("ListQueues row %s namespace/task = %q/%q, want it-views/it-t", q, s.Namespace, s.Task)
	}
	if s.Partitions < 2 {
		t.Errorf("ListQueues row %s has %d partitions, want at least p1 and p2", q, s.Partitions)
	}
	if s.Messages.Pending != 4 {
		t.Errorf("ListQueues row %s pending = %d, want 4 (the leased one included): %+v", q, s.Messages.Pending, s.Messages)
	}
	if s.ID == "" && be.profile == queentest.Profile015 {
		t.Errorf("ListQueues row %s has no id on 0.15.1", q)
	}

	_, err := a.GetQueue(ctx, unique("no-such-queue"))
	if !errors.Is(err, queen.ErrQueueNotFound) {
		t.Errorf("GetQueue(unknown) = %v, want ErrQueueNotFound", err)
	}
}

// TestAdminDeleteQueue: DeleteQueue removes a queue with its messages; a
// second delete says it did not exist, without an error.
func TestAdminDeleteQueue(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := testCtx(t)
	a := c.Admin()
	q := unique("del")
	if _, err := a.ConfigureQueue(ctx, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)}); err != nil {
		t.Fatalf("ConfigureQueue(%s): %v", q, err)
	}
	push(t, c, q, "", numbered(0, 2, nil)...)
	res, err := a.DeleteQueue(ctx, q)
	if err != nil {
		t.Fatalf("DeleteQueue(%s): %v", q, err)
	}
	if !res.Deleted || !res.Existed {
		t.Errorf("DeleteQueue(%s) = %+v, want deleted and existed", q, res)
	}
	if _, err := a.GetQueue(ctx, q); !errors.Is(err, queen.ErrQueueNotFound) {
		t.Errorf("GetQueue after DeleteQueue = %v, want ErrQueueNotFound", err)
	}
	qs, err := a.ListQueues(ctx)
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	if slices.ContainsFunc(qs, func(s queen.QueueSummary) bool { return s.Name == q }) {
		t.Errorf("ListQueues still lists %s after DeleteQueue", q)
	}
	res, err = a.DeleteQueue(ctx, q)
	if err != nil {
		t.Fatalf("second DeleteQueue(%s): %v", q, err)
	}
	if res.Existed || res.Deleted {
		t.Errorf("second DeleteQueue(%s) = %+v, want neither deleted nor existed", q, res)
	}
	// Recreated, it is empty.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	if got := popNow(t, c.Queue(q).Batch(10)); len(got) != 0 {
		t.Errorf("a recreated queue pops %d old messages", len(got))
	}
}

// TestAdminHealth: the broker reports itself healthy, with its
// generation's fields.
func TestAdminHealth(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	h, err := c.Admin().Health(testCtx(t))
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if !h.Healthy || h.Status != "healthy" || h.HTTPStatus != 200 {
		t.Errorf("Health = healthy %v, status %q, http %d; want healthy/200", h.Healthy, h.Status, h.HTTPStatus)
	}
	switch be.profile {
	case queentest.Profile015:
		if h.Engine != "" || h.Raft != nil {
			t.Errorf("0.15.1 Health has engine %q / raft %v", h.Engine, h.Raft)
		}
		if h.Database != "connected" || h.Server == "" || h.WorkerStatus == "" || len(h.SharedState) == 0 {
			t.Errorf("0.15.1 Health = database %q, server %q, worker status %q, shared state %s; want all set",
				h.Database, h.Server, h.WorkerStatus, h.SharedState)
		}
	default:
		if h.Engine == "" || h.Raft == nil {
			t.Errorf("2.x Health has engine %q / raft %v, want both", h.Engine, h.Raft)
		}
	}
}
