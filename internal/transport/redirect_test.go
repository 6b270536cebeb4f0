package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The first attempt through the pool New built follows redirects without
// http.Client; each case runs through that pool and through a plain
// http.Client (the user's-client path, where net/http follows), and the
// brokers must see the same requests (method, path, body, credentials,
// Content-Type) and the calls end alike.
func TestRedirectsAsHTTPClient(t *testing.T) {
	// Two hosts: "127.0.0.1" and "localhost" name the same server, so
	// that a redirect can go to another host.
	cases := []struct {
		name   string
		method string
		body   string
		status int
		loc    func(srv string) string // "" : no Location
	}{
		{"301 GET relative", http.MethodGet, "", 301, func(string) string { return "/new?x=1" }},
		{"302 POST becomes GET", http.MethodPost, `{"a":1}`, 302, func(string) string { return "/new" }},
		{"303 DELETE becomes GET", http.MethodDelete, "", 303, func(string) string { return "/new" }},
		{"307 POST keeps body", http.MethodPost, `{"a":1}`, 307, func(string) string { return "/new" }},
		{"308 PUT keeps body", http.MethodPut, `{"b":2}`, 308, func(string) string { return "/new" }},
		{"307 same host absolute", http.MethodPost, `{}`, 307, func(s string) string { return s + "/new" }},
		{"307 other host drops credentials", http.MethodPost, `{}`, 307, func(s string) string {
			return strings.Replace(s, "127.0.0.1", "localhost", 1) + "/new"
		}},
		{"302 other host", http.MethodGet, "", 302, func(s string) string { return strings.Replace(s, "127.0.0.1", "localhost", 1) + "/new" }},
		{"no Location", http.MethodGet, "", 302, func(string) string { return "" }},
		{"300 not followed", http.MethodGet, "", 300, func(string) string { return "/new" }},
		{"endless", http.MethodGet, "", 302, func(string) string { return "/old" }},
		{"bad Location", http.MethodGet, "", 302, func(string) string { return "http://[::1" }},
		{"303 to a dead host names the first method", http.MethodPost, `{}`, 303, func(string) string { return "http://127.0.0.1:1/new" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				reqs   []string
				status int
				body   string
				err    string
			}
			run := func(user bool) outcome {
				var srvURL string
				srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/old" {
						if loc := tc.loc(srvURL); loc != "" {
							w.Header().Set("Location", loc)
						}
						w.WriteHeader(tc.status)
						_, _ = io.WriteString(w, "moved")
						return
					}
					_, _ = io.WriteString(w, okBody)
				})
				srvURL = srv.URL
				cfg := Config{URLs: []string{srv.URL}, BearerToken: "tok", Retry: RetryPolicy{MaxAttempts: 1}}
				if user {
					cfg.HTTPClient = &http.Client{Transport: newPool(2, 1)}
				}
				tr, _, _ := newTransport(t, cfg)
				if user {
					require.Nil(t, tr.shared[0], "the user's client path")
				} else {
					require.NotNil(t, tr.owned, "the pool path")
				}
				var body []byte
				if tc.body != "" {
					body = []byte(tc.body)
				}
				resp, err := tr.Do(context.Background(), Request{Method: tc.method, Path: "/old", Body: body})
				var o outcome
				for _, r := range srv.Requests() {
					o.reqs = append(o.reqs, fmt.Sprintf("%s %s?%s body=%q auth=%q ctype=%q", r.Method, r.Path, r.RawQuery, r.Body,
						r.Header.Get("Authorization"), r.Header.Get("Content-Type")))
				}
				if resp != nil {
					o.status, o.body = resp.Status, string(resp.Body)
				}
				if err != nil {
					// The URL in the message names the server of the run.
					o.err = strings.ReplaceAll(err.Error(), srv.URL[len("http://"):], "SERVER")
				}
				return o
			}
			pool, user := run(false), run(true)
			assert.Equal(t, user, pool)
			assert.NotEmpty(t, pool.reqs)
		})
	}
}

// An https URL served by a plain-HTTP server fails the same way on both
// paths: http.ErrSchemeMismatch, not the TLS record error.
func TestSchemeMismatchAsHTTPClient(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	u := "https://" + strings.TrimPrefix(srv.URL, "http://")
	for _, user := range []bool{false, true} {
		cfg := Config{URLs: []string{u}, Retry: RetryPolicy{MaxAttempts: 1}}
		if user {
			cfg.HTTPClient = &http.Client{Transport: newPool(2, 1)}
		}
		tr, _, _ := newTransport(t, cfg)
		_, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
		assert.ErrorIs(t, err, http.ErrSchemeMismatch, "user client %v: %v", user, err)
	}
}
