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
// the same request is sent again later. It is the one rule of the client:
// the transport retries by it, the consume loop backs off and pops again
// by it, and queen.BrokerError.Temporary reports it.
//
// Retryable: 408 (the server gave up waiting for the request), 429 (a full
// admission budget or a proxy's rate limit, with Retry-After) and the 5xx
// that a broker or a proxy sends while it is failing or busy: 500
// (internal), 502 and 504 (a proxy without a healthy broker), 503 (2.x: no
// leader, leader changed, timeout, with Retry-After), 507 (storage full,
// until space is freed) and any 5xx not named below.
//
// Not retryable: every other status, and the 5xx that say the request can
// never be served as sent: 501 (no such route or method: an older broker),
// 505 (HTTP version), 506 and 510 (content negotiation and extension
// misconfiguration), 508 (a proxy loop) and 511 (a captive portal wants a
// login). Asking again cannot change those.
//
// Whether a retryable answer may be resent is a second question, decided
// per request: see Request.NoRetryAfterSend.
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
