package queen

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/queen-go/queen/internal/wire"
)

// canonicalPop is a 2.x pop answer of n messages as the broker renders it.
func canonicalPop(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"success":true,"queue":"orders","partition":"customer-1","partitionId":"17","leaseId":"0190f2c4-aaaa-7bbb-8ccc-123456789abc","consumerGroup":"billing","partitionsClaimed":1,"messages":[`)
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"id":"0190f2c4-aaaa-7bbb-8ccc-%012d","transactionId":"order-%d","traceId":null,"data":{"id":%d,"customer":"c-42","total":12.5,"lines":[{"sku":"A-1","qty":2}]},"producerSub":null,"createdAt":"2026-10-22T06:08:13.123Z","partitionId":"17","partition":"customer-1","leaseId":"0190f2c4-aaaa-7bbb-8ccc-123456789abc","consumerGroup":"billing","deliveryAttempt":1,"offset":%d}`, i, i, i, i)
	}
	sb.WriteString(`],"autopilot":{"partitions":1,"batch":100}}`)
	return []byte(sb.String())
}

// popCorpus are answers the fast reader must accept (fast) or may refuse.
var popCorpus = []struct {
	body string
	fast bool
}{
	{string(canonicalPop(1)), true},
	{string(canonicalPop(3)), true},
	{`{"success":true,"messages":[]}`, false},
	{`{"success":true,"leaseId":null,"messages":null}`, false},
	{` { "success" : true , "queue" : "q" , "messages" : [ { "transactionId" : "t" , "partitionId" : "1" , "data" : [1, 2.5e3, "x\u00e9\n", null, true, false, {}] } ] } `, true},
	{`{"success":true,"queue":"q","leaseId":"L","messages":[{"transactionId":"t","partitionId":"1","data":null,"leaseId":null,"deliveryAttempt":null,"offset":-0}]}`, true},
	{`{"success":true,"queue":"q","leaseId":"L","messages":[{"transactionId":"t","partitionId":"1","data":"text","queue":"other","consumerGroup":"","retryCount":2}]}`, true},
	{`{"success":true,"queue":"q","leaseId":"L","messages":[{"transactionId":"t","partitionId":"1"}],"extra":{"nested":[1,{"a":"b"}]}}`, true},
	{`{"success":true,"messages":[{"transactionId":"t","createdAt":"2026-10-22 06:08:13.123456+00"}]}`, true},
	{`{"success":true,"messages":[{"transactionId":"t","data":{"a":1}}, {"transactionId":"u","data":{"a":2}}]}`, true},
	// Refused: decodePop decides. An answer without messages always goes
	// there (what it says of an empty claim is read there).
	{`{"success":false,"error":"no_available_partition","messages":[]}`, false},
	{`{"success":true,"conflation":true,"messages":[]}`, false},
	{`{"success":true,"messages":[{"transactionId":"t\u0041"}]}`, false},
	{`{"success":true,"messages":[{"TransactionID":"t"}]}`, false},
	{`{"success":true,"messages":[{"transactionId":"t","offset":1.0}]}`, false},
	{`{"success":true,"messages":[{"transactionId":"t","offset":"1"}]}`, false},
	{`{"success":true,"messages":[{"transactionId":"t","id":"a","id":"b"}]}`, false},
	{`{"success":true,"messages":[null]}`, false},
	{`{"success":true,"messages":[{"transactionId":"t","data":{"a":}}]}`, false},
	{`{"success":true,"messages":[]} x`, false},
	{`{"success":true,"messages":[{"partitionId":"1"}]}`, true},
	{`[]`, false},
	{``, false},
	{`{"success":true,"queue":"caf\u00e9","messages":[]}`, false},
	{"{\"success\":true,\"queue\":\"caf\xc3\xa9\",\"messages\":[]}", false},
}

func quietClient() *Client { return &Client{log: slog.New(slog.DiscardHandler)} }

// TestDecodePopFastMatchesDecodePop holds the lean reader to decodePop's
// result on every answer it accepts, and checks that it accepts the
// canonical ones (else the hot path would silently take the slow one).
func TestDecodePopFastMatchesDecodePop(t *testing.T) {
	c := quietClient()
	for i, tc := range popCorpus {
		fast, ok := decodePopFast([]byte(tc.body))
		if ok != tc.fast {
			t.Errorf("#%d: fast reader ok=%v, want %v: %s", i, ok, tc.fast, tc.body)
			continue
		}
		if !ok {
			continue
		}
		slow, err := c.decodePop([]byte(tc.body), "/p", false)
		if err != nil {
			t.Errorf("#%d: decodePop failed (%v) where the fast reader succeeded: %s", i, err, tc.body)
			continue
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("#%d: results differ\nfast %s\nslow %s", i, dumpPop(fast), dumpPop(slow))
		}
	}
}

// TestDecodePopFastGolden holds the lean reader to decodePop on every
// recorded broker answer (testdata), and checks that it takes the answers
// with messages of both generations (the refusals and the conflating
// answers go to decodePop by design: the loop never uses the lean reader
// for a conflating pop).
func TestDecodePopFastGolden(t *testing.T) {
	c := quietClient()
	mustTake := map[string]bool{
		"broker-2.x/pop_two_partitions_mixed_payloads.json": true,
		"broker-2.x/pop_commit_on_delivery.json":            true,
		"broker-0.15.1/pop_group_three.json":                true,
		"broker-0.15.1/pop_queue_mode_three.json":           true,
		"broker-0.15.1/pop_group_number_payloads.json":      true,
		"broker-0.15.1/pop_pinned_string_payload.json":      true,
	}
	seen := 0
	for _, dir := range []string{"broker-0.15.1", "broker-2.x"} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "pop_*.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			name := dir + "/" + filepath.Base(f)
			seen++
			fast, ok := decodePopFast(body)
			if !ok {
				if mustTake[name] {
					t.Errorf("%s: the lean reader refused a canonical 2.x answer", name)
				}
				continue
			}
			slow, err := c.decodePop(body, "/p", false)
			if err != nil || !reflect.DeepEqual(fast, slow) {
				t.Errorf("%s: results differ (%v)\nfast %s\nslow %s", name, err, dumpPop(fast), dumpPop(slow))
			}
		}
	}
	if seen < 10 {
		t.Fatalf("only %d recorded pop answers found", seen)
	}
}

// FuzzDecodePopFast: whatever the answer, when the lean reader accepts it,
// encoding/json accepts it too and decodePop builds the same result.
func FuzzDecodePopFast(f *testing.F) {
	for _, tc := range popCorpus {
		f.Add([]byte(tc.body))
	}
	addGoldenSeeds(f, func(b []byte) { f.Add(b) }, "pop_")
	c := quietClient()
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := decodePopFast(body)
		if !ok {
			return
		}
		var pr wire.PopResponse
		if err := json.Unmarshal(body, &pr); err != nil {
			t.Fatalf("encoding/json refuses (%v) what the lean reader took: %q", err, body)
		}
		slow, err := c.decodePop(body, "/p", false)
		if err != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("results differ for %q (%v)\nfast %s\nslow %s", body, err, dumpPop(fast), dumpPop(slow))
		}
	})
}

func dumpPop(r *popResult) string {
	if r == nil {
		return "<nil>"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "lease=%q autopilot=%+v\n", r.leaseID, r.autopilot)
	for _, m := range r.messages {
		fmt.Fprintf(&sb, "  %+v\n", *m)
	}
	return sb.String()
}

func BenchmarkDecodePop(b *testing.B) {
	body := canonicalPop(100)
	c := quietClient()
	b.Run("decodePop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.decodePop(body, "/p", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodePopFast(body); !ok {
				b.Fatal("refused")
			}
		}
	})
}

func TestParseCreatedAt(t *testing.T) {
	for _, s := range []string{
		"2026-10-22T06:08:13.123Z", "2026-10-22T06:08:13Z", "2026-10-22T06:08:13.123456Z",
		"2026-10-22T06:08:13.123456789Z", "2026-10-22T06:08:13.1234567891Z", "2024-02-29T00:00:00.5Z",
		"2025-02-29T00:00:00.5Z", "2026-10-22T24:00:00Z", "2026-13-01T00:00:00Z", "2026-10-22T06:08:13,5Z",
		"2026-10-22T06:08:13.Z", "2026-10-22 06:08:13.123456+00", "2026-10-22T06:08:13.123456", "", "junk",
		"2026-10-22T06:08:60Z", "0000-01-01T00:00:00Z",
	} {
		got, want := parseCreatedAt([]byte(s)), parseBrokerTime(s)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, want %v", s, got, want)
		}
	}
}

// The hand-written ack bodies are byte for byte what json.Marshal writes
// for the wire structs SettleBatch sends.
func TestAckBodyMatchesMarshal(t *testing.T) {
	msg := func(txn, pid, lease string) *Message {
		return &Message{TransactionID: txn, PartitionID: pid, LeaseID: lease}
	}
	cases := [][]Settlement{
		{{Message: msg("t1", "17", "L"), Status: StatusCompleted}},
		{{Message: msg("t1", "17", ""), Status: StatusFailed, Error: `boom "quoted" <tag> & \ é` + "\n\x01"}},
		{{Message: msg("t1", "17", "L"), Status: StatusCompleted}, {Message: msg("t2", "17", "L"), Status: StatusFailed, Error: "x"},
			{Message: msg("t3", "18", "L"), Status: StatusRetry}, {Message: msg("t4", "18", "L"), Status: StatusDLQ, Error: "dead"}},
	}
	for i, acks := range cases {
		for _, group := range []string{"", "billing", "g<&>"} {
			path, got := ackBody(acks, group)
			items := make([]wire.AckItem, len(acks))
			for j, a := range acks {
				items[j] = wire.AckItem{TransactionID: a.Message.TransactionID, PartitionID: a.Message.PartitionID,
					LeaseID: a.Message.LeaseID, Status: string(a.Status), Error: a.Error}
			}
			var want []byte
			var wantPath string
			if len(items) == 1 {
				want, _ = json.Marshal(wire.AckRequest{AckItem: items[0], ConsumerGroup: group})
				wantPath = wire.RouteAck
			} else {
				want, _ = json.Marshal(wire.AckBatchRequest{ConsumerGroup: group, Acknowledgments: items})
				wantPath = wire.RouteAckBatch
			}
			if path != wantPath || string(got) != string(want) {
				t.Errorf("#%d group %q: %s %s\nwant %s %s", i, group, path, got, wantPath, want)
			}
		}
	}
}

func TestAllAcked(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
		want bool
	}{
		{`[{"index":0,"transactionId":"t","success":true,"error":null,"leaseReleased":true,"dlq":false}]`, 1, true},
		{` [ {"success":true} , {"success":true,"noop":true} ] `, 2, true},
		{`[{"success":true}]`, 2, false},
		{`[{"success":true},{"success":false,"error":"invalid or expired lease"}]`, 2, false},
		{`[{"Success":true}]`, 1, false},
		{`[{"success":true,"success":true}]`, 1, false},
		{`{"error":"bad"}`, 1, false},
		{`[{"success":1}]`, 1, false},
		{`[{"success":true}] x`, 1, false},
		{`[]`, 0, true},
	} {
		if got := allAcked([]byte(tc.body), tc.n); got != tc.want {
			t.Errorf("allAcked(%s, %d) = %v", tc.body, tc.n, got)
		}
	}
}
