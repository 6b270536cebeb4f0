package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Request.NoRetryAfterSend: a call the broker does not apply idempotently
// is retried only when the broker surely did not apply it.

// hangUp closes the connection of a request whose body the server has read,
// without a byte of answer: the broker got the request, the client gets
// EOF.
func hangUp(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	_ = conn.Close()
}

// resetConn is hangUp with a TCP reset instead of a clean close.
func resetConn(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

var txnReq = Request{Method: http.MethodPost, Path: "/api/v1/transaction", Body: []byte(`{"operations":[]}`)}

func withFlag(r Request) Request {
	r.NoRetryAfterSend = true
	return r
}

func TestNoRetryAfterSendFailuresAfterSend(t *testing.T) {
	tests := []struct {
		name string
		fail func(t *testing.T, w http.ResponseWriter, r *http.Request)
	}{
		{"connection closed after the body was read", func(t *testing.T, w http.ResponseWriter, _ *http.Request) { hangUp(t, w) }},
		{"connection reset after the body was read", func(t *testing.T, w http.ResponseWriter, _ *http.Request) { resetConn(t, w) }},
		{"answer cut short", func(_ *testing.T, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"success":tr`)
			w.(http.Flusher).Flush()
			drop()
		}},
		{"attempt timeout waiting for the answer", func(_ *testing.T, _ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n < 2 { // the first attempt of each Do below
					tc.fail(t, w, r)
					return
				}
				_, _ = io.WriteString(w, okBody)
			})
			cfg := Config{URLs: []string{srv.URL}, Timeout: 200 * time.Millisecond}

			// With the flag: one attempt, an error saying the outcome is unknown.
			tr, sl, _ := newTransport(t, cfg)
			resp, err := tr.Do(context.Background(), withFlag(txnReq))
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.Nil(t, resp)
			assert.Contains(t, err.Error(), "may have reached the broker")
			assert.Equal(t, 1, srv.Hits(), "the request was sent once")
			assert.Equal(t, []byte(txnReq.Body), srv.Requests()[0].Body, "the broker got the whole request")
			assert.Empty(t, sl.Waits())

			// Without it (an idempotent call): retried, the second attempt answers.
			tr2, _, _ := newTransport(t, cfg)
			resp, err = tr2.Do(context.Background(), txnReq)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.Equal(t, 3, srv.Hits())
		})
	}
}

func TestNoRetryAfterSendStillRetriesWhatWasNotSent(t *testing.T) {
	t.Run("refused dial fails over", func(t *testing.T) {
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, sl, _ := newTransport(t, Config{URLs: []string{refusingURL(t), b.URL}})
		resp, err := tr.Do(context.Background(), withFlag(txnReq))
		require.NoError(t, err)
		assert.Equal(t, b.URL, resp.URL)
		assert.Equal(t, 1, b.Hits())
		assert.Len(t, sl.Waits(), 1)
	})

	t.Run("refused dial is retried until the budget is spent", func(t *testing.T) {
		tr, sl, _ := newTransport(t, Config{URLs: []string{refusingURL(t)}, Retry: RetryPolicy{MaxAttempts: 3}})
		_, err := tr.Do(context.Background(), withFlag(txnReq))
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing reached the broker")
		assert.Contains(t, err.Error(), "after 3 attempt(s)")
		assert.Len(t, sl.Waits(), 2)
	})

	t.Run("timeout while dialling is retried", func(t *testing.T) {
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		var dials atomic.Int32
		var d net.Dialer
		pool := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 { // a broker that does not answer the SYN
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return d.DialContext(ctx, network, addr)
		}}
		t.Cleanup(pool.CloseIdleConnections)
		tr, _, _ := newTransport(t, Config{URLs: []string{b.URL}, HTTPClient: &http.Client{Transport: pool}, Timeout: 100 * time.Millisecond})
		resp, err := tr.Do(context.Background(), withFlag(txnReq))
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.Status)
		assert.Equal(t, int32(2), dials.Load())
		assert.Equal(t, 1, b.Hits())
	})

	t.Run("a RoundTripper without connection events: only a dial error is retried", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			err     error
			unknown bool
		}{
			{"dial error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
			{"read error", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
			{"EOF", io.EOF, true},
		} {
			calls := 0
			rt := roundTripFunc(func(*http.Request) (*http.Response, error) {
				calls++
				if calls == 1 {
					return nil, tc.err
				}
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader([]byte(okBody)))}, nil
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{"http://broker.invalid"}, HTTPClient: &http.Client{Transport: rt}})
			resp, err := tr.Do(context.Background(), withFlag(txnReq))
			if tc.unknown {
				assert.ErrorIs(t, err, ErrOutcomeUnknown, tc.name)
				assert.Equal(t, 1, calls, tc.name)
				continue
			}
			if assert.NoError(t, err, tc.name) {
				assert.Equal(t, http.StatusOK, resp.Status, tc.name)
			}
			assert.Equal(t, 2, calls, tc.name)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestNoRetryAfterSendStatuses(t *testing.T) {
	envelope := func(code string) string { return `{"error":"x","code":"` + code + `"}` }
	tests := []struct {
		status int
		body   string
		retry  bool
	}{
		{http.StatusTooManyRequests, envelope("overloaded"), true},
		{http.StatusServiceUnavailable, envelope("retry"), true},
		{http.StatusServiceUnavailable, envelope("no_leader"), true},
		{http.StatusServiceUnavailable, `not json`, true},
		{http.StatusServiceUnavailable, envelope("outcome_unknown"), false},
		// A 2.x follower whose forward to the leader failed (handlers/raft.rs
		// forward_to_leader): the leader may have applied the request.
		{http.StatusServiceUnavailable, `{"error":"the leader at 10.0.0.2:6632 is unreachable: connection reset","code":"retry"}`, false},
		{http.StatusServiceUnavailable, `{"error":"the leader at 10.0.0.2:6632 did not answer in time","code":"retry"}`, false},
		{http.StatusInternalServerError, envelope("internal"), false},
		{http.StatusBadGateway, ``, false},
		{http.StatusGatewayTimeout, ``, false},
		{http.StatusInsufficientStorage, envelope("storage_full"), false},
		{http.StatusRequestTimeout, ``, false},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.status)+" "+tc.body, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 0 || (n == 1 && !tc.retry) { // the first attempt of each Do below
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, tc.body)
					return
				}
				_, _ = io.WriteString(w, okBody)
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
			resp, err := tr.Do(context.Background(), withFlag(txnReq))
			require.NoError(t, err, "an answer is not an error")
			if tc.retry {
				assert.Equal(t, http.StatusOK, resp.Status)
				assert.Equal(t, 2, srv.Hits())
				return
			}
			assert.Equal(t, tc.status, resp.Status)
			assert.Equal(t, tc.body, string(resp.Body))
			assert.Equal(t, 1, srv.Hits())

			// Without the flag every one of them is retried.
			resp, err = tr.Do(context.Background(), txnReq)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.Equal(t, 3, srv.Hits())
		})
	}
}

func TestNoRetryAfterSendNeverReturnsAnEarlierAnswer(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n%2 == 0 {
			reply(w, http.StatusServiceUnavailable) // not applied: retried
			return
		}
		hangUp(t, w) // applied, answer lost
	})
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 2}})

	resp, err := tr.Do(context.Background(), withFlag(txnReq))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Nil(t, resp, "the 503 of the first attempt is not the outcome")
	assert.Equal(t, 2, srv.Hits())

	// Without the flag the earlier answer stands in for the lost one.
	resp, err = tr.Do(context.Background(), txnReq)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
}

func TestNoRetryAfterSendCtx(t *testing.T) {
	t.Run("ctx ends while waiting for the answer", func(t *testing.T) {
		srv := newServer(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := tr.Do(ctx, withFlag(txnReq))
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, srv.Hits())
	})

	t.Run("ctx ends before anything is sent", func(t *testing.T) {
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := tr.Do(ctx, withFlag(txnReq))
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown)
		assert.Equal(t, 0, srv.Hits())
	})

	t.Run("an answer received as ctx ends is the outcome", func(t *testing.T) {
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		for _, flag := range []bool{true, false} {
			ctx, cancel := context.WithCancel(context.Background())
			pool := newPool(http.DefaultTransport, 1, 1)
			t.Cleanup(pool.CloseIdleConnections)
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := pool.RoundTrip(r)
				if err != nil {
					return nil, err
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				resp.Body = io.NopCloser(bytes.NewReader(body))
				cancel() // the caller gives up just as the answer is in
				return resp, err
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, HTTPClient: &http.Client{Transport: rt}})
			r := txnReq
			r.NoRetryAfterSend = flag
			resp, err := tr.Do(ctx, r)
			if flag {
				require.NoError(t, err)
				assert.JSONEq(t, okBody, string(resp.Body))
			} else {
				require.ErrorIs(t, err, context.Canceled, "unchanged for other calls")
			}
			cancel()
		}
	})
}

// net/http sends a GET again by itself when a reused connection closes
// after the request was written: a pop (NoRetryAfterSend) must not be
// resent that way either, since its first claim may hold messages.
func TestNoRetryAfterSendStopsNetHTTPResend(t *testing.T) {
	for _, once := range []bool{false, true} {
		t.Run("once="+strconv.FormatBool(once), func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 { // the second request, on the kept-alive connection
					hangUp(t, w)
					return
				}
				assert.Empty(t, r.Header.Get("Content-Length"), "no body announced")
				assert.Empty(t, r.TransferEncoding, "no body sent")
				_, _ = io.WriteString(w, okBody)
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 3}})
			pop := Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q", NoRetryAfterSend: once}
			_, err := tr.Do(context.Background(), pop) // opens the connection
			require.NoError(t, err)
			resp, err := tr.Do(context.Background(), pop)
			if !once {
				require.NoError(t, err) // resent, by net/http or by the retry
				assert.Equal(t, http.StatusOK, resp.Status)
				assert.Equal(t, 3, srv.Hits())
				return
			}
			require.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.Nil(t, resp)
			assert.Equal(t, 2, srv.Hits(), "the pop was not sent again")
			for _, r := range srv.Requests() {
				assert.Empty(t, r.Body)
			}
		})
	}
}

// The body that stops net/http's resend of a NoRetryAfterSend GET sends
// nothing: the request is, byte for byte, the same GET without the flag
// (no Content-Length, no Transfer-Encoding, no body).
func TestNoRetryAfterSendWireUnchanged(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	// Each connection's bytes: its first request, answered, then whatever
	// else the client writes on it within 100 ms.
	got := make(chan string, 2)
	go func() {
		for range 2 {
			conn, err := l.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			br := bufio.NewReader(conn)
			var head bytes.Buffer
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(okBody))+"\r\n\r\n"+okBody)
			_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			rest, _ := io.ReadAll(br)
			_ = conn.Close()
			got <- head.String() + string(rest)
		}
	}()
	wire := func(once bool) string {
		tr, _, _ := newTransport(t, Config{URLs: []string{"http://" + l.Addr().String()}, UserAgent: "queen-go/test"})
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q",
			Query: url.Values{"batch": {"1"}, "wait": {"true"}}, NoRetryAfterSend: once})
		require.NoError(t, err)
		assert.Equal(t, okBody, string(resp.Body))
		return <-got
	}
	plain := wire(false)
	assert.True(t, strings.HasPrefix(plain, "GET /api/v1/pop/queue/q?batch=1&wait=true HTTP/1.1\r\n"), plain)
	assert.True(t, strings.HasSuffix(plain, "\r\n\r\n"), "nothing after the head: %q", plain)
	assert.Equal(t, plain, wire(true))
}

// An answer returned after another attempt of the call may have been
// applied says so (Response.OtherMayHaveApplied): a hang-up after the
// request went out, then 503s or a 400; or a 503, then hang-ups until the
// attempts run out (the 503 is returned); or 500s (each may have been
// applied). Not after attempts answered 503 only.
func TestResponseSaysAnotherAttemptMayHaveApplied(t *testing.T) {
	hang := func(t *testing.T, w http.ResponseWriter) { hangUp(t, w) }
	status := func(code int) func(*testing.T, http.ResponseWriter) {
		return func(_ *testing.T, w http.ResponseWriter) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error":"x"}`)
		}
	}
	tests := []struct {
		name   string
		seq    []func(*testing.T, http.ResponseWriter)
		status int
		other  bool
	}{
		{"hang up, then 503", []func(*testing.T, http.ResponseWriter){hang, status(503), status(503)}, 503, true},
		{"hang up, then 400", []func(*testing.T, http.ResponseWriter){hang, status(400)}, 400, true},
		{"503, then hang-ups", []func(*testing.T, http.ResponseWriter){status(503), hang, hang}, 503, true},
		{"503s", []func(*testing.T, http.ResponseWriter){status(503), status(503), status(503)}, 503, false},
		{"500 alone", []func(*testing.T, http.ResponseWriter){status(500), status(500), status(500)}, 500, true},
		{"503, then 200", []func(*testing.T, http.ResponseWriter){status(503), status(200)}, 200, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				tc.seq[min(n, len(tc.seq)-1)](t, w)
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: len(tc.seq)}})
			resp, err := tr.Do(context.Background(), txnReq)
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.Status)
			assert.Equal(t, tc.other, resp.OtherMayHaveApplied)
		})
	}
}
