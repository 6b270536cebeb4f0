package queen

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/queen-go/queen/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// popped returns a message as a pop hands it out.
func popped(tx, group, lease string) *Message {
	return &Message{ID: "id-" + tx, TransactionID: tx, PartitionID: "pid-1", LeaseID: lease,
		Queue: "orders", Partition: "p1", ConsumerGroup: group, Offset: -1}
}

const queueMode = "__QUEUE_MODE__"

func TestAckWire(t *testing.T) {
	ok1 := answer{status: http.StatusOK, body: `[{"index":0,"transactionId":"tx-1","success":true,"error":null,"leaseReleased":true,"dlq":false}]`}
	tests := []struct {
		name string
		ack  func(c *Client) error
		path string
		body string
	}{
		{
			name: "Ack ok in queue mode: completed, lease carried, no group",
			ack: func(c *Client) error {
				_, err := c.Ack(context.Background(), popped("tx-1", queueMode, "L1"), true, AckOptions{})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","leaseId":"L1","status":"completed"}`,
		},
		{
			name: "Ack not ok with a group and error text: failed",
			ack: func(c *Client) error {
				_, err := c.Ack(context.Background(), popped("tx-1", "billing", "L1"), false, AckOptions{ConsumerGroup: "billing", Error: "card declined"})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","leaseId":"L1","status":"failed","error":"card declined","consumerGroup":"billing"}`,
		},
		{
			name: "the message's own group when the options name none",
			ack: func(c *Client) error {
				_, err := c.Ack(context.Background(), popped("tx-1", "mailer", "L1"), true, AckOptions{})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","leaseId":"L1","status":"completed","consumerGroup":"mailer"}`,
		},
		{
			name: "the options' group wins over the message's",
			ack: func(c *Client) error {
				_, err := c.Ack(context.Background(), popped("tx-1", "mailer", "L1"), true, AckOptions{ConsumerGroup: "other"})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","leaseId":"L1","status":"completed","consumerGroup":"other"}`,
		},
		{
			name: "committed on delivery: no lease to carry",
			ack: func(c *Client) error {
				_, err := c.Ack(context.Background(), popped("tx-1", queueMode, ""), true, AckOptions{})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","status":"completed"}`,
		},
	}
	for _, st := range []AckStatus{StatusCompleted, StatusFailed, StatusRetry, StatusDLQ} {
		tests = append(tests, struct {
			name string
			ack  func(c *Client) error
			path string
			body string
		}{
			name: "Settle " + string(st),
			ack: func(c *Client) error {
				_, err := c.Settle(context.Background(), popped("tx-1", "billing", "L1"), st, AckOptions{Error: "why " + string(st)})
				return err
			},
			path: "/api/v1/ack",
			body: `{"transactionId":"tx-1","partitionId":"pid-1","leaseId":"L1","status":"` + string(st) + `","error":"why ` + string(st) + `","consumerGroup":"billing"}`,
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t, ok1)
			require.NoError(t, tt.ack(c))
			r := rec.only(t)
			assert.Equal(t, http.MethodPost, r.Method)
			assert.Equal(t, tt.path, r.Path)
			assert.Empty(t, r.RawQuery)
			assert.JSONEq(t, tt.body, string(r.Body))
		})
	}
}

func TestSettleBatchWire(t *testing.T) {
	rec, c := newRecorder(t, ok200(t, "broker-0.15.1/ack_batch_three.json"))
	a := &Message{TransactionID: "5dc0561c-abf0-4a5f-b3dd-1265f5790f1e", PartitionID: "b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45", LeaseID: "L", ConsumerGroup: "SG"}
	b := &Message{TransactionID: "b6c5be25-5b39-46e7-ab3f-d6249dc28be9", PartitionID: "b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45", LeaseID: "L", ConsumerGroup: "SG"}
	d := &Message{TransactionID: "420be9b3-758f-446f-9368-22475f2b9a27", PartitionID: "b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45", LeaseID: "L", ConsumerGroup: "SG"}
	res, err := c.SettleBatch(context.Background(), []Settlement{
		{Message: a, Status: StatusCompleted},
		{Message: b, Status: StatusRetry},
		{Message: d, Status: StatusDLQ, Error: "poison"},
	}, AckOptions{})
	require.NoError(t, err)
	r := rec.only(t)
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "/api/v1/ack/batch", r.Path)
	assert.JSONEq(t, `{"consumerGroup":"SG","acknowledgments":[
		{"transactionId":"5dc0561c-abf0-4a5f-b3dd-1265f5790f1e","partitionId":"b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45","leaseId":"L","status":"completed"},
		{"transactionId":"b6c5be25-5b39-46e7-ab3f-d6249dc28be9","partitionId":"b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45","leaseId":"L","status":"retry"},
		{"transactionId":"420be9b3-758f-446f-9368-22475f2b9a27","partitionId":"b1f1a33d-9f7c-44cf-8f2a-b4154a26ef45","leaseId":"L","status":"dlq","error":"poison"}]}`,
		string(r.Body))
	require.Len(t, res, 3)
	assert.Equal(t, []AckResult{
		{TransactionID: a.TransactionID, Success: true},
		{TransactionID: b.TransactionID, Success: true},
		{TransactionID: d.TransactionID, Success: true, LeaseReleased: true},
	}, res)
}

func TestSettleBatchQueueModeSendsNoGroup(t *testing.T) {
	rec, c := newRecorder(t, answer{status: 200, body: `[{"index":0,"transactionId":"a","success":true},{"index":1,"transactionId":"b","success":true}]`})
	_, err := c.SettleBatch(context.Background(), []Settlement{
		{Message: popped("a", queueMode, "L"), Status: StatusCompleted},
		{Message: popped("b", queueMode, "L"), Status: StatusFailed},
	}, AckOptions{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"acknowledgments":[
		{"transactionId":"a","partitionId":"pid-1","leaseId":"L","status":"completed"},
		{"transactionId":"b","partitionId":"pid-1","leaseId":"L","status":"failed"}]}`, string(rec.only(t).Body))
}

func TestAckAnswersGolden(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		n       int
		want    []AckResult
		refused bool
	}{
		{"0.15.1 completed", "broker-0.15.1/ack_completed.json", 1,
			[]AckResult{{TransactionID: "ffe7f660-3b61-4801-b0b6-1f658bead534", Success: true}}, false},
		{"0.15.1 failed releases the lease", "broker-0.15.1/ack_failed_lease_released.json", 1,
			[]AckResult{{TransactionID: "bbd62cab-bfcf-4858-82aa-8685b5c04c1d", Success: true, LeaseReleased: true}}, false},
		{"0.15.1 wrong lease, HTTP 200", "broker-0.15.1/ack_wrong_lease.json", 1,
			[]AckResult{{TransactionID: "bbd62cab-bfcf-4858-82aa-8685b5c04c1d", Error: "Invalid or expired lease"}}, true},
		{"0.15.1 message not found", "broker-0.15.1/ack_message_not_found.json", 1,
			[]AckResult{{TransactionID: "does-not-exist", Error: "Message not found"}}, true},
		{"2.x noop, dlq and a refused item", "broker-2.x/ack_mixed.json", 4, []AckResult{
			{TransactionID: "tx-1", Success: true},
			{TransactionID: "tx-2", Success: true, Noop: true},
			{TransactionID: "tx-3", Success: true, LeaseReleased: true, DLQ: true},
			{TransactionID: "tx-4", Error: "invalid or expired lease"},
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, ok200(t, tt.file))
			acks := make([]Settlement, tt.n)
			for i := range acks {
				acks[i] = Settlement{Message: popped(tt.want[i].TransactionID, "g", "L"), Status: StatusCompleted}
			}
			res, err := c.SettleBatch(context.Background(), acks, AckOptions{})
			assert.Equal(t, tt.want, res)
			if !tt.refused {
				require.NoError(t, err)
				return
			}
			var ae *AckError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, res, ae.Results)
			assert.Contains(t, err.Error(), "refused 1 of")
		})
	}
	t.Run("single Ack returns the refused result with the error", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/ack_wrong_lease.json"))
		res, err := c.Ack(context.Background(), popped("bbd62cab-bfcf-4858-82aa-8685b5c04c1d", "", "L"), true, AckOptions{})
		var ae *AckError
		require.ErrorAs(t, err, &ae)
		assert.False(t, res.Success)
		assert.Equal(t, "Invalid or expired lease", res.Error)
	})
}

func TestAckAnswerErrors(t *testing.T) {
	tests := []struct {
		name   string
		answer answer
		status int
		msg    string
	}{
		{"0.15.1 SQL error as an object with HTTP 200", ok200(t, "broker-0.15.1/ack_sql_error_object.json"), 200, "invalid input syntax for type uuid"},
		{"0.15.1 400", answer{status: 400, body: golden(t, "broker-0.15.1/ack_400_partition_required.json")}, 400, "partitionId is required"},
		{"count mismatch", answer{status: 200, body: `[]`}, 200, "0 results for 1 acks"},
		{"not JSON", answer{status: 200, body: `nope`}, 200, "undecodable ack answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, tt.answer)
			_, err := c.Ack(context.Background(), popped("x", "", "L"), true, AckOptions{})
			var be *BrokerError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, tt.status, be.Status)
			assert.Contains(t, be.Message, tt.msg)
			assert.Equal(t, "/api/v1/ack", be.Path)
		})
	}
}

func TestRenewOneRequestPerLease(t *testing.T) {
	rec, c := newRecorder(t, ok200(t, "broker-2.x/renew_ok.json"))
	msgs := []*Message{popped("a", "g", "L1"), popped("b", "g", "L1"), popped("c", "g", "L/2"), popped("d", "g", "L1")}
	res, err := c.Renew(context.Background(), msgs...)
	require.NoError(t, err)
	reqs := rec.all()
	require.Len(t, reqs, 2, "one request per distinct lease id")
	assert.Equal(t, "/api/v1/lease/L1/extend", reqs[0].Path)
	assert.Equal(t, "/api/v1/lease/L%2F2/extend", reqs[1].Path, "the lease id is path-escaped")
	for _, r := range reqs {
		assert.Equal(t, http.MethodPost, r.Method)
		assert.JSONEq(t, `{"seconds":60}`, string(r.Body))
	}
	require.Len(t, res, 2)
	assert.Equal(t, "L1", res[0].LeaseID)
	assert.True(t, res[0].Success)
	assert.Equal(t, time.Date(2026, 10, 22, 8, 17, 30, 500000000, time.UTC), res[0].ExpiresAt)

	rec2, c2 := newRecorder(t, ok200(t, "broker-2.x/renew_ok.json"))
	_, err = c2.RenewFor(context.Background(), 1500*time.Millisecond, msgs[0])
	require.NoError(t, err)
	assert.JSONEq(t, `{"seconds":2}`, string(rec2.only(t).Body), "rounded up to whole seconds")
}

func TestRenewAnswers(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		success bool
		expires time.Time
		errText string
	}{
		{"2.x object", "broker-2.x/renew_ok.json", true, time.Date(2026, 10, 22, 8, 17, 30, 500000000, time.UTC), ""},
		{"2.x object, lease gone: success read from the body", "broker-2.x/renew_failed.json", false, time.Time{}, "lease not renewed"},
		{"0.15.1 array", "broker-0.15.1/renew_ok.json", true, time.Date(2026, 11, 30, 4, 33, 38, 188000000, time.UTC), ""},
		{"0.15.1 array, lease not found with HTTP 200", "broker-0.15.1/renew_lease_not_found.json", false, time.Time{}, "Lease not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, ok200(t, tt.file))
			res, err := c.Renew(context.Background(), popped("a", "g", "L1"))
			require.Len(t, res, 1)
			assert.Equal(t, tt.success, res[0].Success)
			assert.Equal(t, tt.expires, res[0].ExpiresAt)
			assert.Equal(t, tt.errText, res[0].Error)
			if tt.success {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrLeaseLost)
				assert.NotErrorIs(t, err, ErrInvalidArgument)
			}
		})
	}
	t.Run("0.15.1 error object with HTTP 200: a broker failure, not a lost lease", func(t *testing.T) {
		body := `{"error":"ERROR:  could not serialize access","success":false}`
		_, c := newRecorder(t, answer{status: 200, body: body})
		_, err := c.Renew(context.Background(), popped("a", "g", "L1"))
		var be *BrokerError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, 200, be.Status)
		assert.Equal(t, "ERROR:  could not serialize access", be.Message)
		assert.Equal(t, body, string(be.Body))
		assert.NotErrorIs(t, err, ErrLeaseLost)
	})
	t.Run("undecodable", func(t *testing.T) {
		_, c := newRecorder(t, answer{status: 200, body: `[]`})
		_, err := c.Renew(context.Background(), popped("a", "g", "L1"))
		var be *BrokerError
		require.ErrorAs(t, err, &be)
	})
}

func FuzzDecodeAcks(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b, uint8(1)); f.Add(b, uint8(3)) }, "ack_")
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		items := make([]wire.AckItem, int(n%8)+1)
		for i := range items {
			items[i] = wire.AckItem{TransactionID: "tx", PartitionID: "p", Status: "completed"}
		}
		res, err := decodeAcks(body, "/api/v1/ack/batch", items)
		if err == nil && len(res) != len(items) {
			t.Fatalf("%d results for %d acks", len(res), len(items))
		}
		if res != nil && len(res) != len(items) {
			t.Fatalf("partial results: %d for %d", len(res), len(items))
		}
		_ = err
	})
}

func FuzzDecodeRenew(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b) }, "renew_")
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRenew(body, "L1", "/api/v1/lease/L1/extend")
		if r.LeaseID != "L1" {
			t.Fatalf("lease id %q", r.LeaseID)
		}
		if err == nil && !r.Success && r.Error == "" {
			t.Fatal("a failed renewal without a reason")
		}
	})
}
