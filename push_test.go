package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/queen-go/queen/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const minted = "<minted>"

// pushBody decodes a push request body and replaces every client-minted
// transaction id (checked to be a UUID) by "<minted>". It returns the body
// re-encoded and the transaction ids in item order.
func pushBody(t *testing.T, b []byte, mintedAt ...int) (string, []string) {
	t.Helper()
	var body struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal(b, &body))
	var ids []string
	for i, it := range body.Items {
		id, ok := it["transactionId"].(string)
		require.True(t, ok, "item %d carries no transactionId: %s", i, b)
		require.NotEmpty(t, id, "item %d", i)
		ids = append(ids, id)
		for _, m := range mintedAt {
			if m == i {
				_, err := uuid.Parse(id)
				require.NoError(t, err, "minted id %q of item %d", id, i)
				it["transactionId"] = minted
			}
		}
	}
	out, err := json.Marshal(body)
	require.NoError(t, err)
	return string(out), ids
}

func TestPushWire(t *testing.T) {
	const trace1 = "5f0c7d1e-3b2a-4c8d-9e6f-0a1b2c3d4e5f"
	const trace2 = "11111111-2222-3333-4444-555555555555"
	tests := []struct {
		name   string
		push   func(c *Client) *PushBuilder
		minted []int // items whose transaction id the client made
		want   string
	}{
		{
			name:   "one object, default partition",
			push:   func(c *Client) *PushBuilder { return c.Queue("orders").Push(map[string]any{"id": 1}) },
			minted: []int{0},
			want:   `{"items":[{"queue":"orders","payload":{"id":1},"transactionId":"<minted>"}]}`,
		},
		{
			name: "batch of any JSON values, one id each",
			push: func(c *Client) *PushBuilder {
				return c.Queue("orders").Push(1, "two", []int{3, 3}, json.RawMessage(`{"raw":true}`), nil, []byte(`[4]`), struct {
					N int `json:"n"`
				}{5})
			},
			minted: []int{0, 1, 2, 3, 4, 5, 6},
			want: `{"items":[
				{"queue":"orders","payload":1,"transactionId":"<minted>"},
				{"queue":"orders","payload":"two","transactionId":"<minted>"},
				{"queue":"orders","payload":[3,3],"transactionId":"<minted>"},
				{"queue":"orders","payload":{"raw":true},"transactionId":"<minted>"},
				{"queue":"orders","payload":null,"transactionId":"<minted>"},
				{"queue":"orders","payload":[4],"transactionId":"<minted>"},
				{"queue":"orders","payload":{"n":5},"transactionId":"<minted>"}]}`,
		},
		{
			name:   "partition",
			push:   func(c *Client) *PushBuilder { return c.Queue("orders").Partition("customer-42").Push("x", "y") },
			minted: []int{0, 1},
			want: `{"items":[{"queue":"orders","partition":"customer-42","payload":"x","transactionId":"<minted>"},
				{"queue":"orders","partition":"customer-42","payload":"y","transactionId":"<minted>"}]}`,
		},
		{
			name: "user transaction id",
			push: func(c *Client) *PushBuilder {
				return c.Queue("orders").Push(map[string]int{"n": 1}).TransactionID("order-1")
			},
			want: `{"items":[{"queue":"orders","payload":{"n":1},"transactionId":"order-1"}]}`,
		},
		{
			name: "some ids given, the rest minted",
			push: func(c *Client) *PushBuilder {
				return c.Queue("orders").Push(1, 2, 3, 4).TransactionIDs("a", "", "c")
			},
			minted: []int{1, 3},
			want: `{"items":[{"queue":"orders","payload":1,"transactionId":"a"},{"queue":"orders","payload":2,"transactionId":"<minted>"},
				{"queue":"orders","payload":3,"transactionId":"c"},{"queue":"orders","payload":4,"transactionId":"<minted>"}]}`,
		},
		{
			name: "items carry their own ids; trace id of the push for the others",
			push: func(c *Client) *PushBuilder {
				return c.Queue("orders").Push(
					Item{Payload: map[string]int{"n": 1}, TransactionID: "item-1", TraceID: trace2},
					&Item{Payload: 2, TransactionID: "item-2"},
					3,
				).TraceID(trace1)
			},
			minted: []int{2},
			want: `{"items":[{"queue":"orders","payload":{"n":1},"transactionId":"item-1","traceId":"` + trace2 + `"},
				{"queue":"orders","payload":2,"transactionId":"item-2","traceId":"` + trace1 + `"},
				{"queue":"orders","payload":3,"transactionId":"<minted>","traceId":"` + trace1 + `"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t, answer{status: http.StatusCreated, body: "[]"})
			_, _ = tt.push(c).Execute(context.Background()) // answer count is wrong on purpose: only the request matters here
			r := rec.only(t)
			assert.Equal(t, http.MethodPost, r.Method)
			assert.Equal(t, "/api/v1/push", r.Path)
			assert.Empty(t, r.RawQuery)
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			got, ids := pushBody(t, r.Body, tt.minted...)
			assert.JSONEq(t, tt.want, got)
			distinct := map[string]bool{}
			for _, id := range ids {
				distinct[id] = true
			}
			assert.Len(t, distinct, len(ids), "transaction ids must differ: %v", ids)
		})
	}
}

// A push that failed (a 503 the transport retried, then an error the user
// saw) is sent again with the very same transaction ids, so the broker can
// answer "duplicate" instead of storing a second copy.
func TestPushTransactionIDsStableAcrossRetries(t *testing.T) {
	unavailable := answer{status: http.StatusServiceUnavailable, body: golden(t, "broker-2.x/error_503_no_leader.json")}
	queued := answer{status: http.StatusCreated, body: `[{"index":0,"message_id":"m0","transaction_id":"x","queueName":"q","status":"queued"},
		{"index":1,"message_id":"m1","transaction_id":"y","queueName":"q","status":"duplicate"}]`}
	rec, c := newRecorderOpts(t,
		[]Option{WithRetryPolicy(RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})},
		unavailable, unavailable, // first Execute: two attempts, both 503
		unavailable, queued, // second Execute: retried by the transport, then stored
	)
	p := c.Queue("q").Push(map[string]int{"n": 1}, map[string]int{"n": 2})

	_, err := p.Execute(context.Background())
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, http.StatusServiceUnavailable, be.Status)

	res, err := p.Execute(context.Background())
	require.NoError(t, err)
	require.Len(t, res, 2)
	assert.Equal(t, PushDuplicate, res[1].Status)
	assert.True(t, res[1].Stored())

	reqs := rec.all()
	require.Len(t, reqs, 4)
	_, first := pushBody(t, reqs[0].Body, 0, 1)
	for i, r := range reqs {
		_, ids := pushBody(t, r.Body, 0, 1)
		assert.Equal(t, first, ids, "attempt %d", i)
		assert.Equal(t, string(reqs[0].Body), string(r.Body), "attempt %d resends the same bytes", i)
	}
}

func TestPushResultsGolden(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		status   int
		payloads []any
		want     []PushResult
		failed   []int
	}{
		{
			name: "0.15.1 three queued, snake_case ids, no offset", file: "broker-0.15.1/push_three_queued.json",
			payloads: []any{1, 2, 3},
			want: []PushResult{
				{Index: 0, Status: PushQueued, MessageID: "01a22ab9-ddc0-7000-b545-bb73f2d3995e", TransactionID: "ffe7f660-3b61-4801-b0b6-1f658bead534", Queue: "t1", PartitionID: "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", Offset: -1},
				{Index: 1, Status: PushQueued, MessageID: "01a22ab9-ddc0-7001-8249-8ba150592714", TransactionID: "b4ffd868-ccc7-40dc-94f5-31946c7763b0", Queue: "t1", PartitionID: "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", Offset: -1},
				{Index: 2, Status: PushQueued, MessageID: "01a22ab9-ddc0-7002-b790-d5958da277ae", TransactionID: "tx-client-3", Queue: "t1", PartitionID: "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", Offset: -1},
			},
		},
		{
			name: "0.15.1 duplicate carries the original message id", file: "broker-0.15.1/push_duplicate.json",
			payloads: []any{33},
			want: []PushResult{
				{Index: 0, Status: PushDuplicate, MessageID: "01a22ab9-ddc0-7002-b790-d5958da277ae", TransactionID: "tx-client-3", Queue: "t1", Offset: -1},
			},
		},
		{
			name: "0.15.1 buffered is not stored", file: "broker-0.15.1/push_buffered_bad_trace_id.json",
			payloads: []any{"c"},
			want: []PushResult{
				{Index: 0, Status: PushFailed, TransactionID: "<sent>", Queue: "t4", Offset: -1, Error: "broker status buffered"},
			},
			failed: []int{0},
		},
		{
			name: "2.x queued with offset, duplicate, error", file: "broker-2.x/push_queued_duplicate_error.json", status: http.StatusCreated,
			payloads: []any{1, 2, 3},
			want: []PushResult{
				{Index: 0, Status: PushQueued, MessageID: "0196f59f-0000-7000-8000-000000000101", TransactionID: "t-0", Queue: "orders", Offset: 41},
				{Index: 1, Status: PushDuplicate, MessageID: "0196f59f-0000-7000-8000-000000000042", TransactionID: "t-1", Queue: "orders", Offset: 12},
				{Index: 2, Status: PushFailed, TransactionID: "t-2", Queue: "orders", Offset: -1, Error: "partition refused"},
			},
			failed: []int{2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := tt.status
			if status == 0 {
				status = http.StatusOK // 0.15.1 answers 200 to a push
			}
			rec, c := newRecorder(t, answer{status: status, body: golden(t, tt.file)})
			res, err := c.Queue("q").Push(tt.payloads...).Execute(context.Background())
			_, sent := pushBody(t, rec.only(t).Body)
			for i := range tt.want {
				if tt.want[i].TransactionID == "<sent>" {
					tt.want[i].TransactionID = sent[i] // the broker echoed none: the id sent is reported
				}
			}
			assert.Equal(t, tt.want, res)
			if tt.failed == nil {
				require.NoError(t, err)
				return
			}
			var pe *PushError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tt.failed, pe.Failed)
			assert.Equal(t, res, pe.Results)
			for _, i := range tt.failed {
				assert.False(t, res[i].Stored())
			}
			assert.Contains(t, err.Error(), res[tt.failed[0]].Error)
		})
	}
}

func TestPushAnswerErrors(t *testing.T) {
	tests := []struct {
		name   string
		answer answer
		status int
		code   string
		msg    string
	}{
		{"0.15.1 400 items required", answer{status: 400, body: golden(t, "broker-0.15.1/push_400_items_required.json")}, 400, "", "items array is required"},
		{"error object with HTTP 200", answer{status: 200, body: `{"error":"DB appears down","success":false}`}, 200, "", "DB appears down"},
		{"2.x 429 overloaded", answer{status: 429, body: golden(t, "broker-2.x/error_429_overloaded.json"), header: map[string]string{"Retry-After": "2"}}, 429, "overloaded", "admission budget full"},
		{"fewer results than items", answer{status: 201, body: golden(t, "broker-0.15.1/push_empty_items_201.json")}, 201, "", "0 results for 1 messages"},
		{"not JSON", answer{status: 201, body: "<html>"}, 201, "", "undecodable push answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, tt.answer)
			res, err := c.Queue("q").Push(1).Execute(context.Background())
			assert.Nil(t, res)
			var be *BrokerError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, tt.status, be.Status)
			assert.Equal(t, tt.code, be.Code)
			assert.Contains(t, be.Message, tt.msg)
			assert.False(t, errors.Is(err, ErrInvalidArgument))
		})
	}
}

// The push answers of both generations' captures, and bodies with
// duplicate names or invalid UTF-8, decode as encoding/json reads them.
func TestDecodePushAnswerReadsWhatEncodingJSONReads(t *testing.T) {
	bodies := map[string][]byte{
		"duplicate name": []byte(`[{"index":0,"status":"error","status":"queued","transaction_id":"t"}]`),
		"invalid UTF-8":  []byte("[{\"index\":0,\"status\":\"queued\",\"transaction_id\":\"t\",\"error\":\"a\xffb\"}]"),
	}
	for _, dir := range []string{"testdata/broker-0.15.1", "testdata/broker-2.x"} {
		files, err := filepath.Glob(filepath.Join(dir, "push_*.json"))
		require.NoError(t, err)
		for _, f := range files {
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
				bodies[f] = body
			}
		}
	}
	require.Greater(t, len(bodies), 5, "the captures' push answers")
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			var want []wire.PushResult
			require.NoError(t, json.Unmarshal(body, &want))
			var got []wire.PushResult
			require.NoError(t, readWire(body, &got, func() { got = nil }))
			assert.Equal(t, want, got)
			items := make([]wire.PushItem, len(want))
			res, _, _ := decodePushAnswer(201, body, items)
			require.Len(t, res, len(want))
			for i, r := range res {
				assert.Equal(t, want[i].MessageID, r.MessageID)
				assert.Equal(t, want[i].PartitionID, r.PartitionID)
			}
		})
	}
}

func FuzzDecodePush(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b, uint8(1)); f.Add(b, uint8(3)) }, "push_")
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		items := make([]wire.PushItem, int(n%8)+1)
		for i := range items {
			items[i] = wire.PushItem{Queue: "q", Payload: []byte("1"), TransactionID: "tx"}
		}
		res, err := decodePush(201, body, items)
		if res != nil && len(res) != len(items) {
			t.Fatalf("%d results for %d items", len(res), len(items))
		}
		if pe, ok := err.(*PushError); ok {
			_ = pe.Error() // must not panic either
			if len(pe.Failed) == 0 {
				t.Fatal("push error without a failed item")
			}
		}
	})
}
