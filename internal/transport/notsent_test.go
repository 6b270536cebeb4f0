package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ErrNotSent: a call none of whose attempts may have been written.

func TestNotSentWhenEveryAttemptIsRefused(t *testing.T) {
	for _, once := range []bool{false, true} {
		tr, _, _ := newTransport(t, Config{URLs: []string{refusingURL(t)}, Retry: RetryPolicy{MaxAttempts: 3}})
		r := txnReq
		r.NoRetryAfterSend = once
		resp, err := tr.Do(context.Background(), r)
		assert.Nil(t, resp)
		require.ErrorIs(t, err, ErrNotSent, "NoRetryAfterSend %v", once)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown)
		var op *net.OpError
		require.ErrorAs(t, err, &op, "the dial error is kept")
		assert.Equal(t, "dial", op.Op)
		assert.Contains(t, err.Error(), "after 3 attempt(s)")
	}
}

func TestNotSentOnDNSFailure(t *testing.T) {
	// net/http's own Transport (connection events), whose dial fails as
	// a name that does not resolve does.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}}
	}}}
	tr, _, _ := newTransport(t, Config{URLs: []string{"http://queen-broker.invalid"}, HTTPClient: hc, Retry: RetryPolicy{MaxAttempts: 2}})
	_, err := tr.Do(context.Background(), txnReq)
	require.ErrorIs(t, err, ErrNotSent)
	var dns *net.DNSError
	assert.ErrorAs(t, err, &dns)
}

func TestNotSentWhenCtxEndsBeforeAnyAttempt(t *testing.T) {
	srv := newServer(t, func(int, http.ResponseWriter, *http.Request) {})
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tr.Do(ctx, txnReq)
	require.ErrorIs(t, err, ErrNotSent)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, srv.Hits())
}

// One attempt that may have been written is enough to make the outcome
// open: a refused attempt after a dropped one is not "not sent".
func TestMaybeSentAttemptIsNotNotSent(t *testing.T) {
	srv := newServer(t, func(int, http.ResponseWriter, *http.Request) { drop() })
	dead := refusingURL(t)
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL, dead}, Retry: RetryPolicy{MaxAttempts: 2}})
	_, err := tr.Do(context.Background(), txnReq)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotSent, "the first attempt reached the broker")
	assert.ErrorIs(t, err, ErrOutcomeUnknown, "the first attempt may have been applied")
	assert.Equal(t, 1, srv.Hits())

	// Answered, even with a 503 each time: an answer is no ErrNotSent.
	srv2 := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusServiceUnavailable) })
	tr2, _, _ := newTransport(t, Config{URLs: []string{srv2.URL}, Retry: RetryPolicy{MaxAttempts: 2}})
	resp, err := tr2.Do(context.Background(), txnReq)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
}

// The same with the user's RoundTripper, which gives no connection events:
// a dial error says the attempt was not sent; any other error may have.
func TestNotSentWithUsersRoundTripper(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		err     error
		notSent bool
	}{
		{dialErr, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, false},
		{errors.New("EOF"), false},
	} {
		rt := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, tc.err })
		tr, _, _ := newTransport(t, Config{URLs: []string{"http://broker.test"}, HTTPClient: &http.Client{Transport: rt},
			Retry: RetryPolicy{MaxAttempts: 2}, Timeout: time.Second})
		_, err := tr.Do(context.Background(), txnReq)
		require.Error(t, err)
		assert.Equal(t, tc.notSent, errors.Is(err, ErrNotSent), "%v", tc.err)
	}
}

// A retried call whose every attempt got no answer after it may have been
// written fails with ErrOutcomeUnknown: an ack or a push may have been
// applied.
func TestRetriedCallWithoutAnswerIsUnknown(t *testing.T) {
	srv := newServer(t, func(int, http.ResponseWriter, *http.Request) { drop() })
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 2}})
	_, err := tr.Do(context.Background(), txnReq)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrNotSent)
	assert.Equal(t, 2, srv.Hits())
}

// What net/http's connection events say of an attempt that failed, on a
// RoundTripper that reports them as net/http's Transport does.
func TestNotSentByConnectionEvents(t *testing.T) {
	closedIdle := errors.New("http: server closed idle connection")
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name    string
		events  func(*httptrace.ClientTrace)
		err     error
		notSent bool
	}{
		{"no connection", func(tr *httptrace.ClientTrace) { tr.GetConn("b") }, dialErr, true},
		{"a connection, nothing written", func(tr *httptrace.ClientTrace) {
			tr.GetConn("b")
			tr.GotConn(httptrace.GotConnInfo{Reused: true})
		}, io.EOF, true},
		{"written, then the answer lost", func(tr *httptrace.ClientTrace) {
			tr.GetConn("b")
			tr.GotConn(httptrace.GotConnInfo{Reused: true})
			tr.WroteRequest(httptrace.WroteRequestInfo{})
		}, io.EOF, false},
		{"written after net/http saw the broker close the connection", func(tr *httptrace.ClientTrace) {
			tr.GetConn("b")
			tr.GotConn(httptrace.GotConnInfo{Reused: true})
			tr.WroteRequest(httptrace.WroteRequestInfo{})
		}, closedIdle, true},
		{"written on a first connection, a second not dialled", func(tr *httptrace.ClientTrace) {
			tr.GetConn("b")
			tr.GotConn(httptrace.GotConnInfo{Reused: true})
			tr.WroteRequest(httptrace.WroteRequestInfo{})
			tr.GetConn("b")
		}, dialErr, false},
		{"nothing written on a first connection, a second not dialled", func(tr *httptrace.ClientTrace) {
			tr.GetConn("b")
			tr.GotConn(httptrace.GotConnInfo{Reused: true})
			tr.GetConn("b")
		}, dialErr, true},
	} {
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			tc.events(httptrace.ContextClientTrace(r.Context()))
			return nil, tc.err
		})
		tr, _, _ := newTransport(t, Config{URLs: []string{"http://broker.test"}, HTTPClient: &http.Client{Transport: rt},
			Retry: RetryPolicy{MaxAttempts: 1}})
		_, err := tr.Do(context.Background(), withFlag(txnReq))
		require.Error(t, err, tc.name)
		assert.Equal(t, tc.notSent, errors.Is(err, ErrNotSent), "%s: %v", tc.name, err)
		assert.Equal(t, !tc.notSent, errors.Is(err, ErrOutcomeUnknown), "%s: %v", tc.name, err)
	}
}
