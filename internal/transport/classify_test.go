package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The one retry rule of the client, by status.
func TestRetryableStatusTable(t *testing.T) {
	want := map[int]bool{
		200: false, 201: false, 204: false, 301: false, 307: false,
		400: false, 401: false, 403: false, 404: false, 409: false, 413: false, 422: false,
		408: true, 429: true,
		500: true, 502: true, 503: true, 504: true, 507: true, 509: true, 599: true,
		501: false, 505: false, 506: false, 508: false, 510: false, 511: false,
		0: false, 600: false, 999: false,
	}
	for status, retry := range want {
		assert.Equal(t, retry, Retryable(status), "Retryable(%d)", status)
	}
}

// The same rule for failures without an answer.
func TestRetryableErrTable(t *testing.T) {
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "http://b/x", Err: err} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"reset", urlErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"EOF", urlErr(io.EOF), true},
		{"attempt timeout", fmt.Errorf("attempt timeout of 1s exceeded: %w", urlErr(context.DeadlineExceeded)), true},
		{"bare DNS failure", &net.DNSError{Err: "no such host", Name: "b"}, true},
		{"caller's ctx cancelled", context.Canceled, false},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"too many redirects", urlErr(errors.New("stopped after 10 redirects")), false},
		{"unsupported scheme", urlErr(errors.New("unsupported protocol scheme \"ftp\"")), false},
		{"invalid header", urlErr(errors.New("net/http: invalid header field value for \"X\"")), false},
		{"untrusted certificate", urlErr(x509.UnknownAuthorityError{}), false},
		{"wrapped invalid certificate", urlErr(fmt.Errorf("tls: %w", x509.CertificateInvalidError{Reason: x509.Expired})), false},
		{"verification failed", urlErr(&tls.CertificateVerificationError{Err: x509.HostnameError{Host: "b"}}), false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, RetryableErr(tc.err), tc.name)
	}
}

// The transport follows the table: each status is tried MaxAttempts times
// when retryable, once otherwise.
func TestTransportFollowsRetryable(t *testing.T) {
	for _, status := range []int{408, 429, 500, 502, 503, 504, 507, 501, 505, 400, 404} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, status) })
			tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 3}})
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			assert.Equal(t, status, resp.Status)
			want := 1
			if Retryable(status) {
				want = 3
			}
			assert.Equal(t, want, srv.Hits())
		})
	}
}

// wrapped is a RoundTripper that is not an *http.Transport, as an
// instrumentation library or a test mock installs in http.DefaultTransport.
type wrapped struct{ next http.RoundTripper }

func (w wrapped) RoundTrip(r *http.Request) (*http.Response, error) { return w.next.RoundTrip(r) }

// The pool is an *http.Transport with the standard settings whatever
// http.DefaultTransport is.
func TestPoolFromAnyDefaultTransport(t *testing.T) {
	std := http.DefaultTransport.(*http.Transport)
	for name, def := range map[string]http.RoundTripper{
		"*http.Transport": std, "wrapped": wrapped{std}, "nil": nil, "typed nil": (*http.Transport)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			var pool *http.Transport
			require.NotPanics(t, func() { pool = newPool(def, 40, 3) })
			require.NotNil(t, pool)
			assert.NotSame(t, std, pool)
			assert.NotNil(t, pool.Proxy)
			assert.NotNil(t, pool.DialContext)
			assert.Equal(t, std.ForceAttemptHTTP2, pool.ForceAttemptHTTP2)
			assert.Equal(t, std.TLSHandshakeTimeout, pool.TLSHandshakeTimeout)
			assert.Equal(t, std.IdleConnTimeout, pool.IdleConnTimeout)
			assert.Equal(t, std.ExpectContinueTimeout, pool.ExpectContinueTimeout)
			assert.Equal(t, 40, pool.MaxIdleConnsPerHost)
			assert.Equal(t, 120, pool.MaxIdleConns)

			srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
			resp, err := (&http.Client{Transport: pool}).Get(srv.URL)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			pool.CloseIdleConnections()
		})
	}
}
