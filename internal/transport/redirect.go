package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The first attempt of a call through the pool New built goes to the
// pool without an http.Client in between: http.Client copies the header
// and the URL of every request, for redirects that a broker never sends,
// and in a consume loop of one message a pop those copies are a
// measurable share of the client's own work (BenchmarkConsume). Redirects
// are still followed, the way http.Client's default policy follows them
// (TestRedirectsAsHTTPClient checks the two side by side). With the user's
// client, that client sends every attempt, its own redirect policy, jar
// and timeout included.

// maxRedirects is how many redirects an attempt follows, as http.Client's
// default policy.
const maxRedirects = 10

// exchange sends one attempt of req and follows its redirects.
func (c *call) exchange(req *http.Request) (*http.Response, error) {
	if c.t.owned == nil {
		return c.hc.Do(req)
	}
	first, strip := req, false
	for hops := 0; ; hops++ {
		resp, err := c.RoundTrip(req)
		if err != nil {
			if rh, ok := err.(tls.RecordHeaderError); ok && string(rh.RecordHeader[:]) == "HTTP/" {
				err = http.ErrSchemeMismatch // as http.Client says it
			}
			return nil, urlError(first, req.URL.Redacted(), err)
		}
		var next *http.Request
		next, strip, err = redirectOf(first, req, resp, strip)
		switch {
		case err != nil:
			c.body, c.bodyOf = nil, nil
			return nil, urlError(first, req.URL.Redacted(), err)
		case next == nil:
			return resp, nil
		case hops == maxRedirects-1:
			// As http.Client: the last redirect and an error.
			return resp, urlError(first, resp.Header.Get("Location"), fmt.Errorf("stopped after %d redirects", maxRedirects))
		}
		c.body, c.bodyOf = nil, nil // the redirect's body: nobody reads it
		req = next
	}
}

// urlError wraps err as http.Client wraps the errors of Do: the method of
// the attempt's first request, the URL of the request that failed.
func urlError(first *http.Request, u string, err error) error {
	op := first.Method[:1] + strings.ToLower(first.Method[1:])
	return &url.Error{Op: op, URL: u, Err: err}
}

// redirectOf returns the request that follows resp, the answer to req in
// an attempt that began with first, or nil when resp is not a redirect to
// follow: not 301, 302, 303, 307 or 308, no Location, or a 307 or 308 of
// a body that cannot be sent again. 301, 302 and 303 go on with GET and no
// body (a HEAD stays a HEAD); 307 and 308 keep the method and the body.
// The next request carries first's header, less its credentials
// (Authorization, Proxy-Authorization, WWW-Authenticate, Cookie, Cookie2)
// once a hop went to a host that is neither first's nor a subdomain of it
// (strip: so far; stripped: from this hop on), and less Content-Type when
// the body is dropped.
func redirectOf(first, req *http.Request, resp *http.Response, strip bool) (next *http.Request, stripped bool, err error) {
	method, keepBody := req.Method, false
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
		if method != http.MethodGet && method != http.MethodHead {
			method = http.MethodGet
		}
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		keepBody = true
		if req.GetBody == nil && req.ContentLength != 0 {
			return nil, strip, nil
		}
	default:
		return nil, strip, nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, strip, nil
	}
	u, err := req.URL.Parse(loc)
	if err != nil {
		return nil, strip, fmt.Errorf("failed to parse Location header %q: %w", loc, err)
	}
	next, err = http.NewRequestWithContext(req.Context(), method, u.String(), nil)
	if err != nil {
		return nil, strip, err
	}
	next.Header = first.Header.Clone()
	if next.Header == nil {
		next.Header = http.Header{}
	}
	strip = strip || !sameOrSubdomain(u.Hostname(), first.URL.Hostname())
	if strip {
		for _, k := range []string{"Authorization", "Proxy-Authorization", "Www-Authenticate", "Cookie", "Cookie2"} {
			next.Header.Del(k)
		}
	}
	if keepBody && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, strip, err
		}
		next.Body, next.GetBody, next.ContentLength = body, req.GetBody, req.ContentLength
	} else {
		next.Header.Del("Content-Type")
	}
	return next, strip, nil
}

// sameOrSubdomain reports whether host is parent or a subdomain of it (an
// IP address only matches itself).
func sameOrSubdomain(host, parent string) bool {
	host, parent = strings.ToLower(host), strings.ToLower(parent)
	if host == parent {
		return true
	}
	if net.ParseIP(host) != nil || net.ParseIP(parent) != nil {
		return false
	}
	return strings.HasSuffix(host, "."+parent)
}
