package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
)

// Retryable reports whether an answer of that HTTP status may change when
// the same request is sent again later: the client's one rule, by which
// the transport retries, the consume loop pops again and
// queen.BrokerError.Temporary answers. Retryable: 408, 429 (admission
// budget, a proxy's rate limit) and the 5xx of a failing or busy broker or
// proxy: 500, 502, 503 (no leader, leader changed, timeout), 504, 507
// (storage full) and any 5xx not named next. Not retryable: every other
// status, and the 5xx that say the request can never be served as sent:
// 501 (no such route: an older broker), 505, 506, 508 (a proxy loop), 510
// and 511 (a captive portal). Whether a request may be resent after a
// retryable answer is a second question: see Request.NoRetryAfterSend.
func Retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusVariantAlsoNegotiates,
		http.StatusLoopDetected, http.StatusNotExtended, http.StatusNetworkAuthenticationRequired:
		return false
	}
	return status >= 500 && status <= 599
}

// RetryableErr reports whether an attempt that failed with err and got no
// answer may succeed when tried again: any network failure (refused or
// timed out dial, reset, EOF, an attempt timeout, DNS) is, except a
// request that can never go out as built: too many redirects, an
// unsupported scheme, an invalid header, a TLS certificate that does not
// verify (unknown authority, wrong host name, expired or invalid). A nil
// error and the caller's own ended context (a bare context.Canceled or
// context.DeadlineExceeded) are not retryable.
func RetryableErr(err error) bool {
	if err == nil || err == context.Canceled || err == context.DeadlineExceeded {
		return false
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return false
	}
	// net/http reports these as text only.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "stopped after") && strings.Contains(msg, "redirects"),
		strings.Contains(msg, "unsupported protocol scheme"),
		strings.Contains(msg, "invalid header"),
		strings.Contains(msg, "certificate is not trusted"):
		return false
	}
	return true
}
