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
//
// The 0.15.1 broker's views (server/src/routes/{resources,consumer_groups,
// dlq}.cpp; get_queues_v2, get_queue_v2, get_consumer_groups_v4,
// get_consumer_group_details_v1, get_dlq_messages_v1) differ: see each
// call's doc, PROTOCOL.md §17 and queentest's Broker015.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
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
	// CreateIfMissing seeks even a group that has no position on the queue
	// yet. By default the seek first looks the group up in the broker's
	// list of groups (GET /api/v1/consumer-groups) and fails with
	// ErrGroupNotFound when it has none there, so that a mistyped name creates nothing. A 2.x
	// broker then creates the group's positions; a 0.15.1 broker moves only
	// the positions a group already has, so there it still updates nothing
	// (PartitionsUpdated 0).
	CreateIfMissing bool
}

// ErrGroupNotFound: the consumer group has no position on the queue (or,
// for GetConsumerGroup, anywhere). It is returned by SeekConsumerGroup and
// SeekPartition before the seek is sent (unless
// SeekConsumerGroupOptions.CreateIfMissing), and by GetConsumerGroup; when
// the broker answered 404, errors.As finds its *BrokerError too.
var ErrGroupNotFound = errors.New("queen: consumer group not found")

// ErrQueueNotFound: GetQueue asked for a queue the broker does not have.
// When the broker answered 404 (2.x), errors.As finds its *BrokerError too;
// a 0.15.1 broker answers 200 {"error":"Queue not found"}.
var ErrQueueNotFound = errors.New("queen: queue not found")

// unknownQueue says whether be is a broker's answer to a queue view that
// it has no such queue: 2.x answers 404 with a JSON body (a 404 page is a
// missing route), 0.15.1 200 {"error":"Queue not found"}.
func unknownQueue(be *BrokerError) bool {
	return be.Status == http.StatusNotFound && json.Valid(be.Body) || strings.Contains(strings.ToLower(be.Message), "queue not found")
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
//
// Unless opts.CreateIfMissing is set, the group is looked up first and a
// group with no position on queue fails with ErrGroupNotFound, sending no
// seek. The check accepts a group that the broker's list of groups (as
// ListConsumerGroups returns it) has on that queue: on 2.x, one with a cursor there (one of its pops or seeks
// created it); on 0.15.1, one of whose pops claimed a partition of the
// queue. A 0.15.1 group whose pops have all found the queue empty has no
// position yet and is refused (it has nothing to move: its next pop starts
// where its subscription says).
func (a *Admin) SeekConsumerGroup(ctx context.Context, group, queue string, opts SeekConsumerGroupOptions) (SeekResult, error) {
	return a.seek(ctx, group, queue, "", opts)
}

// SeekPartition is SeekConsumerGroup for one partition of the queue (POST
// .../queues/{queue}/partitions/{partition}/seek). A 0.15.1 broker ignores
// the options and always seeks such a partition to its end, so a Timestamp
// seek of one partition on it fails with an error matching ErrNotSupported
// before anything is sent (the broker's generation is asked once per
// Client, GET /health); should a broker still answer such a seek with a
// move to the end, the result is returned with that error. An empty
// partition name fails with ErrEmptyPartition.
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
			// A broker that seeks one partition only to its end would
			// skip the partition's backlog: refused before it is sent.
			return SeekResult{}, fmt.Errorf("%w: a %s broker seeks one partition only to its end, not to %s (nothing sent; seek the whole group to the time, or the partition with ToEnd)",
				ErrNotSupported, g.Name, asked)
		}
		body.Timestamp = seekTime(g, asked)
	}
	path := wire.RouteSeekGroup.Path(group, queue)
	if partition != "" {
		path = wire.RouteSeekPartition.Path(group, queue, partition)
	}
	// A 0.15.1 per-partition seek answers {consumerGroup, queueName,
	// partitionName, success, updated (a bool: whether the group had a
	// cursor there), cursorMovedTo} with no seekToEnd or partitionsUpdated:
	// it always moves to the end.
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
		// The 0.15.1 shape: moved to the end; updated says whether the
		// group's one cursor there moved.
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
// ListConsumerGroups. Fields one broker generation never sends are said so;
// they keep their zero value (or -1, as said) there.
type ConsumerGroup struct {
	// Name is the group ("__QUEUE_MODE__" for the queue-mode cursor).
	Name string `json:"name"`
	// Queue is the queue the row is about.
	Queue string `json:"queue"`
	// PartitionCursors is how many partitions the group has a position on
	// (0.15.1: how many partitions one of its pops claimed).
	PartitionCursors int `json:"partitionCursors"`
	// PartitionsWithLag is how many of them have unread messages.
	PartitionsWithLag int `json:"partitionsWithLag"`
	// TotalLag is the number of unread messages over all partitions; -1
	// from a 0.15.1 broker, which does not count them (it sends null; the
	// group detail, GetConsumerGroup, has each partition's count).
	TotalLag int64 `json:"totalLag"`
	// MaxTimeLag is the age of the oldest unread message (2.x). A 0.15.1
	// broker reports the age of the newest unread message of the most
	// lagging partition instead, a lower bound, in whole seconds.
	MaxTimeLag time.Duration `json:"maxTimeLag"`
	// State is Lagging, Stable or Dead.
	State ConsumerGroupState `json:"state"`
	// SubscriptionMode is how the group started ("new", "all",
	// "timestamp"); empty for queue mode, and on 0.15.1 for a group that
	// started with mode all or none (0.15.1 records only new and
	// timestamp subscriptions).
	SubscriptionMode string `json:"subscriptionMode,omitempty"`
	// SubscriptionTimestamp is the time the group started from (mode
	// timestamp; the epoch for mode all on 2.x; zero when the broker sends
	// none).
	SubscriptionTimestamp time.Time `json:"subscriptionTimestamp,omitzero"`
	// SubscriptionCreatedAt is when the group registered on the queue.
	SubscriptionCreatedAt time.Time `json:"subscriptionCreatedAt,omitzero"`
	// Conflation is true for a group that gets only the newest message of
	// each partition. A 0.15.1 broker has no conflation and never sends it.
	Conflation bool `json:"conflation"`
	// Storage and Kind are the 2.x broker's words for the group's storage
	// ("segments") and kind ("queen"); a 0.15.1 broker never sends them.
	Storage string `json:"storage,omitempty"`
	Kind    string `json:"kind,omitempty"`
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
	// Name is the group.
	Name string `json:"name"`
	// Queues maps each queue the group reads to its state there.
	Queues map[string]GroupQueueState `json:"queues"`
}

// GroupQueueState is a group's state on one queue.
type GroupQueueState struct {
	// Conflation is true when the group conflates on this queue; a 0.15.1
	// broker never sends it.
	Conflation bool `json:"conflation"`
	// Kind is the 2.x broker's word for the group's kind ("queen"); a
	// 0.15.1 broker never sends it.
	Kind string `json:"kind,omitempty"`
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
	// TimeLag is the age of the oldest unread message (whole seconds).
	TimeLag time.Duration `json:"timeLag"`
	// LeaseActive is true while a worker holds the partition.
	LeaseActive bool `json:"leaseActive"`
}

// GetConsumerGroup returns the group's cursor on each partition of each
// queue it reads (GET /api/v1/consumer-groups/{group}). A group with no
// position anywhere fails with an error matching ErrGroupNotFound (a 2.x
// broker answers 404, and errors.As finds that *BrokerError; a 0.15.1
// broker answers {}, as it does for a group whose pops all found nothing).
// An empty name fails with ErrEmptyGroup before any request.
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
	// DeletedPartitions counts the partition cursors removed (0 for a
	// group or queue the broker does not know).
	DeletedPartitions int `json:"deletedPartitions"`
	// MetadataDeleted is true when the registration went too.
	MetadataDeleted bool `json:"metadataDeleted"`
	// Queues lists the queues the broker looked at. A 2.x broker sends it;
	// a 0.15.1 broker never does (nil there).
	Queues []string `json:"queues,omitempty"`
}

// DeleteConsumerGroup removes the group's positions (and by default its
// registration) on one queue or on all of them (DELETE
// /api/v1/consumer-groups/{group}[/queues/{queue}]?deleteMetadata=). A
// group (or queue) that does not exist is not an error: DeletedPartitions
// is 0. Both generations' answers are read: 2.x sends queueName (null for
// all queues) and queues; 0.15.1 sends queueName only for a one-queue
// deletion and never queues (Queue is then opts.Queue, Queues nil). An
// empty name fails with ErrEmptyGroup before any request.
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

// MessageCounts are the message counters of a queue or a partition. A
// 0.15.1 broker reads them from a statistics table it refreshes in the
// background, so they may lag a little behind.
type MessageCounts struct {
	// Total counts the messages kept.
	Total int64 `json:"total"`
	// Pending counts those not yet consumed (by the slowest group), the
	// ones being processed included, on both generations.
	Pending int64 `json:"pending"`
	// Processing counts those leased right now.
	Processing int64 `json:"processing"`
	// Completed counts those consumed; a 0.15.1 broker does not send it in
	// the queue list (ListQueues), only per queue (GetQueue).
	Completed int64 `json:"completed"`
	// Failed is a counter only 0.15.1's queue detail sends, and always 0.
	Failed int64 `json:"failed,omitempty"`
	// DeadLetter counts those in the dead-letter queue; a 0.15.1 broker
	// does not send it in the queue list, only per queue.
	DeadLetter int64 `json:"deadLetter"`
}

// QueueSummary is one queue of ListQueues. Fields one broker generation
// never sends are said so; they keep their zero value there.
type QueueSummary struct {
	// Name is the queue.
	Name string `json:"name"`
	// ID is the broker's id of the queue (a UUID on 0.15.1).
	ID string `json:"id,omitempty"`
	// Namespace and Task tag the queue for discovery pops.
	Namespace string `json:"namespace,omitempty"`
	Task      string `json:"task,omitempty"`
	// Partitions is how many partitions the queue has.
	Partitions int `json:"partitions"`
	// Messages are the queue's counters.
	Messages MessageCounts `json:"messages"`
	// RetainedBytes is the size of the messages kept; a 0.15.1 broker
	// never sends it.
	RetainedBytes int64 `json:"retainedBytes,omitempty"`
	// Config is the queue's configuration; a 0.15.1 broker sends none in
	// its queue views (only Namespace and Task are set there).
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
	// Name is the partition's name; ID the broker's opaque id (the
	// partitionId of its messages).
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
	// Messages are the partition's counters.
	Messages MessageCounts `json:"messages"`
	// CreatedAt is when the partition was created.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// LastActivity is the partition's last lease; a 0.15.1 broker never
	// sends it (zero there).
	LastActivity time.Time `json:"lastActivity,omitzero"`
	// OldestMessage is the creation time of the oldest message kept (2.x)
	// or of the oldest pending one (0.15.1); zero when there is none.
	OldestMessage time.Time `json:"oldestMessage,omitzero"`
	// NewestMessage is the creation time of the newest message; zero when
	// there is none.
	NewestMessage time.Time `json:"newestMessage,omitzero"`
}

// ListQueues lists the broker's queues with their counters and
// configuration (GET /api/v1/resources/queues). A 0.15.1 broker lists the
// newest queue first and sends no configuration, completed, dead-letter or
// size figures; its pending count, which leaves out the messages being
// processed, is returned with them added, as a 2.x broker counts.
func (a *Admin) ListQueues(ctx context.Context) ([]QueueSummary, error) {
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteQueues.Path()}, nil)
	if err != nil {
		return nil, err
	}
	var rows []wire.QueueRow
	if err := decodeList(resp.body, &rows, "queues", "data"); err != nil {
		return nil, resp.refusal(http.MethodGet, wire.RouteQueues.Path(), "undecodable queue list: "+err.Error())
	}
	// Which rows count pending the 0.15.1 way: their counters lack
	// "completed".
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
// /api/v1/resources/queues/{queue}). A queue that does not exist fails
// with an error matching ErrQueueNotFound (a 2.x broker answers 404, and
// errors.As finds that *BrokerError). A 0.15.1 broker sends no
// configuration here either.
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

// queueFromWire reads a queue row of the list or the detail. The list
// reports partitions as a count, the detail as an array (returned).
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
	// Database is the database state ("connected") of a 0.15.1 broker; a
	// 2.x broker never sends it.
	Database string `json:"database,omitempty"`
	// Server names a 0.15.1 broker's server ("C++ Queen Server
	// (libqueen)"); a 2.x broker never sends it.
	Server string `json:"server,omitempty"`
	// WorkerID is the 0.15.1 broker's worker that answered; WorkerStatus
	// that worker's state ("active"); a 2.x broker sends neither.
	WorkerID     int    `json:"workerId,omitempty"`
	WorkerStatus string `json:"workerStatus,omitempty"`
	// SharedState is a 0.15.1 broker's report on the state it shares
	// between servers, as sent ({"enabled":false} when it shares none); a
	// 2.x broker never sends it.
	SharedState json.RawMessage `json:"sharedState,omitempty"`
	// Raft is a 2.x broker's report on its node; nil from a 0.15.1 broker.
	Raft *RaftStatus `json:"raft,omitempty"`
}

// RaftStatus is a 2.x broker's node in its replication group.
type RaftStatus struct {
	// Role is the node's role ("leader", "follower", ...) and Leader true
	// when it leads.
	Role   string `json:"role"`
	Leader bool   `json:"leader"`
	// Term is the current election term.
	Term uint64 `json:"term"`
	// Applied and Commit are the log indexes applied and committed; Lag is
	// how far the node is behind.
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	Lag     uint64 `json:"lag"`
	// StorageReady is true once the node's storage is open.
	StorageReady bool `json:"storageReady"`
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

// ---------------------------------------------------------------- DLQ

// DLQListOptions filter and page ListDLQ.
type DLQListOptions struct {
	// ConsumerGroup keeps the messages dead-lettered by that group.
	ConsumerGroup string
	// Partition keeps the messages of that partition.
	Partition string
	// From and To keep the messages that failed in [From, To); zero means
	// unbounded. With either set, an entry whose failure time the broker
	// did not send (or sent unreadable) is left out.
	From, To time.Time
	// Limit is the page size; 0 means 100.
	Limit int
	// Offset skips that many matching messages (newest failure first).
	Offset int
}

// DeadLetter is one message in a dead-letter queue. Fields one broker
// generation never sends are said so; they keep their zero value (or -1,
// as said) there.
type DeadLetter struct {
	// ID is the dead-letter row's id (what ReplayDLQ needs). A 0.15.1
	// broker has no such id: ID is empty there, and the message's id is in
	// MessageID.
	ID string `json:"id"`
	// Queue and Partition are where the message lived.
	Queue     string `json:"queue"`
	Partition string `json:"partition,omitempty"`
	// PartitionID is the broker's opaque partition id.
	PartitionID string `json:"partitionId,omitempty"`
	// ConsumerGroup is the group that dead-lettered it ("__QUEUE_MODE__"
	// for queue mode).
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// Offset is the message's position in its partition; -1 when unknown
	// (a 0.15.1 broker has no offsets).
	Offset int64 `json:"offset"`
	// MessageID and TransactionID identify the original message.
	MessageID     string `json:"messageId,omitempty"`
	TransactionID string `json:"transactionId"`
	// Payload is the message as pushed (JSON).
	Payload json.RawMessage `json:"payload"`
	// Error is the failure reason stored with it.
	Error string `json:"error,omitempty"`
	// RetryCount is how many retries it had spent. (A broker that counts
	// retries per partition and group, as 0.15.1 does, stores that counter:
	// the retries of the batch at that position, not of this message.)
	RetryCount int `json:"retryCount"`
	// FailedAt is when it was dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// MessageCreatedAt is when the message was pushed (to the millisecond);
	// a 2.x broker does not send it (zero there).
	MessageCreatedAt time.Time `json:"messageCreatedAt,omitzero"`
	// ProducerSub is the authenticated subject that pushed the message,
	// when a 0.15.1 broker recorded one; a 2.x broker never sends it.
	ProducerSub string `json:"producerSub,omitempty"`
}

// DLQPage is one page of ListDLQ.
type DLQPage struct {
	// Messages is the page, newest failure first.
	Messages []DeadLetter `json:"messages"`
	// Total is how many messages matched, before paging. From a 2.x broker
	// it is the broker's count, which does not account for the filters it
	// ignores (partition, time); from a 0.15.1 broker, which sends no
	// count, it is counted here and accounts for every filter.
	Total int `json:"total"`
	// Limit and Offset echo the paging applied.
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// ListDLQ lists the dead-lettered messages of queue (GET /api/v1/dlq). The
// filters are sent to the broker; since a 2.x broker honours only the
// queue and group filters, the partition and time filters are also applied
// to the page received, so a returned message always matches them.
//
// A 0.15.1 broker pages wrongly (it sends every matching message whatever
// the limit, and nothing for any offset) and counts nothing: there the
// client learns the generation once (GET /health), asks once for the
// queue's whole list (with neither limit nor offset), and applies every
// filter, the offset and the limit itself, and counts Total. Each call then
// transfers the whole list. Its entries have no ID (MessageID holds the
// message's id) and cannot be replayed (ReplayDLQ fails with
// ErrNotSupported). DeadLetters iterates over every page.
func (a *Admin) ListDLQ(ctx context.Context, queue string, opts DLQListOptions) (DLQPage, error) {
	out, _, paged, err := a.listDLQ(ctx, queue, opts)
	if err != nil || paged {
		return out, err
	}
	if out.Limit == 0 {
		out.Limit = 100
	}
	from := min(out.Offset, len(out.Messages))
	out.Messages = out.Messages[from:min(from+out.Limit, len(out.Messages))]
	return out, nil
}

// DeadLetters yields the dead letters of queue that match opts, newest
// failure first, one ListDLQ page after another: opts.Limit is the page
// size (0 means 100; a 2.x broker caps it at 1,000), opts.Offset where to
// start. It ends at the broker's last page: when the rows read reach the
// broker's Total, or, without a Total, on a page shorter than asked. Pages
// are counted in the rows the broker sent, so a page that the client's own
// partition and time filters shortened does not end it early. An error (bad
// options, before any request; a page that failed) is yielded once and
// ends the sequence. Stop early by breaking out of the loop.
//
//	for dl, err := range client.Admin().DeadLetters(ctx, "emails", queen.DLQListOptions{}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(dl.Error, string(dl.Payload))
//	}
//
// Pages are read by offset from a list that may change meanwhile. A row
// dead-lettered meanwhile comes first and moves the rest down a place: a
// row may then be yielded twice (compare ID). A row replayed or purged
// meanwhile moves the rest up a place: a row may then be missed. To
// replay every dead letter, replay what one pass yields and run again
// until a pass yields nothing.
//
// A 0.15.1 broker does not page: one request brings its whole list
// (filtered here, as ListDLQ does), and DeadLetters yields all of it from
// opts.Offset; opts.Limit is no page size there.
func (a *Admin) DeadLetters(ctx context.Context, queue string, opts DLQListOptions) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		if opts.Limit == 0 {
			opts.Limit = 100
		}
		for {
			page, raw, paged, err := a.listDLQ(ctx, queue, opts)
			if err != nil {
				yield(DeadLetter{}, err)
				return
			}
			msgs := page.Messages
			if !paged {
				msgs = msgs[min(opts.Offset, len(msgs)):]
			}
			for _, dl := range msgs {
				if !yield(dl, nil) {
					return
				}
			}
			opts.Offset += raw
			if !paged || raw == 0 || (page.Total > 0 && opts.Offset >= page.Total) || (page.Total <= 0 && raw < opts.Limit) {
				return
			}
		}
	}
}

// checkDLQOptions refuses bad ListDLQ options before any request.
func checkDLQOptions(queue string, opts DLQListOptions) error {
	if err := checkName(queueName, queue); err != nil {
		return err
	}
	if err := checkOptionalName(groupName, opts.ConsumerGroup); err != nil {
		return err
	}
	if err := checkOptionalName(partitionName, opts.Partition); err != nil {
		return err
	}
	if opts.Limit < 0 || opts.Offset < 0 {
		return fmt.Errorf("%w: negative limit or offset", ErrInvalidOption)
	}
	if !opts.From.IsZero() && !opts.To.IsZero() && !opts.From.Before(opts.To) {
		return fmt.Errorf("%w: From %s is not before To %s", ErrInvalidOption, opts.From, opts.To)
	}
	return nil
}

// listDLQ asks the broker for one page. raw is how many rows the broker
// sent, before the client's own filters. On a broker that pages (paged)
// out is that page; on one that does not (0.15.1), out.Messages is the
// whole filtered list, neither offset nor limit applied.
func (a *Admin) listDLQ(ctx context.Context, queue string, opts DLQListOptions) (out DLQPage, raw int, paged bool, err error) {
	if err := checkDLQOptions(queue, opts); err != nil {
		return DLQPage{}, 0, false, err
	}
	g, err := a.c.generation(ctx)
	if err != nil {
		return DLQPage{}, 0, false, err
	}
	q := wire.DLQQuery{Queue: queue, ConsumerGroup: opts.ConsumerGroup}
	if g.DLQPaging {
		q.Limit, q.Offset = opts.Limit, opts.Offset
	}
	if g.DLQFilters {
		q.Partition = opts.Partition
		if !opts.From.IsZero() {
			q.From = opts.From.UTC().Format(time.RFC3339Nano)
		}
		if !opts.To.IsZero() {
			q.To = opts.To.UTC().Format(time.RFC3339Nano)
		}
	}
	vals, err := q.Values()
	if err != nil {
		return DLQPage{}, 0, false, fmt.Errorf("queen: encode dlq query: %w", err)
	}
	resp, err := a.c.doObject(ctx, call{method: http.MethodGet, path: wire.RouteDLQ.Path(), query: vals}, nil)
	if err != nil {
		return DLQPage{}, 0, false, err
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
		return DLQPage{}, 0, false, resp.refusal(http.MethodGet, wire.RouteDLQ.Path(), "undecodable dlq answer: "+err.Error())
	}
	out = DLQPage{Total: page.Total, Limit: opts.Limit, Offset: opts.Offset, Messages: make([]DeadLetter, 0, len(page.Messages))}
	if page.Pagination != nil && g.DLQPaging {
		out.Limit, out.Offset = page.Pagination.Limit, page.Pagination.Offset
	}
	for i := range page.Messages {
		d := deadLetterFromWire(&page.Messages[i], !g.DLQRowIDs)
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
		if (!opts.From.IsZero() || !opts.To.IsZero()) && !inWindow(d.FailedAt, opts.From, opts.To) {
			continue // with no (readable) failure time, a row cannot be shown to match
		}
		out.Messages = append(out.Messages, d)
	}
	if !g.DLQTotal {
		out.Total = len(out.Messages)
	}
	return out, len(page.Messages), g.DLQPaging, nil
}

// inWindow reports whether t is known (not zero) and in [from, to), a zero
// bound being open.
func inWindow(t, from, to time.Time) bool {
	return !t.IsZero() && (from.IsZero() || !t.Before(from)) && (to.IsZero() || t.Before(to))
}

// deadLetterFromWire reads one entry; legacy says it is a 0.15.1 one, whose
// id is the message's and whose createdAt is the message's creation.
func deadLetterFromWire(m *wire.DLQMessage, legacy bool) DeadLetter {
	d := DeadLetter{ID: m.ID, Queue: m.Queue, Partition: m.Partition, PartitionID: m.PartitionID, Offset: -1,
		MessageID: m.MessageID, TransactionID: m.TransactionID, RetryCount: m.RetryCount, FailedAt: parseBrokerTime(m.FailedAt)}
	if legacy {
		d.ID, d.MessageID, d.MessageCreatedAt = "", m.ID, parseBrokerTime(m.CreatedAt)
	} else if d.FailedAt.IsZero() {
		d.FailedAt = parseBrokerTime(m.CreatedAt)
	}
	if m.ProducerSub != nil {
		d.ProducerSub = *m.ProducerSub
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
// A 0.15.1 broker has no replay route: when the client already knows the
// broker is one (a ListDLQ, or a seek to a time, asked its generation),
// ReplayDLQ fails with ErrNotSupported before any request; otherwise it
// fails with ErrNotSupported when the broker answers that it has no such
// route (a 404 that is not JSON, 2.x's no_such_route, a 405). There, a
// dead letter can be pushed again by hand (its Payload, to its Queue and
// Partition) and the original left in the dead-letter queue.
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
	if g := a.c.mem.gen.Load(); g != nil && !g.DLQReplay {
		return ReplayResult{}, fmt.Errorf("%w: a %s broker cannot replay dead letters", ErrNotSupported, g.Name)
	}
	addrPath := ""
	if byAddress {
		addrPath = wire.RouteMessageRetry.Path(dl.PartitionID, dl.TransactionID)
	}
	path := addrPath
	if dl.ID != "" {
		path = wire.RouteDLQReplay.Path(dl.ID)
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
	if err != nil && errors.As(err, &be) && routeMissing(be) {
		return ReplayResult{}, fmt.Errorf("%w: the broker has no dead-letter replay route (POST %s answered %d)", ErrNotSupported, path, be.Status)
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
