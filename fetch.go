package queen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Per-partition fetch errors, matched (errors.Is) by PartitionRead.Err.
var (
	// ErrUnknownPartition: no such queue (2.x reads an unknown partition of
	// a queue as an empty one).
	ErrUnknownPartition = errors.New("queen: unknown queue or partition")
	// ErrOffsetOutOfRange: below the oldest kept record or past the next.
	ErrOffsetOutOfRange = errors.New("queen: offset out of range")
)

// Limits of the fetch options, as the broker applies them.
const (
	MaxFetchBytes      = 8 << 20          // byte budget of one partition per fetch
	MaxFetchWait       = 30 * time.Second // longest wait for records
	MaxFetchPartitions = 1024             // partitions one fetch may read
)

// FetchError is a broker's refusal to read one partition.
type FetchError struct {
	Queue, Partition string
	Offset           int64  // asked for
	Code             string // "UNKNOWN_TOPIC_OR_PARTITION", "OFFSET_OUT_OF_RANGE", ...
	// HighWatermark and LogStartOffset are the partition's bounds, when
	// reported.
	HighWatermark, LogStartOffset int64
}

// Error describes the refusal.
func (e *FetchError) Error() string {
	switch e.Code {
	case wire.FetchOffsetOutOfRange:
		return fmt.Sprintf("queen: fetch %s/%s: offset %d out of range [%d, %d]",
			e.Queue, e.Partition, e.Offset, e.LogStartOffset, e.HighWatermark)
	case wire.FetchUnknownPartition:
		return fmt.Sprintf("queen: fetch %s/%s: unknown queue or partition", e.Queue, e.Partition)
	}
	return fmt.Sprintf("queen: fetch %s/%s at %d: %s", e.Queue, e.Partition, e.Offset, e.Code)
}

// Is matches ErrUnknownPartition and ErrOffsetOutOfRange by code.
func (e *FetchError) Is(target error) bool {
	switch target {
	case ErrUnknownPartition:
		return e.Code == wire.FetchUnknownPartition
	case ErrOffsetOutOfRange:
		return e.Code == wire.FetchOffsetOutOfRange
	}
	return false
}

// FetchedRecord is one record read by offset.
type FetchedRecord struct {
	Partition     string          `json:"partition"`
	Offset        int64           `json:"offset"`
	TransactionID string          `json:"transactionId"`
	Payload       json.RawMessage `json:"payload"` // as pushed ("null" when empty)
	Timestamp     time.Time       `json:"timestamp,omitzero"`
}

// PartitionRead is what a fetch read from one partition.
type PartitionRead struct {
	Partition      string          `json:"partition"`
	From           int64           `json:"from"`           // the offset the read started at
	Records        []FetchedRecord `json:"records"`        // in offset order
	HighWatermark  int64           `json:"highWatermark"`  // the next record's offset
	LogStartOffset int64           `json:"logStartOffset"` // the oldest kept record's
	// Err is the broker's refusal for this partition (a *FetchError); nil
	// when read.
	Err error `json:"-"`
}

// NextOffset is the offset to fetch from to continue after this read: the
// last record's offset plus one, or From when nothing was read.
func (p PartitionRead) NextOffset() int64 {
	if n := len(p.Records); n > 0 {
		return p.Records[n-1].Offset + 1
	}
	return p.From
}

// FetchResult maps each partition asked for to what was read from it.
type FetchResult map[string]PartitionRead

// Err joins the per-partition errors (nil when every partition was read).
func (r FetchResult) Err() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(r)) {
		if e := r[name].Err; e != nil {
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

// FetchOption sets an option of Fetch.
type FetchOption func(*fetchConfig)

type fetchConfig struct {
	from     *int64
	offsets  map[string]int64
	maxBytes int
	wait     time.Duration
	err      error
}

func (f *fetchConfig) fail(err error) {
	if f.err == nil {
		f.err = err
	}
}

// FetchFrom starts every partition at offset (default: the oldest kept
// record).
func FetchFrom(offset int64) FetchOption {
	return func(f *fetchConfig) {
		if offset < 0 {
			f.fail(fmt.Errorf("%w: fetch offset %d is negative", ErrInvalidOption, offset))
		}
		f.from = &offset
	}
}

// FetchFromOffsets starts each named partition at its own offset ("" is
// the Default partition); the others start at FetchFrom's offset or the
// oldest kept record. Every name must be one of the partitions fetched.
func FetchFromOffsets(offsets map[string]int64) FetchOption {
	return func(f *fetchConfig) {
		f.offsets = make(map[string]int64, len(offsets))
		for p, o := range offsets {
			if o < 0 {
				f.fail(fmt.Errorf("%w: fetch offset %d of partition %q is negative", ErrInvalidOption, o, p))
			}
			if p == "" {
				p = wire.DefaultPartition
			}
			f.offsets[p] = o
		}
	}
}

// FetchMaxBytes bounds the payload bytes read from each partition (1 to
// MaxFetchBytes; the broker's default is 1 MiB). The first record is
// always returned, however large.
func FetchMaxBytes(n int) FetchOption {
	return func(f *fetchConfig) {
		if n < 1 || n > MaxFetchBytes {
			f.fail(fmt.Errorf("%w: fetch byte budget %d not in 1..%d", ErrInvalidOption, n, MaxFetchBytes))
		}
		f.maxBytes = n
	}
}

// FetchWait makes the fetch wait up to d (at most MaxFetchWait; whole
// milliseconds on the wire, rounded up as QueueConfig's durations are) for
// a record to arrive when there is none to read yet (default: answer at
// once).
func FetchWait(d time.Duration) FetchOption {
	return func(f *fetchConfig) {
		if d < 0 || d > MaxFetchWait {
			f.fail(fmt.Errorf("%w: fetch wait %v not in 0..%v", ErrInvalidOption, d, MaxFetchWait))
		}
		f.wait = d
	}
}

// Fetch reads partitions of the queue by offset (POST /api/v1/fetch): no
// group, lease or ack, and nothing moves. Keep your position with
// PartitionRead.NextOffset. A refused partition has its Err set; the
// returned error is for the request as a whole.
//
// Without a start offset the read begins at the oldest kept record. Empty
// partitions reads the builder's Partition (with neither,
// ErrEmptyPartition); "" is keyed as "Default". On 0.15.1, which has no
// fetch, the error matches ErrNotSupported.
func (b *QueueBuilder) Fetch(ctx context.Context, partitions []string, opts ...FetchOption) (FetchResult, error) {
	var cfg fetchConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if len(partitions) == 0 && b.partition != "" {
		partitions = []string{b.partition}
	}
	if err := b.checkFetch(partitions); err != nil {
		return nil, err
	}
	if len(partitions) == 0 {
		return nil, fmt.Errorf("%w: fetch needs at least one partition", ErrEmptyPartition)
	}
	var names []string
	seen := map[string]bool{}
	for _, p := range partitions {
		if p == "" {
			p = wire.DefaultPartition
		}
		if !seen[p] {
			seen[p] = true
			names = append(names, p)
		}
	}
	if len(names) > MaxFetchPartitions {
		return nil, fmt.Errorf("%w: fetch of %d partitions (at most %d)", ErrInvalidOption, len(names), MaxFetchPartitions)
	}
	for _, p := range slices.Sorted(maps.Keys(cfg.offsets)) {
		if !seen[p] {
			return nil, fmt.Errorf("%w: FetchFromOffsets names partition %q, which the fetch does not read", ErrInvalidOption, p)
		}
	}
	entries := make([]wire.FetchEntry, len(names))
	defaulted := make([]bool, len(names))
	for i, p := range names {
		e := wire.FetchEntry{Queue: b.queue, Partition: p, MaxBytes: cfg.maxBytes}
		switch o, ok := cfg.offsets[p]; {
		case ok:
			e.Offset = o
		case cfg.from != nil:
			e.Offset = *cfg.from
		default:
			defaulted[i] = true
		}
		entries[i] = e
	}
	out, err := b.c.fetch(ctx, wire.FetchRequest{Entries: entries, MaxWaitMs: int(ceilUnits(cfg.wait, time.Millisecond))})
	if err != nil {
		return nil, err
	}
	// "The oldest kept record" is sent as 0 (the broker has no sentinel):
	// after retention moved the log start, read again from it.
	var again []wire.FetchEntry
	var againAt []int
	for i, r := range out {
		if defaulted[i] && r.Error == wire.FetchOffsetOutOfRange && r.LogStartOffset > entries[i].Offset {
			e := entries[i]
			e.Offset = r.LogStartOffset
			again = append(again, e)
			againAt = append(againAt, i)
		}
	}
	if len(again) > 0 {
		more, err := b.c.fetch(ctx, wire.FetchRequest{Entries: again})
		if err != nil {
			return nil, err
		}
		for j, i := range againAt {
			out[i] = more[j]
			entries[i] = again[j]
		}
	}
	res := make(FetchResult, len(names))
	for i, r := range out {
		res[names[i]] = partitionReadFromWire(b.queue, names[i], entries[i].Offset, &r)
	}
	return res, nil
}

// fetch sends one fetch and returns its entries aligned with the request.
func (c *Client) fetch(ctx context.Context, req wire.FetchRequest) ([]wire.FetchEntryResult, error) {
	cl := call{method: http.MethodPost, path: wire.RouteFetch.Path(), body: req}
	if req.MaxWaitMs > 0 {
		cl.timeout = time.Duration(req.MaxWaitMs)*time.Millisecond + popMargin
	}
	var out wire.FetchResponse
	resp, err := c.doObject(ctx, cl, &out)
	if err != nil {
		var be *BrokerError
		if errors.As(err, &be) && (be.Status == http.StatusNotFound || be.Status == http.StatusMethodNotAllowed) {
			return nil, fmt.Errorf("%w: fetch by offset (POST %s answered %d; the broker predates it): %w",
				ErrNotSupported, wire.RouteFetch.Path(), be.Status, err)
		}
		return nil, err
	}
	if len(out.Entries) == len(req.Entries) {
		return out.Entries, nil
	}
	// Not index-aligned: match by partition name, and report what is missing.
	byName := make(map[string]wire.FetchEntryResult, len(out.Entries))
	for _, e := range out.Entries {
		byName[e.Partition] = e
	}
	aligned := make([]wire.FetchEntryResult, len(req.Entries))
	for i, e := range req.Entries {
		r, ok := byName[e.Partition]
		if !ok {
			return nil, resp.unreadable(http.MethodPost, wire.RouteFetch.Path(), fmt.Sprintf("fetch answer has no entry for partition %q", e.Partition))
		}
		aligned[i] = r
	}
	return aligned, nil
}

func partitionReadFromWire(queue, name string, from int64, r *wire.FetchEntryResult) PartitionRead {
	pr := PartitionRead{Partition: name, From: from, HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset,
		Records: make([]FetchedRecord, 0, len(r.Records))}
	if r.Error != "" {
		pr.Err = &FetchError{Queue: queue, Partition: name, Offset: from, Code: r.Error,
			HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset}
	}
	for _, rec := range r.Records {
		payload := rec.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		pr.Records = append(pr.Records, FetchedRecord{Partition: name, Offset: rec.Offset, TransactionID: rec.TransactionID,
			Payload: payload, Timestamp: parseBrokerTime(rec.TS)})
	}
	return pr
}

// ReadPartition yields one partition's records in offset order, from
// fromOffset to the end it had when the read started, one Fetch per page:
// no group, lease or ack. An error is yielded once and ends the sequence.
//
//	for rec, err := range client.Queue("orders").ReadPartition(ctx, "customer-42", 0) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(rec.Offset, string(rec.Payload))
//	}
//
// An offset below the oldest kept record gives ErrOffsetOutOfRange (Fetch
// reports PartitionRead.LogStartOffset).
func (b *QueueBuilder) ReadPartition(ctx context.Context, partition string, fromOffset int64) iter.Seq2[FetchedRecord, error] {
	return func(yield func(FetchedRecord, error) bool) {
		if fromOffset < 0 {
			yield(FetchedRecord{}, fmt.Errorf("%w: read offset %d is negative", ErrInvalidOption, fromOffset))
			return
		}
		if partition == "" {
			partition = wire.DefaultPartition
		}
		off, end := fromOffset, int64(-1)
		for {
			res, err := b.Fetch(ctx, []string{partition}, FetchFrom(off))
			if err != nil {
				yield(FetchedRecord{}, err)
				return
			}
			pr := res[partition]
			if pr.Err != nil {
				yield(FetchedRecord{}, pr.Err)
				return
			}
			if end < 0 {
				end = pr.HighWatermark
			}
			for _, rec := range pr.Records {
				if rec.Offset >= end {
					return
				}
				if !yield(rec, nil) {
					return
				}
				off = rec.Offset + 1
			}
			if len(pr.Records) == 0 || off >= end {
				return
			}
		}
	}
}
