package queen_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

func TestFetchSpecCall(t *testing.T) {
	stub, client := newWireStub(t, 200, `{"entries":[{"queue":"orders","partition":"customer-42","records":[
	 {"offset":0,"transactionId":"a","payload":{"total":10},"ts":"2026-10-22T00:00:00.000001Z"},
	 {"offset":1,"transactionId":"b","payload":7,"ts":"2026-10-22T00:00:01.000000Z"}],"highWatermark":2,"logStartOffset":0}]}`)
	ctx := t.Context()
	read, err := client.Queue("orders").Fetch(ctx, []string{"customer-42"}) // no group, lease or ack
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, record := range read["customer-42"].Records {
		lines = append(lines, fmt.Sprintln(record.Offset, string(record.Payload)))
	}
	if got := strings.Join(lines, ""); got != "0 {\"total\":10}\n1 7\n" {
		t.Fatalf("printed %q", got)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/fetch")
	jsonEqual(t, r.Body, `{"entries":[{"queue":"orders","partition":"customer-42","offset":0}]}`)
	pr := read["customer-42"]
	if pr.HighWatermark != 2 || pr.LogStartOffset != 0 || pr.Err != nil || pr.NextOffset() != 2 || read.Err() != nil {
		t.Fatalf("read = %+v", pr)
	}
	if rec := pr.Records[0]; rec.TransactionID != "a" || rec.Partition != "customer-42" || rec.Timestamp.IsZero() {
		t.Fatalf("record = %+v", rec)
	}
}

func TestFetchOptionsOnTheWire(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"entries":[
	 {"queue":"q","partition":"a","records":[],"highWatermark":9,"logStartOffset":0},
	 {"queue":"q","partition":"b","records":[],"highWatermark":9,"logStartOffset":0},
	 {"queue":"q","partition":"Default","records":[],"highWatermark":0,"logStartOffset":0}]}`)
	read, err := c.Queue("q").Fetch(t.Context(), []string{"a", "b", "a", ""},
		queen.FetchFrom(5), queen.FetchFromOffsets(map[string]int64{"b": 7}),
		queen.FetchMaxBytes(4096), queen.FetchWait(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, stub.only().Body, `{"entries":[
	 {"queue":"q","partition":"a","offset":5,"maxBytes":4096},
	 {"queue":"q","partition":"b","offset":7,"maxBytes":4096},
	 {"queue":"q","partition":"Default","offset":5,"maxBytes":4096}],"maxWaitMs":1500}`)
	if len(read) != 3 || read["b"].From != 7 || read["b"].NextOffset() != 7 {
		t.Fatalf("read = %+v", read)
	}

	// A wait that is not whole milliseconds is rounded up: never to zero
	// (answer at once).
	for d, want := range map[time.Duration]string{1500 * time.Microsecond: "2", time.Nanosecond: "1"} {
		stub, c = newWireStub(t, 200, `{"entries":[{"queue":"q","partition":"a","records":[],"highWatermark":0,"logStartOffset":0}]}`)
		if _, err := c.Queue("q").Fetch(t.Context(), []string{"a"}, queen.FetchWait(d)); err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, stub.only().Body, `{"entries":[{"queue":"q","partition":"a","offset":0}],"maxWaitMs":`+want+`}`)
	}
}

func TestFetchPerPartitionErrors(t *testing.T) {
	_, c := newWireStub(t, 200, `{"entries":[
	 {"queue":"q","partition":"ok","records":[{"offset":3,"transactionId":"t","payload":null,"ts":"2026-10-22T00:00:00Z"}],"highWatermark":4,"logStartOffset":3},
	 {"queue":"q","partition":"far","records":[],"highWatermark":4,"logStartOffset":3,"error":"OFFSET_OUT_OF_RANGE"}]}`)
	read, err := c.Queue("q").Fetch(t.Context(), []string{"ok", "far"}, queen.FetchFromOffsets(map[string]int64{"ok": 3, "far": 99}))
	if err != nil {
		t.Fatalf("a per-partition error is not a request error: %v", err)
	}
	if read["ok"].Err != nil || string(read["ok"].Records[0].Payload) != "null" {
		t.Fatalf("ok = %+v", read["ok"])
	}
	far := read["far"]
	var fe *queen.FetchError
	if !errors.Is(far.Err, queen.ErrOffsetOutOfRange) || !errors.As(far.Err, &fe) || fe.Offset != 99 || fe.HighWatermark != 4 || fe.LogStartOffset != 3 {
		t.Fatalf("far.Err = %v", far.Err)
	}
	if !errors.Is(read.Err(), queen.ErrOffsetOutOfRange) || errors.Is(read.Err(), queen.ErrUnknownPartition) {
		t.Fatalf("read.Err() = %v", read.Err())
	}

	_, c = newWireStub(t, 200, `{"entries":[{"queue":"nope","partition":"p","records":[],"highWatermark":0,"logStartOffset":0,"error":"UNKNOWN_TOPIC_OR_PARTITION"}]}`)
	read, err = c.Queue("nope").Fetch(t.Context(), []string{"p"})
	if err != nil || !errors.Is(read["p"].Err, queen.ErrUnknownPartition) {
		t.Fatalf("err = %v, p.Err = %v", err, read["p"].Err)
	}
}

func TestFetchDefaultStartFollowsRetention(t *testing.T) {
	// With no start offset the read starts at the oldest kept record: when
	// retention has moved it past 0, the client asks again from there.
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		if strings.Contains(string(r.Body), `"offset":0`) {
			return 200, `{"entries":[{"queue":"q","partition":"p","records":[],"highWatermark":10,"logStartOffset":8,"error":"OFFSET_OUT_OF_RANGE"}]}`
		}
		return 200, `{"entries":[{"queue":"q","partition":"p","records":[{"offset":8,"transactionId":"t8","payload":1,"ts":""},{"offset":9,"transactionId":"t9","payload":2,"ts":""}],"highWatermark":10,"logStartOffset":8}]}`
	})
	read, err := c.Queue("q").Fetch(t.Context(), []string{"p"})
	if err != nil || read["p"].Err != nil || len(read["p"].Records) != 2 || read["p"].From != 8 {
		t.Fatalf("read = %+v, err = %v", read["p"], err)
	}
	reqs := stub.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	jsonEqual(t, reqs[1].Body, `{"entries":[{"queue":"q","partition":"p","offset":8}]}`)

	// An explicit offset is never moved.
	stub, c = newWireStub(t, 200, `{"entries":[{"queue":"q","partition":"p","records":[],"highWatermark":10,"logStartOffset":8,"error":"OFFSET_OUT_OF_RANGE"}]}`)
	read, _ = c.Queue("q").Fetch(t.Context(), []string{"p"}, queen.FetchFrom(0))
	if !errors.Is(read["p"].Err, queen.ErrOffsetOutOfRange) || len(stub.requests()) != 1 {
		t.Fatalf("explicit offset moved: %+v", read["p"])
	}
}

func TestFetchNotSupported(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		body   string
	}{
		"0.15.1 HTML 404":   {404, `<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>`},
		"2.x no_such_route": {404, `{"code":"no_such_route","error":"not found","path":"/api/v1/fetch"}`},
	} {
		t.Run(name, func(t *testing.T) {
			_, c := newWireStub(t, tc.status, tc.body)
			_, err := c.Queue("q").Fetch(t.Context(), []string{"p"})
			var be *queen.BrokerError
			if !errors.Is(err, queen.ErrNotSupported) || !errors.As(err, &be) || be.Status != 404 {
				t.Fatalf("err = %v, want ErrNotSupported wrapping the 404", err)
			}
			if !strings.Contains(err.Error(), "not supported by this broker") {
				t.Fatalf("message %q does not say so", err)
			}
		})
	}
	_, c := newWireStub(t, 500, `{"error":"boom","code":"internal"}`)
	if _, err := c.Queue("q").Fetch(t.Context(), []string{"p"}); errors.Is(err, queen.ErrNotSupported) || err == nil {
		t.Fatalf("a 500 is not 'not supported': %v", err)
	}
}

func TestFetchBadInputSendsNothing(t *testing.T) {
	many := make([]string, queen.MaxFetchPartitions+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	tests := []struct {
		name  string
		queue string
		parts []string
		opts  []queen.FetchOption
		want  error
	}{
		{"no queue", "", []string{"p"}, nil, queen.ErrEmptyQueue},
		{"no partition", "q", nil, nil, queen.ErrEmptyPartition},
		{"negative offset", "q", []string{"p"}, []queen.FetchOption{queen.FetchFrom(-1)}, queen.ErrInvalidOption},
		{"negative partition offset", "q", []string{"p"}, []queen.FetchOption{queen.FetchFromOffsets(map[string]int64{"p": -2})}, queen.ErrInvalidOption},
		{"zero bytes", "q", []string{"p"}, []queen.FetchOption{queen.FetchMaxBytes(0)}, queen.ErrInvalidOption},
		{"too many bytes", "q", []string{"p"}, []queen.FetchOption{queen.FetchMaxBytes(queen.MaxFetchBytes + 1)}, queen.ErrInvalidOption},
		{"wait too long", "q", []string{"p"}, []queen.FetchOption{queen.FetchWait(time.Minute)}, queen.ErrInvalidOption},
		{"too many partitions", "q", many, nil, queen.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub, c := newWireStub(t, 200, `{"entries":[]}`)
			_, err := c.Queue(tt.queue).Fetch(t.Context(), tt.parts, tt.opts...)
			if !errors.Is(err, tt.want) || !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("err = %v, want %v (and ErrInvalidArgument)", err, tt.want)
			}
			stub.nothingSent()
		})
	}
}

func TestFetchUsesBuilderPartition(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"entries":[{"queue":"q","partition":"p9","records":[],"highWatermark":0,"logStartOffset":0}]}`)
	read, err := c.Queue("q").Partition("p9").Fetch(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := read["p9"]; !ok {
		t.Fatalf("read = %+v", read)
	}
	jsonEqual(t, stub.only().Body, `{"entries":[{"queue":"q","partition":"p9","offset":0}]}`)
}

// pagedPartition answers fetches from a log of n records, two records per
// page, whose high watermark grows by one after the first read.
func pagedPartition(t *testing.T, n int64) (*wireStub, *queen.Client) {
	reads := 0
	return newWireStubFunc(t, func(r stubReq) (int, string) {
		var req struct {
			Entries []struct {
				Offset int64 `json:"offset"`
			} `json:"entries"`
		}
		_ = json.Unmarshal(r.Body, &req)
		off := req.Entries[0].Offset
		high := n
		if reads > 0 {
			high = n + 1 // a record pushed during the read
		}
		reads++
		var recs []string
		for o := off; o < high && o < off+2; o++ {
			recs = append(recs, fmt.Sprintf(`{"offset":%d,"transactionId":"t%d","payload":{"n":%d},"ts":"2026-10-22T00:00:00Z"}`, o, o, o))
		}
		return 200, fmt.Sprintf(`{"entries":[{"queue":"q","partition":"p","records":[%s],"highWatermark":%d,"logStartOffset":0}]}`,
			strings.Join(recs, ","), high)
	})
}

func TestReadPartitionPagesToTheEnd(t *testing.T) {
	stub, c := pagedPartition(t, 5)
	var offsets []int64
	for rec, err := range c.Queue("q").ReadPartition(t.Context(), "p", 1) {
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, rec.Offset)
	}
	if fmt.Sprint(offsets) != "[1 2 3 4]" {
		t.Fatalf("offsets = %v, want 1..4 (the end when the read started)", offsets)
	}
	if n := len(stub.requests()); n != 2 {
		t.Fatalf("%d fetches, want 2 pages", n)
	}
}

func TestReadPartitionStopsWhenTheLoopBreaks(t *testing.T) {
	stub, c := pagedPartition(t, 100)
	for rec, err := range c.Queue("q").ReadPartition(t.Context(), "p", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Offset == 2 {
			break
		}
	}
	if n := len(stub.requests()); n != 2 {
		t.Fatalf("%d fetches after a break at offset 2, want 2", n)
	}
}

func TestReadPartitionErrors(t *testing.T) {
	_, c := newWireStub(t, 200, `{"entries":[{"queue":"q","partition":"p","records":[],"highWatermark":9,"logStartOffset":5,"error":"OFFSET_OUT_OF_RANGE"}]}`)
	n := 0
	for _, err := range c.Queue("q").ReadPartition(t.Context(), "p", 0) {
		n++
		if !errors.Is(err, queen.ErrOffsetOutOfRange) {
			t.Fatalf("err = %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("%d elements, want the error once", n)
	}
	// Each of these yields its error exactly once: a loop that saw nothing
	// would pass a check inside it.
	once := func(seq func(func(queen.FetchedRecord, error) bool), want error) {
		t.Helper()
		n := 0
		for _, err := range seq {
			n++
			if !errors.Is(err, want) {
				t.Fatalf("err = %v, want %v", err, want)
			}
		}
		if n != 1 {
			t.Fatalf("%d elements, want the error once", n)
		}
	}
	stub, c := newWireStub(t, 200, `{}`)
	once(c.Queue("q").ReadPartition(t.Context(), "p", -1), queen.ErrInvalidOption)
	stub.nothingSent()
	_, c = newWireStub(t, 404, `<html></html>`)
	once(c.Queue("q").ReadPartition(t.Context(), "p", 0), queen.ErrNotSupported)
}

// FetchFromOffsets keys its offsets like the result: "" is the Default
// partition. An offset for a partition the fetch does not read is a
// mistake (a misspelt name would read from the start without a word), and
// fails before any request.
func TestFetchFromOffsetsKeys(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"entries":[{"queue":"q","partition":"Default","records":[],"highWatermark":9,"logStartOffset":0}]}`)
	if _, err := c.Queue("q").Fetch(t.Context(), []string{""}, queen.FetchFromOffsets(map[string]int64{"": 4})); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, stub.only().Body, `{"entries":[{"queue":"q","partition":"Default","offset":4}]}`)

	stub, c = newWireStub(t, 200, `{"entries":[]}`)
	_, err := c.Queue("q").Fetch(t.Context(), []string{"customer-42"}, queen.FetchFromOffsets(map[string]int64{"customer-24": 4}))
	if !errors.Is(err, queen.ErrInvalidOption) || !errors.Is(err, queen.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
	stub.nothingSent()
}
