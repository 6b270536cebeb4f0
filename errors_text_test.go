package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queen-go/queen"
)

// A refusal whose body is not the broker's JSON envelope (a proxy's page,
// say) says its status and content type and quotes the start of the body,
// on one line; the whole body stays on BrokerError.Body.
func TestBrokerErrorQuotesANonJSONBody(t *testing.T) {
	page := "Service Unavailable\n\n" + strings.Repeat("upstream connect error or disconnect/reset before headers. ", 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = c.Queue("q").Push(1).Execute(t.Context())
	var be *queen.BrokerError
	if !errors.As(err, &be) {
		t.Fatalf("push = %v; want a *BrokerError", err)
	}
	msg := err.Error()
	prefix := "queen: broker answered 500 to POST " + srv.URL + "/api/v1/push (text/plain; charset=utf-8): Service Unavailable upstream connect error"
	if !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, "…") || strings.Contains(msg, "\n") {
		t.Errorf("message %q; want it to start %q, on one line, cut with …", msg, prefix)
	}
	if n := len(be.Message); n > 200+len("…") {
		t.Errorf("the excerpt has %d bytes", n)
	}
	if string(be.Body) != page || be.Status != 500 || be.ContentType != "text/plain; charset=utf-8" {
		t.Errorf("BrokerError = %+v", be)
	}

	// The broker's envelope: its code and message, no content type.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"queue name too long","code":"name_too_long"}`)
	}))
	t.Cleanup(srv2.Close)
	c2, err := queen.New(srv2.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close(context.Background()) })
	_, err = c2.Queue("q").Push(1).Execute(t.Context())
	if want := "queen: broker answered 400 to POST " + srv2.URL + "/api/v1/push (name_too_long): queue name too long"; err == nil || err.Error() != want {
		t.Errorf("message %v; want %q", err, want)
	}
}

// Each refusal of a message before the wire says what is wrong with it.
func TestNotAckableSaysWhy(t *testing.T) {
	c, err := queen.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := t.Context()
	noLease := &queen.Message{ID: "m", TransactionID: "t", PartitionID: "p"}
	_, ackNil := c.Ack(ctx, nil, true, queen.AckOptions{})
	_, ackEmpty := c.Ack(ctx, &queen.Message{}, true, queen.AckOptions{})
	_, renewNil := c.Renew(ctx, nil)
	_, renewNoLease := c.Renew(ctx, noLease)
	_, txEmpty := c.Transaction().Ack(&queen.Message{}, queen.StatusCompleted).Commit(ctx)
	for _, tc := range []struct {
		name     string
		err      error
		want     string
		unwanted []string
	}{
		{"Ack(nil)", ackNil, "ack 0: queen: message cannot be acknowledged: nil message", []string{"transactionId"}},
		{"Ack(no ids)", ackEmpty, "ack 0: queen: message cannot be acknowledged: missing transactionId or partitionId", nil},
		{"Renew(nil)", renewNil, "message 0: queen: message cannot be acknowledged: nil message", []string{"delivery", "transactionId"}},
		{"Renew(no lease)", renewNoLease, "message 0: queen: message cannot be acknowledged: no lease (committed on delivery?)", []string{"transactionId"}},
		{"Transaction Ack(no ids)", txEmpty, "missing transactionId or partitionId", nil},
	} {
		if !errors.Is(tc.err, queen.ErrNotAckable) || !errors.Is(tc.err, queen.ErrInvalidArgument) {
			t.Errorf("%s = %v; want ErrNotAckable", tc.name, tc.err)
			continue
		}
		if !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %q does not say %q", tc.name, tc.err, tc.want)
		}
		for _, u := range tc.unwanted {
			if strings.Contains(tc.err.Error(), u) {
				t.Errorf("%s: %q speaks of %q", tc.name, tc.err, u)
			}
		}
	}
}

// A payload that does not decode names the message by its id and its
// transaction id.
func TestDecodeErrorNamesTheMessage(t *testing.T) {
	m := &queen.Message{ID: "0192-msg", TransactionID: "txn-7", Raw: json.RawMessage(`"not a number"`)}
	_, err := queen.Decode[int](m)
	if err == nil || !strings.Contains(err.Error(), `decode message "0192-msg" (transactionId "txn-7"): `) {
		t.Errorf("Decode = %v", err)
	}
	_, err = queen.Decode[int](&queen.Message{TransactionID: "txn-8", Raw: json.RawMessage(`[]`)})
	if err == nil || !strings.Contains(err.Error(), `decode message with transactionId "txn-8": `) {
		t.Errorf("Decode of a message without an id = %v", err)
	}
	_, err = queen.Decode[int](&queen.Message{Raw: json.RawMessage(`[]`)})
	if err == nil || !strings.Contains(err.Error(), "decode message without an id: ") || strings.Contains(err.Error(), `""`) {
		t.Errorf("Decode of a message without ids = %v", err)
	}
	if !utf8.ValidString(err.Error()) {
		t.Error("invalid UTF-8")
	}
}
