package queen

// The wire shapes of both broker generations, with their upstream sources:
// docs/ADMIN.md and PROTOCOL.md §17.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Admin holds the broker's administrative calls: seeks, consumer groups,
// queues, health and dead letters. It is safe for concurrent use. What
// differs between broker generations: docs/ADMIN.md.
type Admin struct{ c *Client }

// Admin returns the administrative calls of the client.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// SeekConsumerGroupOptions says where a seek moves a consumer group. Set
// exactly one field.
type SeekConsumerGroupOptions struct {
	// Timestamp (RFC 3339) makes the group read again every message stored
	// at or after that time, on both generations.
	Timestamp string
	// ToEnd moves the group past every message stored so far.
	ToEnd bool
	// CreateIfMissing seeks a group that has no position on the queue
	// instead of failing with ErrGroupNotFound (0.15.1 then moves nothing).
	// A 2.x group has a position once something was delivered to it there
	// (or it was sought): one that only registered is not listed yet.
	CreateIfMissing bool
}

// ErrGroupNotFound: the consumer group has no position on the queue (for
// GetConsumerGroup, anywhere). A seek returns it before sending anything;
// after a 404, errors.As finds the *BrokerError too.
var ErrGroupNotFound = errors.New("queen: consumer group not found")

// ErrQueueNotFound: GetQueue asked for a queue the broker does not have;
// after a 404, errors.As finds the *BrokerError too.
var ErrQueueNotFound = errors.New("queen: queue not found")

// unknownQueue says whether be is a broker's answer to a queue view that
// it has no such queue: 2.x answers 404 with a JSON body (a 404 page is a
// missing route), 0.15.1 200 {"error":"Queue not found"}.
func unknownQueue(be *BrokerError) bool {
	return be.Status == http.StatusNotFound && json.Valid(be.Body) || strings.Contains(strings.ToLower(be.Message), "queue not found")
}

// SeekResult is the broker's report of a seek.
type SeekResult struct {
	ConsumerGroup string `json:"consumerGroup"`
	Queue         string `json:"queue"`
	// Partition is "" for a seek of the whole queue.
	Partition string    `json:"partition,omitempty"`
	ToEnd     bool      `json:"toEnd"`
	Timestamp time.Time `json:"timestamp,omitzero"` // zero for ToEnd
	// PartitionsUpdated is how many partition cursors moved.
	PartitionsUpdated int `json:"partitionsUpdated"`
}

// SeekConsumerGroup moves the group's position on every partition of queue
// to a time or to the end (POST
// /api/v1/consumer-groups/{group}/queues/{queue}/seek), dropping its leases
// there. Neither or both of Timestamp and ToEnd, or a bad Timestamp, fails
// with ErrInvalidSeek before any request. Unless opts.CreateIfMissing, a
// group that ListConsumerGroups does not show on queue fails with
// ErrGroupNotFound and nothing is sent. See docs/ADMIN.md#seeks.
func (a *Admin) SeekConsumerGroup(ctx context.Context, group, queue string, opts SeekConsumerGroupOptions) (SeekResult, error) {
	return a.seek(ctx, group, queue, "", opts)
}

// SeekPartition is SeekConsumerGroup for one partition (POST
// .../partitions/{partition}/seek). On 0.15.1, which seeks a partition only
// to its end, a Timestamp seek fails with ErrNotSupported before anything
// is sent.
func (a *Admin) SeekPartition(ctx context.Context, group, queue, partition string, opts SeekConsumerGroupOptions) (SeekResult, error) {
	if err := checkName(partitionName, partition); err != nil {
		return SeekResult{}, err
	}
	return a.seek(ctx, group, queue, partition, opts)
}

func (a *Admin) seek(ctx context.Context, group, queue, partition string, opts SeekConsumerGroupOptions) (SeekResult, error) {
	if err := checkName(groupName, group); err != nil {
		return SeekResult{}, err
	}
	if err := checkName(queueName, queue); err != nil {
		return SeekResult{}, err
	}
	body, err := seekBody(opts)
	if err != nil {
		return SeekResult{}, err
	}
	if !opts.CreateIfMissing {
		if err := a.groupOnQueue(ctx, group, queue); err != nil {
			return SeekResult{}, err
		}
	}
	asked := body.Timestamp
	if asked != "" {
		g, err := a.c.generation(ctx)
		if err != nil {
			return SeekResult{}, err
		}
		if partition != "" && !g.PartitionSeekBody {
			return SeekResult{}, fmt.Errorf("%w: a %s broker seeks one partition only to its end, not to %s (nothing sent; seek the whole group to the time, or the partition with ToEnd)",
				ErrNotSupported, g.Name, asked)
		}
		body.Timestamp = seekTime(g, asked)
	}
	path := wire.RouteSeekGroup.Path(group, queue)
	if partition != "" {
		path = wire.RouteSeekPartition.Path(group, queue, partition)
	}
	// 0.15.1 per-partition answer: cursorMovedTo and updated (bool), no
	// seekToEnd or partitionsUpdated; it always moves to the end.
	var out struct {
		wire.SeekResponse
		CursorMovedTo json.RawMessage `json:"cursorMovedTo"`
		Success       *bool           `json:"success"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodPost, path: path, body: body}, &out)
	if err != nil {
		return SeekResult{}, err
	}
	if refused(out.Success, out.Error) {
		return SeekResult{}, resp.refusal(http.MethodPost, path, orDefault(out.Error, "seek refused"))
	}
	res := SeekResult{
		ConsumerGroup:     orDefault(out.ConsumerGroup, group),
		Queue:             orDefault(out.QueueName, queue),
		Partition:         partition,
		ToEnd:             out.SeekToEnd,
		PartitionsUpdated: out.PartitionsUpdated,
	}
	if out.PartitionName != nil && *out.PartitionName != "" {
		res.Partition = *out.PartitionName
	}
	if partition != "" && out.CursorMovedTo != nil {
		res.ToEnd, out.SeekToEnd = true, true
		if res.PartitionsUpdated == 0 && out.Updated != nil && *out.Updated {
			res.PartitionsUpdated = 1
		}
	}
	switch {
	case asked != "" && !out.SeekToEnd:
		res.Timestamp = parseBrokerTime(asked)
	case out.TargetTimestamp != nil:
		res.Timestamp = parseBrokerTime(*out.TargetTimestamp)
	}
	if partition != "" && asked != "" && out.SeekToEnd {
		return res, fmt.Errorf("%w: the broker moved partition %q to its end instead of to %s (per-partition seek to a time)",
			ErrNotSupported, partition, asked)
	}
	return res, nil
}

// groupOnQueue fails with ErrGroupNotFound unless the broker's list of
// groups (GET /api/v1/consumer-groups) has group on queue.
func (a *Admin) groupOnQueue(ctx context.Context, group, queue string) error {
	groups, err := a.ListConsumerGroups(ctx)
	if err != nil {
		return fmt.Errorf("queen: look up consumer group %q before the seek: %w", group, err)
	}
	if !slices.ContainsFunc(groups, func(g ConsumerGroup) bool { return g.Name == group && g.Queue == queue }) {
		return fmt.Errorf("%w: group %q has no position on queue %q (check the names, or set CreateIfMissing to seek it anyway)",
			ErrGroupNotFound, group, queue)
	}
	return nil
}

// seekBody validates opts; a timestamp not in UTC is sent converted to UTC.
func seekBody(opts SeekConsumerGroupOptions) (wire.SeekRequest, error) {
	switch {
	case opts.ToEnd && opts.Timestamp != "":
		return wire.SeekRequest{}, fmt.Errorf("%w: got both", ErrInvalidSeek)
	case opts.ToEnd:
		return wire.SeekRequest{ToEnd: true}, nil
	case opts.Timestamp == "":
		return wire.SeekRequest{}, fmt.Errorf("%w: got neither", ErrInvalidSeek)
	}
	ts, err := time.Parse(time.RFC3339Nano, opts.Timestamp)
	if err != nil {
		return wire.SeekRequest{}, fmt.Errorf("%w: timestamp %q: %v", ErrInvalidSeek, opts.Timestamp, err)
	}
	s := opts.Timestamp
	if !strings.HasSuffix(s, "Z") {
		s = ts.UTC().Format(time.RFC3339Nano)
	}
	return wire.SeekRequest{Timestamp: s}, nil
}

// ConsumerGroupState is the broker's summary of a group on a queue.
type ConsumerGroupState string

const (
	GroupLagging ConsumerGroupState = "Lagging" // oldest unread message older than five minutes
	GroupStable  ConsumerGroupState = "Stable"  // consumed and keeping up
	GroupDead    ConsumerGroupState = "Dead"    // never consumed there
)

// ConsumerGroup is one consumer group on one queue, as listed by
// ListConsumerGroups. A field a broker generation does not send keeps its
// zero value (TotalLag: -1); which ones, and how 0.15.1 counts the others:
// docs/ADMIN.md#consumer-groups.
type ConsumerGroup struct {
	Name              string `json:"name"` // "__QUEUE_MODE__" for queue mode
	Queue             string `json:"queue"`
	PartitionCursors  int    `json:"partitionCursors"`  // partitions the group has a position on
	PartitionsWithLag int    `json:"partitionsWithLag"` // of those, the ones with unread messages
	TotalLag          int64  `json:"totalLag"`          // unread messages; -1 when not counted
	// MaxTimeLag is the age of the oldest unread message.
	MaxTimeLag time.Duration      `json:"maxTimeLag"`
	State      ConsumerGroupState `json:"state"`
	// SubscriptionMode ("new", "all", "timestamp") and
	// SubscriptionTimestamp are where the group started.
	SubscriptionMode      string    `json:"subscriptionMode,omitempty"`
	SubscriptionTimestamp time.Time `json:"subscriptionTimestamp,omitzero"`
	SubscriptionCreatedAt time.Time `json:"subscriptionCreatedAt,omitzero"`
	Conflation            bool      `json:"conflation"`
	// Storage ("segments") and Kind ("queen") are 2.x only.
	Storage string `json:"storage,omitempty"`
	Kind    string `json:"kind,omitempty"`
}

// ListConsumerGroups lists every consumer group on every queue, one row
// per (group, queue) (GET /api/v1/consumer-groups).
func (a *Admin) ListConsumerGroups(ctx context.Context) ([]ConsumerGroup, error) {
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteGroups.Path()}, nil)
	if err != nil {
		return nil, err
	}
	var rows []wire.ConsumerGroupRow
	if err := decodeList(resp.body, &rows, "consumerGroups", "groups", "data"); err != nil {
		return nil, resp.unreadable(http.MethodGet, wire.RouteGroups.Path(), "undecodable consumer-group list: "+err.Error())
	}
	out := make([]ConsumerGroup, 0, len(rows))
	for _, r := range rows {
		g := ConsumerGroup{
			Name: r.Name, Queue: r.QueueName, PartitionCursors: r.PartitionCursors, PartitionsWithLag: r.PartitionsWithLag,
			TotalLag: -1, MaxTimeLag: seconds(r.MaxTimeLag), State: ConsumerGroupState(r.State),
			Conflation: r.Conflation, Storage: r.Storage, Kind: r.Kind,
		}
		if r.TotalLag != nil {
			g.TotalLag = *r.TotalLag
		}
		if r.SubscriptionMode != nil {
			g.SubscriptionMode = *r.SubscriptionMode
		}
		if g.PartitionCursors == 0 {
			g.PartitionCursors = r.Members
		}
		if g.Queue == "" && len(r.Topics) > 0 {
			g.Queue = r.Topics[0]
		}
		g.SubscriptionTimestamp, g.SubscriptionCreatedAt = optTime(r.SubscriptionTimestamp), optTime(r.SubscriptionCreatedAt)
		out = append(out, g)
	}
	return out, nil
}

// ConsumerGroupDetail is a group's position on every queue it reads.
type ConsumerGroupDetail struct {
	Name   string                     `json:"name"`
	Queues map[string]GroupQueueState `json:"queues"` // by queue
}

// GroupQueueState is a group's state on one queue. Conflation and Kind are
// 2.x only.
type GroupQueueState struct {
	Conflation bool                  `json:"conflation"`
	Kind       string                `json:"kind,omitempty"`
	Partitions []GroupPartitionState `json:"partitions"`
}

// GroupPartitionState is a group's cursor on one partition.
type GroupPartitionState struct {
	Partition      string        `json:"partition"`
	WorkerID       string        `json:"workerId,omitempty"`      // the last worker that leased it, when known
	LastConsumedAt time.Time     `json:"lastConsumedAt,omitzero"` // zero when not sent
	TotalConsumed  int64         `json:"totalConsumed"`
	OffsetLag      int64         `json:"offsetLag"`   // unread messages
	TimeLag        time.Duration `json:"timeLag"`     // age of the oldest unread one (whole seconds)
	LeaseActive    bool          `json:"leaseActive"` // a worker holds the partition
}

// GetConsumerGroup returns the group's cursor on each partition of each
// queue it reads (GET /api/v1/consumer-groups/{group}). A group with no
// position anywhere fails with an error matching ErrGroupNotFound.
func (a *Admin) GetConsumerGroup(ctx context.Context, group string) (ConsumerGroupDetail, error) {
	if err := checkName(groupName, group); err != nil {
		return ConsumerGroupDetail{}, err
	}
	path := wire.RouteGroup.Path(group)
	var out wire.GroupDetail
	if _, err := a.c.doObject(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		var be *BrokerError
		if errors.As(err, &be) && be.Status == http.StatusNotFound && json.Valid(be.Body) {
			return ConsumerGroupDetail{Name: group}, fmt.Errorf("%w: %q: %w", ErrGroupNotFound, group, err)
		}
		return ConsumerGroupDetail{}, err
	}
	d := ConsumerGroupDetail{Name: group, Queues: make(map[string]GroupQueueState, len(out))}
	for q, st := range out {
		gs := GroupQueueState{Conflation: st.Conflation, Kind: st.Kind, Partitions: make([]GroupPartitionState, 0, len(st.Partitions))}
		for _, p := range st.Partitions {
			ps := GroupPartitionState{Partition: p.Partition, TotalConsumed: p.TotalConsumed, OffsetLag: p.OffsetLag,
				TimeLag: seconds(p.TimeLagSeconds), LeaseActive: p.LeaseActive, LastConsumedAt: optTime(p.LastConsumedAt)}
			if p.WorkerID != nil {
				ps.WorkerID = *p.WorkerID
			}
			gs.Partitions = append(gs.Partitions, ps)
		}
		d.Queues[q] = gs
	}
	if len(d.Queues) == 0 {
		return d, fmt.Errorf("%w: %q has no position on any queue", ErrGroupNotFound, group)
	}
	return d, nil
}

// DeleteConsumerGroupOptions narrow a consumer-group deletion.
type DeleteConsumerGroupOptions struct {
	// Queue limits the deletion to one queue; "" means every queue.
	Queue string
	// KeepMetadata keeps the group's registration (subscription, conflation)
	// and deletes only its positions.
	KeepMetadata bool
}

// DeleteGroupResult says what a consumer-group deletion did.
type DeleteGroupResult struct {
	ConsumerGroup     string   `json:"consumerGroup"`
	Queue             string   `json:"queue,omitempty"` // "" for all queues
	DeletedPartitions int      `json:"deletedPartitions"`
	MetadataDeleted   bool     `json:"metadataDeleted"`
	Queues            []string `json:"queues,omitempty"` // the queues looked at (2.x only)
}

// DeleteConsumerGroup removes the group's positions, and unless
// KeepMetadata its registration, on one queue or all (DELETE
// /api/v1/consumer-groups/{group}[/queues/{queue}]). An unknown group or
// queue is no error (DeletedPartitions 0). The group's next pop from this
// Client registers it anew.
func (a *Admin) DeleteConsumerGroup(ctx context.Context, group string, opts DeleteConsumerGroupOptions) (DeleteGroupResult, error) {
	if err := checkName(groupName, group); err != nil {
		return DeleteGroupResult{}, err
	}
	if err := checkOptionalName(queueName, opts.Queue); err != nil {
		return DeleteGroupResult{}, err
	}
	path := wire.RouteGroup.Path(group)
	if opts.Queue != "" {
		path = wire.RouteGroupQueue.Path(group, opts.Queue)
	}
	q := url.Values{"deleteMetadata": {strconv.FormatBool(!opts.KeepMetadata)}}
	defer a.c.mem.forget(group, opts.Queue)
	var out struct {
		wire.DeleteGroupResponse
		Success *bool  `json:"success"`
		Error   string `json:"error,omitempty"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodDelete, path: path, query: q}, &out)
	if err != nil {
		return DeleteGroupResult{}, err
	}
	if refused(out.Success, out.Error) {
		return DeleteGroupResult{}, resp.refusal(http.MethodDelete, path, orDefault(out.Error, "consumer-group delete refused"))
	}
	res := DeleteGroupResult{ConsumerGroup: orDefault(out.ConsumerGroup, group), Queue: opts.Queue,
		DeletedPartitions: out.DeletedPartitions, MetadataDeleted: out.MetadataDeleted, Queues: out.Queues}
	if out.QueueName != nil && *out.QueueName != "" {
		res.Queue = *out.QueueName
	}
	return res, nil
}

// MessageCounts are the message counters of a queue or a partition. Pending
// counts what the slowest group has not consumed, leased messages included,
// on both generations. What 0.15.1 leaves out: docs/ADMIN.md#queues.
type MessageCounts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"` // leased right now
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed,omitempty"` // 0.15.1's queue detail only, always 0
	DeadLetter int64 `json:"deadLetter"`
}

// QueueSummary is one queue of ListQueues. A 0.15.1 broker sends no Config
// (only Namespace and Task) and no RetainedBytes.
type QueueSummary struct {
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
	// Namespace and Task tag the queue for discovery pops.
	Namespace     string        `json:"namespace,omitempty"`
	Task          string        `json:"task,omitempty"`
	Partitions    int           `json:"partitions"` // how many
	Messages      MessageCounts `json:"messages"`
	RetainedBytes int64         `json:"retainedBytes,omitempty"`
	Config        QueueConfig   `json:"config"`
	CreatedAt     time.Time     `json:"createdAt,omitzero"`
}

// QueueDetail is one queue with its partitions, from GetQueue.
type QueueDetail struct {
	QueueSummary
	PartitionList []QueuePartition `json:"partitionList"`
}

// QueuePartition is one partition of a queue. Times the broker does not
// send are zero (LastActivity is 2.x only).
type QueuePartition struct {
	Name string `json:"name"`
	// ID is the broker's opaque id (the partitionId of its messages).
	ID            string        `json:"id,omitempty"`
	Messages      MessageCounts `json:"messages"`
	CreatedAt     time.Time     `json:"createdAt,omitzero"`
	LastActivity  time.Time     `json:"lastActivity,omitzero"`  // the last lease
	OldestMessage time.Time     `json:"oldestMessage,omitzero"` // creation time (0.15.1: of the oldest pending one)
	NewestMessage time.Time     `json:"newestMessage,omitzero"`
}

// ListQueues lists the broker's queues with their counters and
// configuration (GET /api/v1/resources/queues).
func (a *Admin) ListQueues(ctx context.Context) ([]QueueSummary, error) {
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteQueues.Path()}, nil)
	if err != nil {
		return nil, err
	}
	var rows []wire.QueueRow
	if err := decodeList(resp.body, &rows, "queues", "data"); err != nil {
		return nil, resp.unreadable(http.MethodGet, wire.RouteQueues.Path(), "undecodable queue list: "+err.Error())
	}
	// 0.15.1 rows lack "completed" and count pending without processing.
	var shapes []struct {
		Messages map[string]json.RawMessage `json:"messages"`
	}
	_ = decodeList(resp.body, &shapes, "queues", "data")
	out := make([]QueueSummary, 0, len(rows))
	for i := range rows {
		s, _ := queueFromWire(&rows[i])
		if i < len(shapes) && shapes[i].Messages != nil {
			if _, ok := shapes[i].Messages["completed"]; !ok {
				s.Messages.Pending += s.Messages.Processing
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// GetQueue returns one queue with its partitions (GET
// /api/v1/resources/queues/{queue}). An unknown queue fails with an error
// matching ErrQueueNotFound.
func (a *Admin) GetQueue(ctx context.Context, name string) (QueueDetail, error) {
	if err := checkName(queueName, name); err != nil {
		return QueueDetail{}, err
	}
	path := wire.RouteQueue.Path(name)
	var row wire.QueueRow
	if _, err := a.c.doObject(ctx, call{method: http.MethodGet, path: path}, &row); err != nil {
		var be *BrokerError
		if errors.As(err, &be) && unknownQueue(be) {
			return QueueDetail{}, fmt.Errorf("%w: %q: %w", ErrQueueNotFound, name, err)
		}
		return QueueDetail{}, err
	}
	s, parts := queueFromWire(&row)
	if s.Name == "" {
		s.Name = name
	}
	d := QueueDetail{QueueSummary: s, PartitionList: make([]QueuePartition, 0, len(parts))}
	for _, p := range parts {
		qp := QueuePartition{Name: p.Name, ID: p.ID, CreatedAt: parseBrokerTime(p.CreatedAt)}
		switch {
		case p.Messages != nil:
			qp.Messages = countsFromWire(p.Messages)
		case p.Stats != nil:
			qp.Messages = countsFromWire(p.Stats)
		}
		qp.LastActivity, qp.OldestMessage, qp.NewestMessage = optTime(p.LastActivity), optTime(p.OldestMessage), optTime(p.NewestMessage)
		d.PartitionList = append(d.PartitionList, qp)
	}
	if d.Partitions == 0 {
		d.Partitions = len(d.PartitionList)
	}
	return d, nil
}

// queueFromWire reads a row of the list (partitions a count) or the detail
// (partitions an array, returned).
func queueFromWire(r *wire.QueueRow) (QueueSummary, []wire.QueuePartitionRow) {
	s := QueueSummary{Name: r.Name, ID: r.ID, RetainedBytes: r.RetainedBytes, CreatedAt: parseBrokerTime(r.CreatedAt)}
	if s.Name == "" {
		s.Name = r.Queue
	}
	s.Config = queueConfigFromWire(r.Options, r.Namespace, r.Task)
	s.Namespace, s.Task = s.Config.Namespace, s.Config.Task
	switch {
	case r.Totals != nil:
		s.Messages = countsFromWire(r.Totals)
	case r.Messages != nil:
		s.Messages = countsFromWire(r.Messages)
	}
	var parts []wire.QueuePartitionRow
	raw := bytes.TrimSpace(r.Partitions)
	if len(raw) > 0 {
		if raw[0] == '[' {
			if json.Unmarshal(raw, &parts) == nil {
				s.Partitions = len(parts)
			}
		} else {
			_ = json.Unmarshal(raw, &s.Partitions)
		}
	}
	return s, parts
}

func countsFromWire(m *wire.MessageCounts) MessageCounts {
	c := MessageCounts{Total: m.Total, Pending: m.Pending, Processing: m.Processing, Completed: m.Completed, DeadLetter: m.DeadLetter}
	if m.Failed != nil {
		c.Failed = *m.Failed
	}
	return c
}

// ConfigureQueue is Queue(name).Config(cfg).Create().Execute(ctx): on 2.x
// options left nil keep their value. A 0.15.1 broker replaces the whole
// configuration: every option left nil goes back to its default (LeaseTime
// 300 s, RetryLimit 3, RetryDelay 1 s, TTL 1 h, the rest off or 0,
// Namespace and Task ""), so send the full set for the same result on
// both. TTL drops nothing on either generation; Retention and MaxWaitTime
// delete pending messages: docs/ADMIN.md#ttl-retention-and-defaults.
func (a *Admin) ConfigureQueue(ctx context.Context, name string, cfg QueueConfig) (QueueInfo, error) {
	return a.c.Queue(name).Config(cfg).Create().Execute(ctx)
}

// ReplaceQueueConfig is ConfigureQueue in replace mode: options left nil
// in cfg go back to the broker's defaults.
func (a *Admin) ReplaceQueueConfig(ctx context.Context, name string, cfg QueueConfig) (QueueInfo, error) {
	return a.c.Queue(name).Config(cfg).Create().Replace().Execute(ctx)
}

// DeleteQueue is Queue(name).Delete().Execute(ctx).
func (a *Admin) DeleteQueue(ctx context.Context, name string) (DeleteResult, error) {
	return a.c.Queue(name).Delete().Execute(ctx)
}

// Health is the broker's report on itself. Engine and Raft are 2.x only;
// Database, Server, WorkerID, WorkerStatus and SharedState 0.15.1 only.
type Health struct {
	// Healthy is true when the broker answered 200 with status "healthy".
	Healthy    bool   `json:"healthy"`
	Status     string `json:"status"`     // "healthy", "settling" while a 2.x broker starts, ...
	HTTPStatus int    `json:"httpStatus"` // 200 or 503
	Engine     string `json:"engine,omitempty"`
	Version    string `json:"version,omitempty"` // 0.15.1 always says "1.0.0"
	Database   string `json:"database,omitempty"`
	Server     string `json:"server,omitempty"`
	// WorkerID is the worker that answered; WorkerStatus its state.
	WorkerID     int             `json:"workerId,omitempty"`
	WorkerStatus string          `json:"workerStatus,omitempty"`
	SharedState  json.RawMessage `json:"sharedState,omitempty"` // as sent
	Raft         *RaftStatus     `json:"raft,omitempty"`
}

// RaftStatus is a 2.x broker's node in its replication group.
type RaftStatus struct {
	Role         string `json:"role"` // "leader", "follower", ...
	Leader       bool   `json:"leader"`
	Term         uint64 `json:"term"`
	Applied      uint64 `json:"applied"` // log index
	Commit       uint64 `json:"commit"`  // log index
	Lag          uint64 `json:"lag"`
	StorageReady bool   `json:"storageReady"`
}

// Health asks the broker how it is (GET /health, no auth needed). A 503
// with a report is no error: Healthy is false. Errors are for no answer or
// one that is not a health report.
func (a *Admin) Health(ctx context.Context) (Health, error) {
	resp, err := a.c.do(ctx, call{method: http.MethodGet, path: wire.RouteHealth.Path()})
	var be *BrokerError
	if err != nil && !(errors.As(err, &be) && be.Status == http.StatusServiceUnavailable) {
		return Health{}, err
	}
	var h wire.HealthResponse
	if resp == nil || json.Unmarshal(resp.body, &h) != nil || h.Status == "" {
		if err != nil {
			return Health{}, err
		}
		return Health{}, resp.unreadable(http.MethodGet, wire.RouteHealth.Path(), "undecodable health answer")
	}
	out := Health{
		Healthy: resp.status == http.StatusOK && h.Status == "healthy", Status: h.Status, HTTPStatus: resp.status,
		Engine: h.Engine, Version: h.Version, Database: h.Database, Server: h.Server, WorkerID: h.WorkerID,
		SharedState: h.SharedState,
	}
	if h.Queen != nil {
		out.WorkerStatus = h.Queen.Status
	}
	if r := h.Raft; r != nil {
		out.Raft = &RaftStatus{Role: r.Role, Leader: r.Leader, Term: r.Term, Applied: r.Applied, Commit: r.Commit, Lag: r.Lag, StorageReady: r.StorageReady}
	}
	return out, nil
}

// refused reads a 2xx answer's verdict: success false, or without success
// an error text (0.15.1 answers 200 to failures).
func refused(success *bool, errText string) bool {
	if success != nil {
		return !*success
	}
	return errText != ""
}

// decodeList decodes a bare array or an object holding it under one of keys.
func decodeList(body []byte, out any, keys ...string) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	if body[0] == '[' {
		return json.Unmarshal(body, out)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return err
	}
	for _, k := range keys {
		if raw, ok := obj[k]; ok {
			return json.Unmarshal(raw, out)
		}
	}
	if msg, ok := obj["error"]; ok {
		return fmt.Errorf("broker error %s", msg)
	}
	return fmt.Errorf("no list under %s", strings.Join(keys, ", "))
}

// optTime parses an optional broker time; zero when absent.
func optTime(s *string) time.Time {
	if s == nil {
		return time.Time{}
	}
	return parseBrokerTime(*s)
}

// seconds turns the broker's seconds into a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
