package queen_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/queen-go/queen"
)

func leased(txn, pid, lease, group string) *queen.Message {
	return &queen.Message{TransactionID: txn, PartitionID: pid, LeaseID: lease, ConsumerGroup: group, Queue: "orders", Partition: "p"}
}

const txnCommitted2x = `{"transactionId":"tx-1","success":true,"results":[
 {"index":0,"type":"ack","success":true,"transactionId":"m1","error":null,"dlq":true},
 {"index":1,"type":"push","success":true,"transactionId":"fixed-1","messageId":"id-a","queueName":"invoices"},
 {"index":2,"type":"push","success":true,"transactionId":"x","messageId":"id-b","queueName":"invoices","duplicate":true},
 {"index":3,"type":"ack","success":true,"transactionId":"m2","error":null,"dlq":false},
 {"index":4,"type":"ack","success":true,"transactionId":"m3","error":null,"dlq":false}]}`

func TestTransactionWireShape(t *testing.T) {
	stub, c := newWireStub(t, http.StatusOK, txnCommitted2x)
	m1 := leased("m1", "17", "L1", "billing")
	m2 := leased("m2", "17", "L1", "billing")
	m3 := leased("m3", "18", "L2", "__QUEUE_MODE__")

	res, err := c.Transaction().
		Ack(m1, "dlq", queen.AckOptions{ConsumerGroup: "mailer", Error: "bounced"}).
		Queue("invoices").Partition("customer-42").Push(queen.Item{Payload: map[string]int{"n": 1}, TransactionID: "fixed-1"}, json.RawMessage(`[1,2]`)).
		Ack(m2, queen.StatusCompleted).
		Ack(m3, queen.StatusRetry).
		Commit(t.Context())
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/transaction")

	// The second pushed item got a client-made transaction id: check it is a
	// UUID, then pin the rest of the body with it.
	var sent struct {
		Operations []struct {
			Items []struct {
				TransactionID string `json:"transactionId"`
			} `json:"items"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(r.Body, &sent); err != nil {
		t.Fatal(err)
	}
	minted := sent.Operations[1].Items[1].TransactionID
	if _, err := uuid.Parse(minted); err != nil {
		t.Fatalf("pushed item without id got %q, want a client-made UUID", minted)
	}
	jsonEqual(t, r.Body, `{
	 "operations":[
	  {"type":"ack","transactionId":"m1","partitionId":"17","leaseId":"L1","consumerGroup":"mailer","status":"dlq","error":"bounced"},
	  {"type":"push","items":[
	    {"queue":"invoices","partition":"customer-42","payload":{"n":1},"transactionId":"fixed-1"},
	    {"queue":"invoices","partition":"customer-42","payload":[1,2],"transactionId":"`+minted+`"}]},
	  {"type":"ack","transactionId":"m2","partitionId":"17","leaseId":"L1","consumerGroup":"billing","status":"completed"},
	  {"type":"ack","transactionId":"m3","partitionId":"18","leaseId":"L2","status":"retry"}],
	 "requiredLeases":["L1","L2"]}`)

	if !res.Committed || res.TransactionID != "tx-1" || res.FailedIndex != -1 {
		t.Fatalf("result = %+v, want committed tx-1", res)
	}
	if len(res.Results) != 5 {
		t.Fatalf("got %d results, want 5", len(res.Results))
	}
	if got := res.Results[0]; got.Type != queen.TransactionAckOp || !got.DLQ || got.TransactionID != "m1" {
		t.Errorf("result 0 = %+v, want dlq ack of m1", got)
	}
	if got := res.Results[2]; got.Type != queen.TransactionPushOp || !got.Duplicate || got.MessageID != "id-b" || got.Queue != "invoices" {
		t.Errorf("result 2 = %+v, want duplicate push id-b", got)
	}
}

func TestTransactionSpecCallCompiles(t *testing.T) {
	// The documentation's line, as written: an untyped "dlq" and one
	// AckOptions value.
	stub, client := newWireStub(t, http.StatusOK, `{"transactionId":"t","success":true,"results":[{"index":0,"type":"ack","success":true,"transactionId":"m","dlq":true}]}`)
	ctx := t.Context()
	msg := leased("m", "3", "L", "mailer")
	opts := queen.AckOptions{ConsumerGroup: "mailer"}
	_, err := client.Transaction().Ack(msg, "dlq", opts).Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, stub.only().Body, `{"operations":[{"type":"ack","transactionId":"m","partitionId":"3","leaseId":"L","consumerGroup":"mailer","status":"dlq"}],"requiredLeases":["L"]}`)
}

func TestTransactionBadInputSendsNothing(t *testing.T) {
	good := leased("m", "1", "L", "g")
	tests := []struct {
		name string
		tx   func(*queen.TransactionBuilder) *queen.TransactionBuilder
		want error
	}{
		{"empty", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder { return tx }, queen.ErrEmptyTransaction},
		{"unknown status", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder { return tx.Ack(good, "done") }, queen.ErrUnknownStatus},
		{"nil message", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Ack(nil, queen.StatusCompleted)
		}, queen.ErrNotAckable},
		{"no partition id", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Ack(&queen.Message{TransactionID: "m", LeaseID: "L"}, queen.StatusCompleted)
		}, queen.ErrNotAckable},
		{"no lease", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Ack(leased("m", "1", "", "g"), queen.StatusCompleted)
		}, queen.ErrNotAckable},
		{"two options", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Ack(good, queen.StatusCompleted, queen.AckOptions{}, queen.AckOptions{})
		}, queen.ErrInvalidOption},
		{"bad status after good ops", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Queue("q").Push(1).Ack(good, "dlq ").Ack(good, queen.StatusCompleted)
		}, queen.ErrUnknownStatus},
		{"push without queue", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder { return tx.Queue("").Push(1) }, queen.ErrEmptyQueue},
		{"push without payload", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder { return tx.Queue("q").Push() }, queen.ErrNoMessages},
		{"payload not JSON", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Queue("q").Push(json.RawMessage(`{nope`))
		}, queen.ErrInvalidPayload},
		{"bad trace id", func(tx *queen.TransactionBuilder) *queen.TransactionBuilder {
			return tx.Queue("q").TraceID("trace-1").Push(1)
		}, queen.ErrInvalidTraceID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub, c := newWireStub(t, http.StatusOK, `{"success":true}`)
			res, err := tt.tx(c.Transaction()).Commit(t.Context())
			if !errors.Is(err, tt.want) || !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("err = %v, want %v (and ErrInvalidArgument)", err, tt.want)
			}
			if res != nil {
				t.Fatalf("result = %+v, want nil", res)
			}
			stub.nothingSent()
		})
	}
}

func TestTransactionRollback2x(t *testing.T) {
	_, c := newWireStub(t, http.StatusOK,
		`{"transactionId":"tx-9","success":false,"reason":"rejected_ack","error":"invalid or expired lease","results":[]}`)
	res, err := c.Transaction().Ack(leased("m", "1", "L", "g"), queen.StatusCompleted).Queue("q").Push("x").Commit(t.Context())
	var te *queen.TransactionError
	if !errors.As(err, &te) || !errors.Is(err, queen.ErrRolledBack) {
		t.Fatalf("err = %v, want a *TransactionError matching ErrRolledBack", err)
	}
	if res == nil || res.Committed || res.Reason != "rejected_ack" || res.Error != "invalid or expired lease" || res.TransactionID != "tx-9" {
		t.Fatalf("result = %+v, want rolled back with the broker's reason", res)
	}
	if te.Result != res {
		t.Fatalf("error carries another result")
	}
	if msg := err.Error(); msg != "queen: transaction rolled back (tx-9): rejected_ack: invalid or expired lease" {
		t.Fatalf("message = %q", msg)
	}
}

func TestTransactionKVPreconditionRollback(t *testing.T) {
	_, c := newWireStub(t, http.StatusOK,
		`{"transactionId":"t","success":false,"reason":"kv_precondition","error":"version mismatch","failedIndex":2,"kvReason":"x","ok":false,"results":[]}`)
	res, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
	if !errors.Is(err, queen.ErrRolledBack) || res.FailedIndex != 2 {
		t.Fatalf("err = %v, failedIndex = %d; want rollback at 2", err, res.FailedIndex)
	}
}

// The 0.15.1 answers below are the captured ones (shared/wire/captures).
func TestTransaction0151Shapes(t *testing.T) {
	t.Run("commit", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusOK, `{"results":[{"index":0,"messageId":"01a22aba-beb3-7000-b868-0efc4836730b","partitionId":"e599cb88-2a84-4771-afc8-f4419675b01e","queueName":"t6","success":true,"transactionId":"8d925d2a-95a6-4734-87a7-dac1943020b2","type":"push"}],"success":true,"transactionId":"78a2242d-98cc-4a18-b2b2-a79cca5bcafb"}`)
		res, err := c.Transaction().Queue("t6").Partition("p").Push(map[string]int{"x": 2}).Commit(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r := res.Results[0]
		if !res.Committed || r.PartitionID != "e599cb88-2a84-4771-afc8-f4419675b01e" || r.Queue != "t6" || r.MessageID == "" {
			t.Fatalf("result = %+v / %+v", res, r)
		}
	})
	t.Run("rollback, HTTP 200", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusOK, `{"error":"ACK operation failed: Message not found","results":[{"index":0,"messageId":"01a22aba-be9c-7000-88a7-14ecf338b239","partitionId":"d95c3ec9-ab9a-45db-9d5b-da2342710619","queueName":"t6","success":true,"transactionId":"60761cd7-0541-43a8-9417-f6d2eddb690e","type":"push"},{"dlq":false,"error":"Message not found","index":1,"success":false,"transactionId":"nope","type":"ack"}],"success":false,"transactionId":"715ac856-28e7-4a4e-a92b-df928d0c0884"}`)
		res, err := c.Transaction().Queue("t6").Push(1).Ack(leased("nope", "00000000-0000-0000-0000-000000000000", "L", ""), queen.StatusCompleted).Commit(t.Context())
		if !errors.Is(err, queen.ErrRolledBack) {
			t.Fatalf("err = %v, want rollback", err)
		}
		if res.Committed || res.FailedIndex != 1 || res.Results[1].Error != "Message not found" || res.Reason != "" {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("error object only", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusOK, `{"error":"database unavailable"}`)
		res, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
		if !errors.Is(err, queen.ErrRolledBack) || res.Error != "database unavailable" {
			t.Fatalf("err = %v, res = %+v", err, res)
		}
	})
	t.Run("400 before the database", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusBadRequest, `{"error":"operations array cannot be empty"}`)
		_, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
		var be *queen.BrokerError
		if !errors.As(err, &be) || be.Status != 400 || be.Message != "operations array cannot be empty" {
			t.Fatalf("err = %v, want the broker's 400", err)
		}
		if errors.Is(err, queen.ErrRolledBack) {
			t.Fatalf("a refused request is not a rollback")
		}
	})
	t.Run("an answer that says neither success nor error: outcome unknown, not a rollback", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusOK, `{"transactionId":"t","results":[]}`)
		res, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
		var be *queen.BrokerError
		if !errors.As(err, &be) || errors.Is(err, queen.ErrRolledBack) || !errors.Is(err, queen.ErrOutcomeUnknown) || res != nil {
			t.Fatalf("err = %v, res = %+v; want a *BrokerError matching ErrOutcomeUnknown, no result", err, res)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		_, c := newWireStub(t, http.StatusOK, `oops`)
		_, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
		var be *queen.BrokerError
		if !errors.As(err, &be) || !errors.Is(err, queen.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want *BrokerError matching ErrOutcomeUnknown", err)
		}
	})
}

func TestTransactionCommitAgainResendsSameIDs(t *testing.T) {
	stub, c := newWireStub(t, http.StatusOK, `{"transactionId":"t","success":true,"results":[]}`)
	tx := c.Transaction().Queue("q").Push(1, 2)
	for range 2 {
		if _, err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	reqs := stub.requests()
	if string(reqs[0].Body) != string(reqs[1].Body) {
		t.Fatalf("second commit sent another body:\n%s\n%s", reqs[0].Body, reqs[1].Body)
	}
}

// A transaction push takes what QueueBuilder.Push takes: an *Item too, whose
// payload and ids are sent, never the Item struct itself as the payload.
func TestTransactionPushTakesItemPointers(t *testing.T) {
	const trace = "5f0c7d1e-3b2a-4c8d-9e6f-0a1b2c3d4e5f"
	stub, c := newWireStub(t, http.StatusOK, `{"transactionId":"t","success":true,"results":[]}`)
	_, err := c.Transaction().Queue("q").Push(&queen.Item{Payload: map[string]int{"n": 1}, TransactionID: "own-1", TraceID: trace}).Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, stub.only().Body, `{"operations":[{"type":"push","items":[
	 {"queue":"q","payload":{"n":1},"transactionId":"own-1","traceId":"`+trace+`"}]}]}`)

	stub, c = newWireStub(t, http.StatusOK, `{"success":true}`)
	_, err = c.Transaction().Queue("q").Push(&queen.Item{Payload: 1, TraceID: "not-a-uuid"}).Commit(t.Context())
	if !errors.Is(err, queen.ErrInvalidTraceID) {
		t.Fatalf("err = %v, want ErrInvalidTraceID", err)
	}
	stub.nothingSent()
}
