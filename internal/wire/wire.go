// Package wire is the one source of the Queen broker's HTTP API (see
// PROTOCOL.md in the design notes): its routes (Route, whose Path builds a
// request's escaped path), the request and response bodies and the query
// encoding of pops, and what each broker generation does (Generation). It
// has no logic beyond encoding: both the client and the in-memory broker
// (queentest) use it, so that they agree on routes and field names by
// construction while each keeps its own semantics.
//
// Optional fields are pointers or carry omitempty so that a field the sender
// did not set stays off the wire; fields that differ between broker
// generations (2.x and 0.15.1) are all optional.
package wire

import (
	"encoding/json"
	"net/url"

	"github.com/google/go-querystring/query"
)

// QueueModeGroup is the consumer-group name the broker reports for queue mode
// (no consumer group given).
const QueueModeGroup = "__QUEUE_MODE__"

// DefaultPartition is the partition a push without a partition goes to.
const DefaultPartition = "Default"

// Ack statuses as they travel on the wire.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusRetry     = "retry"
	StatusDLQ       = "dlq"
)

// Push item statuses as they travel on the wire.
const (
	PushQueued    = "queued"
	PushDuplicate = "duplicate"
	PushError     = "error"
	// PushBuffered and PushFailed are 0.15.1 statuses: the item was not stored.
	PushBuffered = "buffered"
	PushFailed   = "failed"
)

// CodeOutcomeUnknown is the code of a 2.x refusal (503) after which the
// broker cannot tell whether it applied the request (CHANGELOG; PROTOCOL.md
// §1.1).
const CodeOutcomeUnknown = "outcome_unknown"

// ErrorBody is the error envelope of the broker: 2.x sends error and code,
// 0.15.1 sends error and sometimes success:false with an empty messages list.
type ErrorBody struct {
	Error   string `json:"error,omitempty"`
	Code    string `json:"code,omitempty"`
	Leader  string `json:"leader,omitempty"`
	Path    string `json:"path,omitempty"`
	Success *bool  `json:"success,omitempty"`
}

// PushRequest is the body of POST /api/v1/push.
type PushRequest struct {
	Items []PushItem `json:"items"`
}

// PushItem is one message of a push.
type PushItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId,omitempty"`
	TraceID       string          `json:"traceId,omitempty"`
}

// PushResult is one entry of the push reply (an array in input order). The
// 2.x broker and 0.15.1 both use snake_case for the id fields; 2.x sends
// index, message_id, transaction_id, queueName, status and offset, 0.15.1
// partition_id and trace_id instead of offset.
type PushResult struct {
	Index         int     `json:"index"`
	MessageID     string  `json:"message_id,omitempty"`
	TransactionID string  `json:"transaction_id,omitempty"`
	QueueName     string  `json:"queueName,omitempty"`
	Queue         string  `json:"queue,omitempty"`
	Status        string  `json:"status"`
	Offset        *int64  `json:"offset,omitempty"`
	PartitionID   string  `json:"partition_id,omitempty"`
	TraceID       *string `json:"trace_id,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// PopQuery is the query string of the pop routes. Pointer fields are sent
// only when set, so that "not set" and "set to the zero value" differ.
type PopQuery struct {
	ConsumerGroup    string `url:"consumerGroup,omitempty"`
	SubscriptionMode string `url:"subscriptionMode,omitempty"`
	SubscriptionFrom string `url:"subscriptionFrom,omitempty"`
	Batch            *int   `url:"batch,omitempty"`
	Partitions       *int   `url:"partitions,omitempty"`
	Wait             *bool  `url:"wait,omitempty"`
	Timeout          *int   `url:"timeout,omitempty"`
	AutoAck          bool   `url:"autoAck,omitempty"`
	Conflation       bool   `url:"conflation,omitempty"`
	Autopilot        bool   `url:"autopilot,omitempty"`
	LeaseSeconds     int    `url:"leaseSeconds,omitempty"`
	Namespace        string `url:"namespace,omitempty"`
	Task             string `url:"task,omitempty"`
}

// Values encodes q as URL query values.
func (q PopQuery) Values() (url.Values, error) { return query.Values(q) }

// AckItem is one acknowledgment. In a single ack it is the body itself
// (with ConsumerGroup at top level); in a batch it is an element of
// Acknowledgments.
type AckItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId,omitempty"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
}

// AckRequest is the body of POST /api/v1/ack.
type AckRequest struct {
	AckItem
	ConsumerGroup string `json:"consumerGroup,omitempty"`
}

// AckBatchRequest is the body of POST /api/v1/ack/batch. The consumer group
// is top-level only: one group for every item.
type AckBatchRequest struct {
	ConsumerGroup   string    `json:"consumerGroup,omitempty"`
	Acknowledgments []AckItem `json:"acknowledgments"`
}

// AckResult is one entry of the ack reply (an array in input order): 2.x
// sends every field but the 0.15.1 QueueName and PartitionName; 0.15.1
// sends no noop.
type AckResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
	Noop          bool    `json:"noop"`
	QueueName     *string `json:"queueName,omitempty"`
	PartitionName *string `json:"partitionName,omitempty"`
}

// RenewRequest is the body of POST /api/v1/lease/{leaseId}/extend.
type RenewRequest struct {
	Seconds int `json:"seconds"`
}

// RenewResponse is the 2.x object reply of a lease extension. 0.15.1 answers
// an array of {index, leaseId, success, error, expiresAt} instead.
type RenewResponse struct {
	Index          *int    `json:"index,omitempty"`
	LeaseID        string  `json:"leaseId"`
	Success        bool    `json:"success"`
	Renewed        int     `json:"renewed"`
	NewExpiresAt   *string `json:"newExpiresAt"`
	ExpiresAt      *string `json:"expiresAt"`
	LeaseExpiresAt *string `json:"lease_expires_at"`
	Error          *string `json:"error,omitempty"`
}

// TxnRequest is the body of POST /api/v1/transaction.
type TxnRequest struct {
	Operations     []TxnOp  `json:"operations"`
	RequiredLeases []string `json:"requiredLeases,omitempty"`
}

// Transaction operation types.
const (
	TxnPush = "push"
	TxnAck  = "ack"
)

// TxnOp is one operation of a transaction: a push (Items) or an ack.
type TxnOp struct {
	Type          string     `json:"type"`
	Items         []PushItem `json:"items,omitempty"`
	TransactionID string     `json:"transactionId,omitempty"`
	PartitionID   string     `json:"partitionId,omitempty"`
	LeaseID       string     `json:"leaseId,omitempty"`
	ConsumerGroup string     `json:"consumerGroup,omitempty"`
	Status        string     `json:"status,omitempty"`
	Error         string     `json:"error,omitempty"`
}

// TxnResponse is the reply of a transaction: HTTP 200 on commit and on
// rollback; Success tells which.
type TxnResponse struct {
	TransactionID string      `json:"transactionId"`
	Success       bool        `json:"success"`
	Reason        string      `json:"reason,omitempty"`
	Error         string      `json:"error,omitempty"`
	FailedIndex   *int        `json:"failedIndex,omitempty"`
	Results       []TxnResult `json:"results"`
}

// TxnResult is the result of one push item or ack of a committed
// transaction.
type TxnResult struct {
	Index         int     `json:"index"`
	Type          string  `json:"type"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId,omitempty"`
	MessageID     string  `json:"messageId,omitempty"`
	QueueName     string  `json:"queueName,omitempty"`
	PartitionID   string  `json:"partitionId,omitempty"`
	Duplicate     bool    `json:"duplicate,omitempty"`
	Error         *string `json:"error,omitempty"`
	DLQ           bool    `json:"dlq,omitempty"`
}

// QueueOptions are the options of POST /api/v1/configure. Every field is
// optional: nil means "not sent". The last four are 2.x options.
type QueueOptions struct {
	LeaseTime                 *int  `json:"leaseTime,omitempty"`
	RetryLimit                *int  `json:"retryLimit,omitempty"`
	RetryDelay                *int  `json:"retryDelay,omitempty"`
	Priority                  *int  `json:"priority,omitempty"`
	DelayedProcessing         *int  `json:"delayedProcessing,omitempty"`
	WindowBuffer              *int  `json:"windowBuffer,omitempty"`
	MaxSize                   *int  `json:"maxSize,omitempty"`
	TTL                       *int  `json:"ttl,omitempty"`
	RetentionSeconds          *int  `json:"retentionSeconds,omitempty"`
	CompletedRetentionSeconds *int  `json:"completedRetentionSeconds,omitempty"`
	RetentionEnabled          *bool `json:"retentionEnabled,omitempty"`
	DeadLetterQueue           *bool `json:"deadLetterQueue,omitempty"`
	DLQAfterMaxRetries        *bool `json:"dlqAfterMaxRetries,omitempty"`
	EncryptionEnabled         *bool `json:"encryptionEnabled,omitempty"`
	MaxWaitTimeSeconds        *int  `json:"maxWaitTimeSeconds,omitempty"`

	MinPopWaitTime              *int    `json:"minPopWaitTime,omitempty"`
	DedupWindowSeconds          *int    `json:"dedupWindowSeconds,omitempty"`
	RetentionSinkHold           *string `json:"retentionSinkHold,omitempty"`
	RetentionSinkHoldMaxSeconds *int    `json:"retentionSinkHoldMaxSeconds,omitempty"`
}

// Configure modes.
const (
	ConfigureMerge   = "merge"
	ConfigureReplace = "replace"
)

// ConfigureRequest is the body of POST /api/v1/configure.
type ConfigureRequest struct {
	Queue     string        `json:"queue"`
	Namespace string        `json:"namespace,omitempty"`
	Task      string        `json:"task,omitempty"`
	Options   *QueueOptions `json:"options,omitempty"`
	Mode      string        `json:"mode,omitempty"`
}

// ConfigureResponse is the reply of a configure.
type ConfigureResponse struct {
	Configured bool         `json:"configured"`
	Queue      string       `json:"queue"`
	Namespace  *string      `json:"namespace,omitempty"`
	Task       *string      `json:"task,omitempty"`
	Options    QueueOptions `json:"options"`
	Error      string       `json:"error,omitempty"`
}

// DeleteQueueResponse is the reply of DELETE /api/v1/resources/queues/{queue}.
type DeleteQueueResponse struct {
	Deleted bool   `json:"deleted"`
	Existed bool   `json:"existed"`
	Queue   string `json:"queue"`
	Message string `json:"message,omitempty"`
}

// SeekRequest is the body of the seek routes. An empty body means toEnd.
type SeekRequest struct {
	ToEnd     bool   `json:"toEnd,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
}

// SeekResponse is the reply of a seek.
type SeekResponse struct {
	Success           bool    `json:"success"`
	ConsumerGroup     string  `json:"consumerGroup"`
	QueueName         string  `json:"queueName"`
	PartitionName     *string `json:"partitionName"`
	SeekToEnd         bool    `json:"seekToEnd"`
	TargetTimestamp   *string `json:"targetTimestamp"`
	PartitionsUpdated int     `json:"partitionsUpdated"`
	Updated           *bool   `json:"updated,omitempty"`
	Error             string  `json:"error,omitempty"`
}

// ConsumerGroupRow is one row (group × queue) of GET /api/v1/consumer-groups.
type ConsumerGroupRow struct {
	Name                  string   `json:"name"`
	Topics                []string `json:"topics"`
	QueueName             string   `json:"queueName"`
	Members               int      `json:"members"`
	PartitionCursors      int      `json:"partitionCursors"`
	PartitionsWithLag     int      `json:"partitionsWithLag"`
	TotalLag              *int64   `json:"totalLag"` // null on 0.15.1
	MaxTimeLag            float64  `json:"maxTimeLag"`
	State                 string   `json:"state"`
	Storage               string   `json:"storage,omitempty"`
	Kind                  string   `json:"kind,omitempty"`
	SubscriptionMode      *string  `json:"subscriptionMode,omitempty"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
	Conflation            bool     `json:"conflation"`
}

// GroupDetail is the reply of GET /api/v1/consumer-groups/{group}: one entry
// per queue the group reads.
type GroupDetail map[string]GroupQueueDetail

// GroupQueueDetail is a group's state on one queue.
type GroupQueueDetail struct {
	Conflation bool                   `json:"conflation"`
	Kind       string                 `json:"kind,omitempty"`
	Partitions []GroupPartitionDetail `json:"partitions"`
}

// GroupPartitionDetail is a group's cursor on one partition.
type GroupPartitionDetail struct {
	Partition      string  `json:"partition"`
	WorkerID       *string `json:"workerId"`
	LastConsumedAt *string `json:"lastConsumedAt"`
	TotalConsumed  int64   `json:"totalConsumed"`
	OffsetLag      int64   `json:"offsetLag"`
	TimeLagSeconds float64 `json:"timeLagSeconds"`
	LeaseActive    bool    `json:"leaseActive"`
}

// DeleteGroupResponse is the reply of the consumer-group delete routes.
type DeleteGroupResponse struct {
	Success           bool     `json:"success"`
	ConsumerGroup     string   `json:"consumerGroup"`
	QueueName         *string  `json:"queueName"`
	DeletedPartitions int      `json:"deletedPartitions"`
	MetadataDeleted   bool     `json:"metadataDeleted"`
	Queues            []string `json:"queues,omitempty"`
}

// DLQQuery is the query of GET /api/v1/dlq.
type DLQQuery struct {
	Queue         string `url:"queue,omitempty"`
	ConsumerGroup string `url:"consumerGroup,omitempty"`
	Partition     string `url:"partition,omitempty"`
	From          string `url:"from,omitempty"`
	To            string `url:"to,omitempty"`
	Limit         int    `url:"limit,omitempty"`
	Offset        int    `url:"offset,omitempty"`
}

// Values encodes q as URL query values.
func (q DLQQuery) Values() (url.Values, error) { return query.Values(q) }

// DLQMessage is one dead-lettered message.
type DLQMessage struct {
	ID            string          `json:"id"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	CreatedAt     string          `json:"createdAt"`
	ConsumerGroup *string         `json:"consumerGroup"`
	Offset        *int64          `json:"offset,omitempty"`
	MessageID     string          `json:"messageId"`
	TransactionID string          `json:"transactionId"`
	Data          json.RawMessage `json:"data"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	ErrorMessage  *string         `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	FailedAt      string          `json:"failedAt"`
	ProducerSub   *string         `json:"producerSub,omitempty"` // 0.15.1
}

// DLQListResponse is the reply of GET /api/v1/dlq. The 2.x broker answers
// {messages, total, pagination:{limit, offset}}, newest failure first.
type DLQListResponse struct {
	Messages   []DLQMessage   `json:"messages"`
	Total      int            `json:"total"`
	Pagination *DLQPagination `json:"pagination,omitempty"`
}

// DLQPagination echoes the page a DLQ list answered (limit defaults to 100,
// clamped 1..1000; offset defaults to 0).
type DLQPagination struct {
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// FetchRequest is the body of POST /api/v1/fetch.
type FetchRequest struct {
	Entries   []FetchEntry `json:"entries"`
	MaxWaitMs int          `json:"maxWaitMs,omitempty"`
	MinBytes  *int         `json:"minBytes,omitempty"`
}

// FetchEntry asks for the records of one partition from an offset.
type FetchEntry struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition,omitempty"`
	Offset    int64  `json:"offset"`
	MaxBytes  int    `json:"maxBytes,omitempty"`
}

// Per-entry fetch errors.
const (
	FetchUnknownPartition = "UNKNOWN_TOPIC_OR_PARTITION"
	FetchOffsetOutOfRange = "OFFSET_OUT_OF_RANGE"
)

// FetchResponse is the reply of a fetch, index-aligned with the request.
type FetchResponse struct {
	Entries []FetchEntryResult `json:"entries"`
}

// FetchEntryResult is the answer for one partition.
type FetchEntryResult struct {
	Queue          string        `json:"queue"`
	Partition      string        `json:"partition"`
	Records        []FetchRecord `json:"records"`
	HighWatermark  int64         `json:"highWatermark"`
	LogStartOffset int64         `json:"logStartOffset"`
	Error          string        `json:"error,omitempty"`
}

// FetchRecord is one record read by offset.
type FetchRecord struct {
	Offset        int64           `json:"offset"`
	TransactionID string          `json:"transactionId"`
	Payload       json.RawMessage `json:"payload"`
	TS            string          `json:"ts"`
}

// HealthResponse is the reply of GET /health (2.x and 0.15.1 fields).
type HealthResponse struct {
	Status   string      `json:"status"`
	Engine   string      `json:"engine,omitempty"`
	Version  string      `json:"version,omitempty"`
	Database string      `json:"database,omitempty"`
	Server   string      `json:"server,omitempty"`
	Raft     *HealthRaft `json:"raft,omitempty"`
	// 0.15.1 only:
	WorkerID    int             `json:"worker_id,omitempty"`
	SharedState json.RawMessage `json:"shared_state,omitempty"`
	Queen       *HealthWorker   `json:"queen,omitempty"`
}

// HealthWorker is the worker block a 0.15.1 broker adds to /health.
type HealthWorker struct {
	WorkerID int    `json:"worker_id"`
	Status   string `json:"status"`
}

// HealthRaft is the node block a 2.x broker adds to /health.
type HealthRaft struct {
	Role         string `json:"role"`
	Leader       bool   `json:"leader"`
	Term         uint64 `json:"term"`
	Applied      uint64 `json:"applied"`
	Commit       uint64 `json:"commit"`
	Lag          uint64 `json:"lag"`
	StorageReady bool   `json:"storageReady"`
}

// DLQMoveResponse is the 2.x reply of a DLQ replay (POST
// /api/v1/dlq/{id}/replay or POST /api/v1/messages/{partitionId}/{transactionId}/retry):
// result "moved" (a new copy was pushed and the row removed) or "duplicate"
// (the destination already holds that transaction id; nothing changed). 404
// answers {"success":false,"result":"gone"}.
type DLQMoveResponse struct {
	Success               bool        `json:"success"`
	Result                string      `json:"result"`
	Queue                 string      `json:"queue,omitempty"`
	Partition             string      `json:"partition,omitempty"`
	ConsumerGroup         *string     `json:"consumerGroup,omitempty"`
	DLQID                 string      `json:"dlqId,omitempty"`
	OriginalTransactionID string      `json:"originalTransactionId,omitempty"`
	ReplayedAs            *PushResult `json:"replayedAs,omitempty"`
	DLQRowRemoved         *bool       `json:"dlqRowRemoved,omitempty"`
	Reason                string      `json:"reason,omitempty"`
	Error                 string      `json:"error,omitempty"`
	TransactionID         string      `json:"transactionId,omitempty"`
	MessageID             string      `json:"messageId,omitempty"`
}

// MessageCounts are the message counters of a queue or partition in the
// resources views.
type MessageCounts struct {
	Total      int64  `json:"total"`
	Pending    int64  `json:"pending"`
	Processing int64  `json:"processing"`
	Completed  int64  `json:"completed"`
	Failed     *int64 `json:"failed,omitempty"`
	DeadLetter int64  `json:"deadLetter"`
}

// QueueRow is one queue of the resources views. In the list, Partitions is
// a count; in the detail (GET /api/v1/resources/queues/{queue}) it is an
// array of QueuePartitionRow and the counters are under Totals.
type QueueRow struct {
	ID            string          `json:"id,omitempty"`
	Name          string          `json:"name"`
	Queue         string          `json:"queue,omitempty"`
	Namespace     *string         `json:"namespace,omitempty"`
	Task          *string         `json:"task,omitempty"`
	Partitions    json.RawMessage `json:"partitions,omitempty"`
	Messages      *MessageCounts  `json:"messages,omitempty"`
	Totals        *MessageCounts  `json:"totals,omitempty"`
	RetainedBytes int64           `json:"retainedBytes,omitempty"`
	Options       QueueOptions    `json:"options"`
	CreatedAt     string          `json:"createdAt,omitempty"`
}

// QueuePartitionRow is one partition of the queue detail.
type QueuePartitionRow struct {
	ID            string         `json:"id,omitempty"`
	Name          string         `json:"name"`
	CreatedAt     string         `json:"createdAt,omitempty"`
	Messages      *MessageCounts `json:"messages,omitempty"`
	Stats         *MessageCounts `json:"stats,omitempty"` // 0.15.1's name for Messages
	LastActivity  *string        `json:"lastActivity,omitempty"`
	OldestMessage *string        `json:"oldestMessage,omitempty"`
	NewestMessage *string        `json:"newestMessage,omitempty"`
}
