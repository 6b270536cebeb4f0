package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadBody(t *testing.T) {
	const text = `{"messages":[{"id":"a"}]}`
	for _, tc := range []struct {
		name string
		r    io.Reader
		n    int64
		want string
		err  bool
	}{
		{"announced length", strings.NewReader(text), int64(len(text)), text, false},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader(text)), int64(len(text)), text, false},
		{"unknown length", strings.NewReader(text), -1, text, false},
		{"longer than announced", strings.NewReader(text), 5, text, false},
		{"above the preallocation bound", strings.NewReader(text), 4<<20 + 1, text, false},
		{"empty", strings.NewReader(""), 0, "", false},
		{"cut short", io.MultiReader(strings.NewReader(text[:7]), iotest.ErrReader(io.ErrUnexpectedEOF)), int64(len(text)), text[:7], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readBody(tc.r, tc.n)
			if tc.err {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, string(got))
			assert.NotNil(t, got, "an empty body is an empty slice, as io.ReadAll gives")
		})
	}
}

// An attempt cut by the per-attempt timeout fails as http.Client.Timeout
// would: a timeout (net.Error) matching context.DeadlineExceeded, though
// the caller's ctx did not end.
func TestAttemptTimeoutError(t *testing.T) {
	srv := newServer(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}, Timeout: 50 * time.Millisecond,
		Retry: RetryPolicy{MaxAttempts: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := tr.Do(ctx, Request{Method: http.MethodGet, Path: "/x"})
	assert.Nil(t, resp)
	require.Error(t, err)
	assert.NoError(t, ctx.Err())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.Contains(t, err.Error(), "attempt timeout of 50ms exceeded")
	assert.Contains(t, err.Error(), "after 2 attempt(s)")
	// An attempt whose 50 ms end before its connection was made (a busy
	// machine) never reaches the server: it is still an attempt.
	assert.LessOrEqual(t, srv.Hits(), 2)
	assert.Len(t, sl.Waits(), 1)
}

// Calls are recycled: nothing of one (query, body, headers, answer,
// budget) reaches the next.
func TestCallsStartClean(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			reply(w, http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 1}})
	ctx := context.Background()
	resp, err := tr.Do(ctx, Request{Method: http.MethodPost, Path: "/a", Query: url.Values{"q": {"1"}}, Body: []byte(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
	for range 3 {
		resp, err = tr.Do(ctx, Request{Method: http.MethodGet, Path: "/b"})
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, resp.Status)
		assert.Empty(t, resp.Body)
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 4)
	for _, r := range reqs[1:] {
		assert.Equal(t, "/b", r.Path)
		assert.Empty(t, r.RawQuery)
		assert.Empty(t, r.Body)
		assert.NotContains(t, r.Header, "Content-Type")
	}
	assert.Empty(t, sl.Waits())
}

// A redirect is followed within the attempt; the answer is the last hop's.
func TestRedirectFollowed(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			w.Header().Set("Location", "/new")
			w.WriteHeader(http.StatusFound)
			_, _ = io.WriteString(w, "moved")
			return
		}
		_, _ = io.WriteString(w, okBody)
	})
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/old"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.Status)
	assert.Equal(t, okBody, string(resp.Body))
	assert.Equal(t, 2, srv.Hits())
}

// A call of one attempt and a call that may retry send the same request:
// the body with its length, sent again on a 307 that keeps the method,
// and end the same way on a network failure.
func TestOneAttemptSendsAsTheLoop(t *testing.T) {
	for _, attempts := range []int{1, 3} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/old" {
					w.Header().Set("Location", "/new")
					w.WriteHeader(http.StatusTemporaryRedirect)
					return
				}
				_, _ = io.WriteString(w, okBody)
			})
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
			body := []byte(`{"transactionId":"t"}`)
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/old", Body: body, Attempts: attempts})
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.Equal(t, 1, resp.Attempts)
			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			for _, r := range reqs {
				assert.Equal(t, http.MethodPost, r.Method)
				assert.Equal(t, string(body), string(r.Body))
				assert.Equal(t, strconv.Itoa(len(body)), r.Header.Get("Content-Length"))
				assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			}
			assert.Equal(t, "/new", reqs[1].Path)

			// Nothing listens any more: no answer after the attempts.
			srv.Close()
			_, err = tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/x", Body: body, Attempts: attempts})
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("transport: POST %s/x: no answer after %d attempt(s): ", srv.URL, attempts))
		})
	}
}

// BenchmarkDo is one GET answered 204 by a local server, with the default
// silent logger: the per-request cost of Do (allocs/op include the server's).
func BenchmarkDo(b *testing.B) {
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	tr, err := New(Config{URLs: []string{"http://" + l.Addr().String()}})
	require.NoError(b, err)
	defer tr.Close()
	req := Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q",
		Query: url.Values{"batch": {"1"}, "partitions": {"1"}, "wait": {"false"}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.Do(ctx, req)
		if err != nil || resp.Status != http.StatusNoContent {
			b.Fatal(resp, err)
		}
	}
}
