package queentest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The tests talk to the broker over raw HTTP with their own decoding types
// (written independently of the broker's), so a wrong field name fails.

type tPushResult struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	QueueName     string `json:"queueName"`
	Status        string `json:"status"`
	Offset        *int64 `json:"offset"`
}

type tMessage struct {
	ID              string          `json:"id"`
	TransactionID   string          `json:"transactionId"`
	TraceID         *string         `json:"traceId"`
	Data            json.RawMessage `json:"data"`
	CreatedAt       string          `json:"createdAt"`
	PartitionID     string          `json:"partitionId"`
	Partition       string          `json:"partition"`
	LeaseID         string          `json:"leaseId"`
	ConsumerGroup   string          `json:"consumerGroup"`
	DeliveryAttempt int             `json:"deliveryAttempt"`
	Offset          int64           `json:"offset"`
}

type tPop struct {
	Success            bool            `json:"success"`
	Queue              string          `json:"queue"`
	Partition          string          `json:"partition"`
	PartitionID        string          `json:"partitionId"`
	LeaseID            string          `json:"leaseId"`
	ConsumerGroup      string          `json:"consumerGroup"`
	Messages           []tMessage      `json:"messages"`
	PartitionsClaimed  int             `json:"partitionsClaimed"`
	Conflation         *bool           `json:"conflation"`
	ConflationConflict *bool           `json:"conflationConflict"`
	Autopilot          *map[string]int `json:"autopilot"`
}

type tAck struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
	Noop          bool    `json:"noop"`
}

// hc is a raw HTTP client of one broker.
type hc struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newHC(t *testing.T, s *Server) *hc {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &hc{t: t, base: s.URL, c: &http.Client{Transport: tr, Timeout: 70 * time.Second}}
}

// do sends a request; body may be nil, a string/[]byte (sent as is) or a
// value (sent as JSON).
func (h *hc) do(method, path string, body any) (int, http.Header, []byte) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(h.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	require.NoError(h.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.c.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, resp.Header, raw
}

// doJSON sends a request, checks the status and decodes the answer into out.
func (h *hc) doJSON(method, path string, body any, wantStatus int, out any) []byte {
	h.t.Helper()
	st, _, raw := h.do(method, path, body)
	require.Equalf(h.t, wantStatus, st, "%s %s answered %s", method, path, raw)
	if out != nil {
		require.NoErrorf(h.t, json.Unmarshal(raw, out), "body %s", raw)
	}
	return raw
}

type item = map[string]any

func (h *hc) push(items ...item) []tPushResult {
	h.t.Helper()
	var out []tPushResult
	h.doJSON("POST", "/api/v1/push", item{"items": items}, http.StatusCreated, &out)
	require.Len(h.t, out, len(items))
	return out
}

// pushN pushes n messages {"n":i} to queue/partition.
func (h *hc) pushN(queue, partition string, n int) []tPushResult {
	h.t.Helper()
	items := make([]item, n)
	for i := range items {
		items[i] = item{"queue": queue, "partition": partition, "payload": item{"n": i}}
	}
	return h.push(items...)
}

// pop GETs a pop route with query q; a 204 answers (204, nil).
func (h *hc) pop(path string, q url.Values) (int, *tPop) {
	h.t.Helper()
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	st, _, raw := h.do("GET", path, nil)
	if st == http.StatusNoContent {
		require.Empty(h.t, raw, "a 204 pop has no body")
		return st, nil
	}
	var p tPop
	require.Equalf(h.t, http.StatusOK, st, "pop answered %s", raw)
	require.NoError(h.t, json.Unmarshal(raw, &p), string(raw))
	return st, &p
}

// popQ pops queue (wildcard) and requires messages.
func (h *hc) popQ(queue string, q url.Values) *tPop {
	h.t.Helper()
	st, p := h.pop("/api/v1/pop/queue/"+url.PathEscape(queue), q)
	require.Equal(h.t, http.StatusOK, st, "expected messages")
	return p
}

// popEmpty requires an empty (204) wildcard pop.
func (h *hc) popEmpty(queue string, q url.Values) {
	h.t.Helper()
	st, p := h.pop("/api/v1/pop/queue/"+url.PathEscape(queue), q)
	require.Equalf(h.t, http.StatusNoContent, st, "expected an empty pop, got %+v", p)
}

func (h *hc) ack(path string, body any) []tAck {
	h.t.Helper()
	var out []tAck
	h.doJSON("POST", path, body, http.StatusOK, &out)
	return out
}

// ackMsg acks one message with status in group ("" = queue mode).
func (h *hc) ackMsg(m tMessage, status, group string) tAck {
	h.t.Helper()
	body := item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": status}
	if group != "" {
		body["consumerGroup"] = group
	}
	out := h.ack("/api/v1/ack", body)
	require.Len(h.t, out, 1)
	return out[0]
}

// ackAll acks every message of p as completed in one batch.
func (h *hc) ackAll(p *tPop, group string) []tAck {
	h.t.Helper()
	var acks []item
	for _, m := range p.Messages {
		acks = append(acks, item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
	}
	body := item{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	return h.ack("/api/v1/ack/batch", body)
}

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// ns returns the "n" field of each message's payload.
func ns(t *testing.T, msgs []tMessage) []int {
	t.Helper()
	out := make([]int, len(msgs))
	for i, m := range msgs {
		var d struct{ N int }
		require.NoError(t, json.Unmarshal(m.Data, &d))
		out[i] = d.N
	}
	return out
}

func configure(h *hc, queue string, options item) {
	h.t.Helper()
	h.doJSON("POST", "/api/v1/configure", item{"queue": queue, "options": options}, http.StatusOK, nil)
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
