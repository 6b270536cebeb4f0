package queen

// Wire sources for the admin calls (facts checked in the upstream broker,
// queen-mq/queen, 2.x: server/src/rsm/facade/real/phase2.rs,
// phase2/reads.rs and phase2/admin.rs):
//
//   - GET /api/v1/resources/queues answers {"queues":[row...], "kvRows":...};
//     each row has name, namespace, task, partitions (a count), messages
//     {total,pending,processing,completed,deadLetter}, retainedBytes,
//     options and createdAt.
//   - GET /api/v1/resources/queues/{queue} answers one object with
//     partitions as an array of {id,name,createdAt,messages,lastActivity,
//     oldestMessage,newestMessage} and the counters under totals; 404
//     {"error":"Queue not found"} when there is no such queue.
//   - GET /api/v1/dlq answers {"messages":[...],"total":N,"pagination":
//     {"limit","offset"}}; at that version the broker filters by queue and
//     consumerGroup only (limit default 100, at most 1000), sorted newest
//     failure first. The partition and time filters are sent for brokers
//     that honour them and also applied here to the page received.
//   - POST /api/v1/dlq/{id}/replay (and the older address form POST
//     /api/v1/messages/{partitionId}/{transactionId}/retry) answers
//     {"success","result":"moved"|"duplicate","queue","partition",
//     "consumerGroup","dlqId","originalTransactionId","replayedAs":{...},
//     "dlqRowRemoved"}; 404 {"result":"gone"} when the row is not there.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Admin groups the broker's administrative calls: consumer-group seek,
// inspection and deletion, queues, health, and the dead-letter queue. Get
// it with Client.Admin; it is safe for concurrent use.
type Admin struct{ c *Client }

// Admin returns the administrative calls of the client.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// ---------------------------------------------------------------- seek

// SeekConsumerGroupOptions says where a seek moves a consumer group. Set
// exactly one field.
type SeekConsumerGroupOptions struct {
	// Timestamp (RFC 3339, e.g. "2026-10-22T00:00:00Z") moves the group to
	// just before the first message stored at or after that time, so it
	// reads again everything from then on. An early time reads everything
	// still kept. (A 0.15.1 broker places the cursor on the last message at
	// or before the time; the client asks the broker's generation once, GET
	// /health, and sends a time one microsecond earlier there, so that the
	// messages stored at exactly that time are read again too.)
	Timestamp string
	// ToEnd moves the group past every message stored so far, so it reads
	// only what is pushed later.
	ToEnd bool
}

// SeekResult is the broker's report of a seek.
type SeekResult struct {
	// ConsumerGroup and Queue echo the request.
	ConsumerGroup string `json:"consumerGroup"`
	Queue         string `json:"queue"`
	// Partition is the partition of a per-partition seek, "" for a seek of
	// the whole queue.
	Partition string `json:"partition,omitempty"`
	// ToEnd is true when the group was moved to the end.
	ToEnd bool `json:"toEnd"`
	// Timestamp is the time the group was moved to (zero for ToEnd).
	Timestamp time.Time `json:"timestamp,omitzero"`
	// PartitionsUpdated is how many partition cursors moved. 0 on a 0.15.1
	// broker means the group or the queue does not exist there.
	PartitionsUpdated int `json:"partitionsUpdated"`
}

// SeekConsumerGroup moves the consumer group's position on every partition
// of queue, to a time or to the end (POST
// /api/v1/consumer-groups/{group}/queues/{queue}/seek). Leases the group
// holds there are dropped. Neither or both of Timestamp and ToEnd, or a
// Timestamp that is not RFC 3339, fails with ErrInvalidSeek before any
// request (an empty group or queue name with ErrEmptyGroup or
// ErrEmptyQueue). The group's later pops read from the new position; its
// subscription mode is not used again.
func (a *Admin) SeekConsumerGroup(ctx context.Context, group, queue string, opts SeekConsumerGroupOptions) (SeekResult, error) {
	return a.seek(ctx, group, queue, "", opts)
}

// SeekPartition is SeekConsumerGroup for one partition of the queue (POST
// .../queues/{queue}/partitions/{partition}/seek). A 0.15.1 broker ignores
// the options and always seeks such a partition to its end: when it reports
// that for a Timestamp seek, the result is returned with an error matching
// ErrNotSupported. An empty partition name fails with ErrEmptyPartition.
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
	asked := body.Timestamp
	if asked != "" {
		if body.Timestamp, err = a.c.seekTime(ctx, asked); err != nil {
			return SeekResult{}, err
		}
	}
	path := "/api/v1/consumer-groups/" + escape(group) + "/queues/" + escape(queue)
	if partition != "" {
		path += "/partitions/" + escape(partition)
	}
	path += "/seek"
	// The 2.x broker sends "updated":true where wire.SeekResponse has an
	// int: the shallower field shadows it, so either decodes.
	var out struct {
		wire.SeekResponse
		Updated json.RawMessage `json:"updated,omitempty"`
		Success *bool           `json:"success"`
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

// seekBody validates the options and returns the body to send. A timestamp
// in UTC ("Z") is sent as given; any other offset is sent converted to UTC.
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

// ---------------------------------------------------------------- consumer groups

// ConsumerGroupState is the broker's summary of a group on a queue.
type ConsumerGroupState string

const (
	// GroupLagging: the oldest unread message is more than five minutes old.
	GroupLagging ConsumerGroupState = "Lagging"
	// GroupStable: the group has consumed and keeps up.
	GroupStable ConsumerGroupState = "Stable"
	// GroupDead: the group has never consumed anything there.
	GroupDead ConsumerGroupState = "Dead"
)

// ConsumerGroup is one consumer group on one queue, as listed by
// ListConsumerGroups.
type ConsumerGroup struct {
	// Name is the group ("__QUEUE_MODE__" for the queue-mode cursor).
	Name string `json:"name"`
	// Queue is the queue the row is about.
	Queue string `json:"queue"`
	// PartitionCursors is how many partitions the group has a position on.
	PartitionCursors int `json:"partitionCursors"`
	// PartitionsWithLag is how many of them have unread messages.
	PartitionsWithLag int `json:"partitionsWithLag"`
	// TotalLag is the number of unread messages over all partitions.
	TotalLag int64 `json:"totalLag"`
	// MaxTimeLag is the age of the oldest unread message.
	MaxTimeLag time.Duration `json:"maxTimeLag"`
	// State is Lagging, Stable or Dead.
	State ConsumerGroupState `json:"state"`
	// SubscriptionMode is how the group started ("new", "all",
	// "timestamp"); empty for queue mode.
	SubscriptionMode string `json:"subscriptionMode,omitempty"`
	// SubscriptionTimestamp is the time the group started from (mode
	// timestamp; the epoch for mode all).
	SubscriptionTimestamp time.Time `json:"subscriptionTimestamp,omitzero"`
	// SubscriptionCreatedAt is when the group registered on the queue.
	SubscriptionCreatedAt time.Time `json:"subscriptionCreatedAt,omitzero"`
	// Conflation is true for a group that gets only the newest message of
	// each partition.
	Conflation bool `json:"conflation"`
}

// ListConsumerGroups lists every consumer group on every queue, one row
// per (group, queue), with its lag and state (GET /api/v1/consumer-groups).
func (a *Admin) ListConsumerGroups(ctx context.Context) ([]ConsumerGroup, error) {
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteGroups.Path()}, nil)
	if err != nil {
		return nil, err
	}
	var rows []wire.ConsumerGroupRow
	if err := decodeList(resp.body, &rows, "consumerGroups", "groups", "data"); err != nil {
		return nil, resp.refusal(http.MethodGet, wire.RouteGroups.Path(), "undecodable consumer-group list: "+err.Error())
	}
	out := make([]ConsumerGroup, 0, len(rows))
	for _, r := range rows {
		g := ConsumerGroup{
			Name: r.Name, Queue: r.QueueName, PartitionCursors: r.PartitionCursors, PartitionsWithLag: r.PartitionsWithLag,
			TotalLag: r.TotalLag, MaxTimeLag: seconds(r.MaxTimeLag), State: ConsumerGroupState(r.State),
			SubscriptionMode: r.SubscriptionMode, Conflation: r.Conflation,
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
	// Name is the group.
	Name string `json:"name"`
	// Queues maps each queue the group reads to its state there.
	Queues map[string]GroupQueueState `json:"queues"`
}

// GroupQueueState is a group's state on one queue.
type GroupQueueState struct {
	// Conflation is true when the group conflates on this queue.
	Conflation bool `json:"conflation"`
	// Partitions holds the group's cursor on each partition, by name.
	Partitions []GroupPartitionState `json:"partitions"`
}

// GroupPartitionState is a group's cursor on one partition.
type GroupPartitionState struct {
	// Partition is the partition's name.
	Partition string `json:"partition"`
	// WorkerID is the last worker that leased it, when known.
	WorkerID string `json:"workerId,omitempty"`
	// LastConsumedAt is when the group last consumed there (zero when the
	// broker does not say).
	LastConsumedAt time.Time `json:"lastConsumedAt,omitzero"`
	// TotalConsumed counts the messages the group consumed there.
	TotalConsumed int64 `json:"totalConsumed"`
	// OffsetLag is how many messages are still unread.
	OffsetLag int64 `json:"offsetLag"`
	// TimeLag is the age of the oldest unread message.
	TimeLag time.Duration `json:"timeLag"`
	// LeaseActive is true while a worker holds the partition.
	LeaseActive bool `json:"leaseActive"`
}

// GetConsumerGroup returns the group's cursor on each partition of each
// queue it reads (GET /api/v1/consumer-groups/{group}). A group with no
// position anywhere is a *BrokerError with Status 404; an empty name fails
// with ErrEmptyGroup before any request.
func (a *Admin) GetConsumerGroup(ctx context.Context, group string) (ConsumerGroupDetail, error) {
	if err := checkName(groupName, group); err != nil {
		return ConsumerGroupDetail{}, err
	}
	path := "/api/v1/consumer-groups/" + escape(group)
	var out wire.GroupDetail
	if _, err := a.c.doObject(ctx, call{method: http.MethodGet, path: path}, &out); err != nil {
		return ConsumerGroupDetail{}, err
	}
	d := ConsumerGroupDetail{Name: group, Queues: make(map[string]GroupQueueState, len(out))}
	for q, st := range out {
		gs := GroupQueueState{Conflation: st.Conflation, Partitions: make([]GroupPartitionState, 0, len(st.Partitions))}
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
	return d, nil
}

// DeleteConsumerGroupOptions narrow a consumer-group deletion.
type DeleteConsumerGroupOptions struct {
	// Queue limits the deletion to one queue; empty deletes the group on
	// every queue.
	Queue string
	// KeepMetadata keeps the group's registration (subscription mode and
	// time, conflation policy) and deletes only its positions. By default
	// both go, and the group's next pop registers it anew.
	KeepMetadata bool
}

// DeleteGroupResult says what a consumer-group deletion did.
type DeleteGroupResult struct {
	// ConsumerGroup is the deleted group.
	ConsumerGroup string `json:"consumerGroup"`
	// Queue is the queue of a one-queue deletion, "" for all queues.
	Queue string `json:"queue,omitempty"`
	// DeletedPartitions counts the partition cursors removed.
	DeletedPartitions int `json:"deletedPartitions"`
	// MetadataDeleted is true when the registration went too.
	MetadataDeleted bool `json:"metadataDeleted"`
	// Queues lists the queues the broker looked at.
	Queues []string `json:"queues,omitempty"`
}

// DeleteConsumerGroup removes the group's positions (and by default its
// registration) on one queue or on all of them (DELETE
// /api/v1/consumer-groups/{group}[/queues/{queue}]?deleteMetadata=). A
// group that does not exist is not an error: DeletedPartitions is 0. An
// empty name fails with ErrEmptyGroup before any request.
func (a *Admin) DeleteConsumerGroup(ctx context.Context, group string, opts DeleteConsumerGroupOptions) (DeleteGroupResult, error) {
	if err := checkName(groupName, group); err != nil {
		return DeleteGroupResult{}, err
	}
	if err := checkOptionalName(queueName, opts.Queue); err != nil {
		return DeleteGroupResult{}, err
	}
	path := "/api/v1/consumer-groups/" + escape(group)
	if opts.Queue != "" {
		path += "/queues/" + escape(opts.Queue)
	}
	q := url.Values{"deleteMetadata": {strconv.FormatBool(!opts.KeepMetadata)}}
	// Whatever the answer, the group's next pop asks again whether it is
	// registered (subscription.go).
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

// ---------------------------------------------------------------- queues

// MessageCounts are the message counters of a queue or a partition.
type MessageCounts struct {
	// Total counts the messages kept.
	Total int64 `json:"total"`
	// Pending counts those not yet consumed (by the slowest group).
	Pending int64 `json:"pending"`
	// Processing counts those leased right now.
	Processing int64 `json:"processing"`
	// Completed counts those consumed.
	Completed int64 `json:"completed"`
	// DeadLetter counts those in the dead-letter queue.
	DeadLetter int64 `json:"deadLetter"`
}

// QueueSummary is one queue of ListQueues.
type QueueSummary struct {
	// Name is the queue.
	Name string `json:"name"`
	// Namespace and Task tag the queue for discovery pops.
	Namespace string `json:"namespace,omitempty"`
	Task      string `json:"task,omitempty"`
	// Partitions is how many partitions the queue has.
	Partitions int `json:"partitions"`
	// Messages are the queue's counters.
	Messages MessageCounts `json:"messages"`
	// RetainedBytes is the size of the messages kept.
	RetainedBytes int64 `json:"retainedBytes,omitempty"`
	// Config is the queue's configuration.
	Config QueueConfig `json:"config"`
	// CreatedAt is when the queue was created.
	CreatedAt time.Time `json:"createdAt,omitzero"`
}

// QueueDetail is one queue with its partitions, from GetQueue.
type QueueDetail struct {
	QueueSummary
	// PartitionList holds each partition, by name.
	PartitionList []QueuePartition `json:"partitionList"`
}

// QueuePartition is one partition of a queue.
type QueuePartition struct {
	// Name is the partition's name; ID the broker's opaque id.
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
	// Messages are the partition's counters.
	Messages MessageCounts `json:"messages"`
	// CreatedAt, LastActivity, OldestMessage and NewestMessage are zero
	// when the broker does not report them.
	CreatedAt     time.Time `json:"createdAt,omitzero"`
	LastActivity  time.Time `json:"lastActivity,omitzero"`
	OldestMessage time.Time `json:"oldestMessage,omitzero"`
	NewestMessage time.Time `json:"newestMessage,omitzero"`
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
		return nil, resp.refusal(http.MethodGet, wire.RouteQueues.Path(), "undecodable queue list: "+err.Error())
	}
	out := make([]QueueSummary, 0, len(rows))
	for i := range rows {
		s, _ := queueFromWire(&rows[i])
		out = append(out, s)
	}
	return out, nil
}

// GetQueue returns one queue with its partitions (GET
// /api/v1/resources/queues/{queue}). A queue that does not exist is a
// *BrokerError with Status 404.
func (a *Admin) GetQueue(ctx context.Context, name string) (QueueDetail, error) {
	if err := checkName(queueName, name); err != nil {
		return QueueDetail{}, err
	}
	path := wire.RouteQueue.Path(name)
	var row wire.QueueRow
	if _, err := a.c.doObject(ctx, call{method: http.MethodGet, path: path}, &row); err != nil {
		return QueueDetail{}, err
	}
	s, parts := queueFromWire(&row)
	if s.Name == "" {
		s.Name = name
	}
	d := QueueDetail{QueueSummary: s, PartitionList: make([]QueuePartition, 0, len(parts))}
	for _, p := range parts {
		qp := QueuePartition{Name: p.Name, ID: p.ID, CreatedAt: parseBrokerTime(p.CreatedAt)}
		if p.Messages != nil {
			qp.Messages = countsFromWire(p.Messages)
		}
		qp.LastActivity, qp.OldestMessage, qp.NewestMessage = optTime(p.LastActivity), optTime(p.OldestMessage), optTime(p.NewestMessage)
		d.PartitionList = append(d.PartitionList, qp)
	}
	if d.Partitions == 0 {
		d.Partitions = len(d.PartitionList)
	}
	return d, nil
}

// queueFromWire reads a queue row of the list or the detail. The list
// reports partitions as a count, the detail as an array (returned).
func queueFromWire(r *wire.QueueRow) (QueueSummary, []wire.QueuePartitionRow) {
	s := QueueSummary{Name: r.Name, RetainedBytes: r.RetainedBytes, CreatedAt: parseBrokerTime(r.CreatedAt)}
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
	return MessageCounts{Total: m.Total, Pending: m.Pending, Processing: m.Processing, Completed: m.Completed, DeadLetter: m.DeadLetter}
}

// ConfigureQueue creates the queue or updates its options (POST
// /api/v1/configure). Options left nil in cfg keep their current value (a
// merge; 0.15.1 brokers always replace). It is Queue(name).Config(cfg).
// Create().Execute(ctx).
func (a *Admin) ConfigureQueue(ctx context.Context, name string, cfg QueueConfig) (QueueInfo, error) {
	return a.c.Queue(name).Config(cfg).Create().Execute(ctx)
}

// ReplaceQueueConfig is ConfigureQueue in replace mode: options left nil
// in cfg go back to the broker's defaults.
func (a *Admin) ReplaceQueueConfig(ctx context.Context, name string, cfg QueueConfig) (QueueInfo, error) {
	return a.c.Queue(name).Config(cfg).Create().Replace().Execute(ctx)
}

// DeleteQueue deletes the queue with its messages, partitions and
// consumer-group positions (DELETE /api/v1/resources/queues/{queue}). A
// queue that did not exist gives Existed false, not an error.
func (a *Admin) DeleteQueue(ctx context.Context, name string) (DeleteResult, error) {
	return a.c.Queue(name).Delete().Execute(ctx)
}

// ---------------------------------------------------------------- health

// Health is the broker's report on itself.
type Health struct {
	// Healthy is true when the broker answered 200 with status "healthy".
	Healthy bool `json:"healthy"`
	// Status is the broker's word ("healthy", "settling" while a 2.x
	// broker starts, ...).
	Status string `json:"status"`
	// HTTPStatus is the status code of the answer (200 or 503).
	HTTPStatus int `json:"httpStatus"`
	// Engine is "raft" on 2.x brokers, empty on older ones.
	Engine string `json:"engine,omitempty"`
	// Version is the broker's version (0.15.1 always says "1.0.0").
	Version string `json:"version,omitempty"`
	// Database is the database state of PostgreSQL-backed brokers.
	Database string `json:"database,omitempty"`
}

// Health asks the broker how it is (GET /health, no auth needed). An
// unhealthy broker that answers 503 with its report is not an error: the
// report says Healthy false. Errors are for no answer, or an answer that
// is not a health report.
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
		return Health{}, resp.refusal(http.MethodGet, wire.RouteHealth.Path(), "undecodable health answer")
	}
	return Health{
		Healthy: resp.status == http.StatusOK && h.Status == "healthy", Status: h.Status, HTTPStatus: resp.status,
		Engine: h.Engine, Version: h.Version, Database: h.Database,
	}, nil
}

// ---------------------------------------------------------------- DLQ

// DLQListOptions filter and page ListDLQ.
type DLQListOptions struct {
	// ConsumerGroup keeps the messages dead-lettered by that group.
	ConsumerGroup string
	// Partition keeps the messages of that partition.
	Partition string
	// From and To keep the messages that failed in [From, To); zero means
	// unbounded.
	From, To time.Time
	// Limit is the page size (the broker's default when 0: 100 on 2.x).
	Limit int
	// Offset skips that many matching messages (newest failure first).
	Offset int
}

// DeadLetter is one message in a dead-letter queue.
type DeadLetter struct {
	// ID is the dead-letter row's id (what ReplayDLQ needs).
	ID string `json:"id"`
	// Queue and Partition are where the message lived.
	Queue     string `json:"queue"`
	Partition string `json:"partition,omitempty"`
	// PartitionID is the broker's opaque partition id.
	PartitionID string `json:"partitionId,omitempty"`
	// ConsumerGroup is the group that dead-lettered it ("__QUEUE_MODE__"
	// for queue mode).
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// Offset is the message's position in its partition; -1 when unknown.
	Offset int64 `json:"offset"`
	// MessageID and TransactionID identify the original message.
	MessageID     string `json:"messageId,omitempty"`
	TransactionID string `json:"transactionId"`
	// Payload is the message as pushed (JSON).
	Payload json.RawMessage `json:"payload"`
	// Error is the failure reason stored with it.
	Error string `json:"error,omitempty"`
	// RetryCount is how many retries it had spent.
	RetryCount int `json:"retryCount"`
	// FailedAt is when it was dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
}

// DLQPage is one page of ListDLQ.
type DLQPage struct {
	// Messages is the page, newest failure first.
	Messages []DeadLetter `json:"messages"`
	// Total is how many messages matched the broker's filters, before
	// paging (it does not account for filters the broker ignored).
	Total int `json:"total"`
	// Limit and Offset echo the paging the broker applied.
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// ListDLQ lists the dead-lettered messages of queue (GET /api/v1/dlq). The
// filters are sent to the broker; since some brokers honour only the queue
// and group filters, the partition and time filters are also applied to
// the page received, so a returned message always matches them.
func (a *Admin) ListDLQ(ctx context.Context, queue string, opts DLQListOptions) (DLQPage, error) {
	if err := checkName(queueName, queue); err != nil {
		return DLQPage{}, err
	}
	if err := checkOptionalName(groupName, opts.ConsumerGroup); err != nil {
		return DLQPage{}, err
	}
	if err := checkOptionalName(partitionName, opts.Partition); err != nil {
		return DLQPage{}, err
	}
	if opts.Limit < 0 || opts.Offset < 0 {
		return DLQPage{}, fmt.Errorf("%w: negative limit or offset", ErrInvalidOption)
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
		return DLQPage{}, fmt.Errorf("%w: From %s is not before To %s", ErrInvalidOption, opts.From, opts.To)
	}
	q := wire.DLQQuery{Queue: queue, ConsumerGroup: opts.ConsumerGroup, Partition: opts.Partition, Limit: opts.Limit, Offset: opts.Offset}
	if !opts.From.IsZero() {
		q.From = opts.From.UTC().Format(time.RFC3339Nano)
	}
	if !opts.To.IsZero() {
		q.To = opts.To.UTC().Format(time.RFC3339Nano)
	}
	vals, err := q.Values()
	if err != nil {
		return DLQPage{}, fmt.Errorf("queen: encode dlq query: %w", err)
	}
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteDLQ.Path(), query: vals}, nil)
	if err != nil {
		return DLQPage{}, err
	}
	var page wire.DLQListResponse
	body := bytes.TrimSpace(resp.body)
	if len(body) > 0 && body[0] == '[' {
		err = json.Unmarshal(body, &page.Messages)
		page.Total = len(page.Messages)
	} else {
		err = json.Unmarshal(body, &page)
	}
	if err != nil {
		return DLQPage{}, resp.refusal(http.MethodGet, wire.RouteDLQ.Path(), "undecodable dlq answer: "+err.Error())
	}
	out := DLQPage{Total: page.Total, Limit: opts.Limit, Offset: opts.Offset, Messages: make([]DeadLetter, 0, len(page.Messages))}
	if page.Pagination != nil {
		out.Limit, out.Offset = page.Pagination.Limit, page.Pagination.Offset
	}
	for i := range page.Messages {
		d := deadLetterFromWire(&page.Messages[i])
		if d.Queue != "" && d.Queue != queue {
			continue
		}
		if d.Queue == "" {
			d.Queue = queue
		}
		if opts.Partition != "" && d.Partition != "" && d.Partition != opts.Partition {
			continue
		}
		if opts.ConsumerGroup != "" && d.ConsumerGroup != "" && d.ConsumerGroup != opts.ConsumerGroup {
			continue
		}
		if !d.FailedAt.IsZero() && ((!opts.From.IsZero() && d.FailedAt.Before(opts.From)) || (!opts.To.IsZero() && !d.FailedAt.Before(opts.To))) {
			continue
		}
		out.Messages = append(out.Messages, d)
	}
	return out, nil
}

func deadLetterFromWire(m *wire.DLQMessage) DeadLetter {
	d := DeadLetter{ID: m.ID, Queue: m.Queue, Partition: m.Partition, PartitionID: m.PartitionID, Offset: -1,
		MessageID: m.MessageID, TransactionID: m.TransactionID, RetryCount: m.RetryCount, FailedAt: parseBrokerTime(m.FailedAt)}
	if d.FailedAt.IsZero() {
		d.FailedAt = parseBrokerTime(m.CreatedAt)
	}
	if m.ConsumerGroup != nil {
		d.ConsumerGroup = *m.ConsumerGroup
	}
	if m.Offset != nil {
		d.Offset = *m.Offset
	}
	if m.ErrorMessage != nil {
		d.Error = *m.ErrorMessage
	}
	switch {
	case len(m.Payload) > 0:
		d.Payload = m.Payload
	case len(m.Data) > 0:
		d.Payload = m.Data
	default:
		d.Payload = json.RawMessage("null")
	}
	return d
}

// ReplayResult says what a DLQ replay did.
type ReplayResult struct {
	// Moved is true when a new copy was pushed to the queue's tail and the
	// dead-letter row removed; false for a duplicate (the destination
	// already holds that transaction id and nothing changed).
	Moved bool `json:"moved"`
	// Result is the broker's word: "moved" or "duplicate".
	Result string `json:"result"`
	// Queue and Partition are where the copy went.
	Queue     string `json:"queue,omitempty"`
	Partition string `json:"partition,omitempty"`
	// TransactionID is the copy's transaction id (2.x: "dlq:<row id>", so a
	// repeated replay cannot store two copies); MessageID its new id.
	TransactionID string `json:"transactionId,omitempty"`
	MessageID     string `json:"messageId,omitempty"`
	// Offset is the copy's position in its partition; -1 when unknown.
	Offset int64 `json:"offset"`
	// OriginalTransactionID is the dead-lettered message's transaction id.
	OriginalTransactionID string `json:"originalTransactionId,omitempty"`
}

// ReplayDLQ pushes a dead-lettered message back to the tail of its queue
// and partition and removes it from the dead-letter queue, in one step.
// It needs dl.ID (POST /api/v1/dlq/{id}/replay) or, for brokers without
// that route, dl.PartitionID and dl.TransactionID (POST
// /api/v1/messages/{partitionId}/{transactionId}/retry); with neither it
// fails with ErrNotReplayable before any request. A message no longer in
// the dead-letter queue is a *BrokerError with Status 404.
//
// A replay is not safe to send twice (the second finds the row gone and
// answers 404), so ReplayDLQ sends it again only when the broker surely
// did not apply it: a failure to connect, and the answers 429 and 503 (the
// broker's "not applied, retry"). When the outcome is open, the error
// matches ErrOutcomeUnknown: the connection failed or the ctx ended after
// the request may have reached the broker, or the broker answered a 5xx
// that may follow applying it (500, 502, 504, a 503 with code
// outcome_unknown; errors.As finds the *BrokerError). The message may
// have been moved: list the dead-letter queue, and look for the copy in
// the queue (a 2.x broker gives it the transaction id "dlq:" + dl.ID),
// before replaying it again.
func (a *Admin) ReplayDLQ(ctx context.Context, dl DeadLetter) (ReplayResult, error) {
	byAddress := dl.PartitionID != "" && dl.TransactionID != ""
	if dl.ID == "" && !byAddress {
		return ReplayResult{}, ErrNotReplayable
	}
	addrPath := ""
	if byAddress {
		addrPath = "/api/v1/messages/" + escape(dl.PartitionID) + "/" + escape(dl.TransactionID) + "/retry"
	}
	path := addrPath
	if dl.ID != "" {
		path = "/api/v1/dlq/" + escape(dl.ID) + "/replay"
	}
	var out struct {
		wire.DLQMoveResponse
		Success *bool `json:"success"`
	}
	resp, err := a.c.doJSON(ctx, call{method: http.MethodPost, path: path, body: struct{}{}, once: true}, &out)
	var be *BrokerError
	if err != nil && addrPath != "" && path != addrPath && errors.As(err, &be) && routeMissing(be) {
		path = addrPath
		out.DLQMoveResponse, out.Success = wire.DLQMoveResponse{}, nil
		resp, err = a.c.doJSON(ctx, call{method: http.MethodPost, path: path, body: struct{}{}, once: true}, &out)
	}
	if err != nil {
		return ReplayResult{}, err
	}
	if refused(out.Success, out.Error) || out.Result == "gone" {
		return ReplayResult{}, &BrokerError{Status: resp.status, Method: http.MethodPost, Path: path, Body: resp.body,
			Code: out.Reason, Message: orDefault(out.Error, "replay refused")}
	}
	r := ReplayResult{Result: out.Result, Moved: out.Result == "moved", Queue: orDefault(out.Queue, dl.Queue),
		Partition: orDefault(out.Partition, dl.Partition), TransactionID: out.TransactionID, MessageID: out.MessageID,
		Offset: -1, OriginalTransactionID: orDefault(out.OriginalTransactionID, dl.TransactionID)}
	if out.Result == "" {
		r.Moved, r.Result = true, "moved"
	}
	if ra := out.ReplayedAs; ra != nil {
		r.TransactionID = orDefault(ra.TransactionID, r.TransactionID)
		if r.Moved {
			r.MessageID = orDefault(ra.MessageID, r.MessageID)
		}
		if ra.Offset != nil {
			r.Offset = *ra.Offset
		}
	}
	return r, nil
}

// routeMissing reports whether a broker error says the route does not
// exist: 2.x no_such_route, a 405, or a 404 whose body is not JSON.
func routeMissing(be *BrokerError) bool {
	if be.Status == http.StatusMethodNotAllowed || be.Code == "no_such_route" {
		return true
	}
	if be.Status != http.StatusNotFound {
		return false
	}
	// A JSON 404 is about the row (2.x {"result":"gone"}); an HTML or empty
	// one (0.15.1) means the route is unknown.
	return !json.Valid(be.Body)
}

// ---------------------------------------------------------------- helpers

// refused reads a 2xx answer's verdict: a failure when success is false
// or, with no success field, when there is an error text (0.15.1 answers
// 200 to failures).
func refused(success *bool, errText string) bool {
	if success != nil {
		return !*success
	}
	return errText != ""
}

// decodeList decodes a list answer that is either a bare array or an
// object holding the array under one of keys.
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
