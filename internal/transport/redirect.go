package transport

import (
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
	first := req
	for hops := 0; ; hops++ {
		resp, err := c.RoundTrip(req)
		if err != nil {
			return nil, urlError(req, req.URL.Redacted(), err)
		}
		next, err := redirectOf(first, req, resp)
		switch {
		case err != nil:
			c.body, c.bodyOf = nil, nil
			return nil, urlError(req, req.URL.Redacted(), err)
		case next == nil:
			return resp, nil
		case hops == maxRedirects-1:
			// As http.Client: the last redirect and an error.
			return resp, urlError(req, next.URL.Redacted(), fmt.Errorf("stopped after %d redirects", maxRedirects))
		}
		c.body, c.bodyOf = nil, nil // the redirect's body: nobody reads it
		req = next
	}
}

// urlError wraps err as http.Client wraps the errors of Do.
func urlError(req *http.Request, u string, err error) error {
	op := req.Method[:1] + strings.ToLower(req.Method[1:])
	return &url.Error{Op: op, URL: u, Err: err}
}

// redirectOf returns the request that follows resp, the answer to req in
// an attempt that began with first, or nil when resp is not a redirect to
// follow: not 301, 302, 303, 307 or 308, no Location, or a 307 or 308 of
// a body that cannot be sent again. 301, 302 and 303 go on with GET and no
// body (a HEAD stays a HEAD); 307 and 308 keep the method and the body.
// The next request carries first's header, less its credentials
// (Authorization, Proxy-Authorization, WWW-Authenticate, Cookie, Cookie2)
// when it goes to a host that is neither first's nor a subdomain of it,
// and less Content-Type when the body is dropped.
func redirectOf(first, req *http.Request, resp *http.Response) (*http.Request, error) {
	method, keepBody := req.Method, false
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
		if method != http.MethodGet && method != http.MethodHead {
			method = http.MethodGet
		}
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		keepBody = true
		if req.GetBody == nil && req.ContentLength != 0 {
			return nil, nil
		}
	default:
		return nil, nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, nil
	}
	u, err := req.URL.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("failed to parse Location header %q: %w", loc, err)
	}
	next, err := http.NewRequestWithContext(req.Context(), method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	next.Header = first.Header.Clone()
	if next.Header == nil {
		next.Header = http.Header{}
	}
	if !sameOrSubdomain(u.Hostname(), first.URL.Hostname()) {
		for _, k := range []string{"Authorization", "Proxy-Authorization", "Www-Authenticate", "Cookie", "Cookie2"} {
			next.Header.Del(k)
		}
	}
	if keepBody && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body, next.GetBody, next.ContentLength = body, req.GetBody, req.ContentLength
	} else {
		next.Header.Del("Content-Type")
	}
	return next, nil
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
