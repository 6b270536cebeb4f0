package queen_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A base URL whose path ends in the API's own /api/v1 would have every
// request go to /api/v1/api/v1/...: New refuses it, saying which base URL
// to give instead.
func TestNewRefusesTheAPIPath(t *testing.T) {
	for _, tc := range []struct{ url, base string }{
		{"http://host:8099/api/v1", "http://host:8099"},
		{"http://host:8099/api/v1/", "http://host:8099"},
		{"https://gw/queen/api/v1", "https://gw/queen"},
	} {
		c, err := queen.New(tc.url)
		if c != nil || !errors.Is(err, queen.ErrInvalidURL) || !errors.Is(err, queen.ErrInvalidArgument) {
			t.Fatalf("New(%q) = %v, %v; want ErrInvalidURL", tc.url, c, err)
		}
		if !strings.Contains(err.Error(), "ends in /api/v1") || !strings.Contains(err.Error(), `"`+tc.base+`"`) {
			t.Errorf("New(%q): %q does not name the path and the base URL %q", tc.url, err, tc.base)
		}
	}
	if _, err := queen.New("http://a:6632", queen.WithURLs("http://b:6632/api/v1")); !errors.Is(err, queen.ErrInvalidURL) {
		t.Errorf("a failover URL ending in /api/v1: %v", err)
	}
	// A prefix that merely contains the words is a prefix.
	for _, u := range []string{"http://gw/api/v1x", "http://gw/api/v1/queen", "http://gw/v1"} {
		c, err := queen.New(u)
		if err != nil {
			t.Errorf("New(%q): %v", u, err)
			continue
		}
		_ = c.Close(context.Background())
	}
}

// A base URL with a proxy's path prefix is served: requests go to the
// prefix + /api/v1/..., and a refusal or a failure names the URL really
// requested.
func TestProxyPrefixIsServed(t *testing.T) {
	broker := queentest.Start(t)
	target, err := url.Parse(broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	proxy := httputil.NewSingleHostReverseProxy(target)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		rest, ok := strings.CutPrefix(r.URL.Path, "/queen/")
		if !ok {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>\n  <head><title>502 Bad Gateway</title></head>\n  <body>no route</body>\n</html>\n")
			return
		}
		r.URL.Path, r.URL.RawPath = "/"+rest, ""
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(gw.Close)

	c, err := queen.New(gw.URL+"/queen/", queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := t.Context()
	if _, err := c.Queue("orders").Push(map[string]int{"n": 1}).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Queue("orders").Batch(1).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop through the prefix: %d messages, %v", len(msgs), err)
	}
	mu.Lock()
	got := append([]string(nil), paths...)
	mu.Unlock()
	if len(got) != 2 || got[0] != "/queen/api/v1/push" || got[1] != "/queen/api/v1/pop/queue/orders" {
		t.Fatalf("the gateway saw %q; want the prefix before /api/v1 once", got)
	}

	// The gateway refuses another prefix with an HTML page: the error names
	// the URL requested, the status, the content type and an excerpt.
	other, err := queen.New(gw.URL+"/other", queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	_, err = other.Queue("orders").Push(1).Execute(ctx)
	var be *queen.BrokerError
	if !errors.As(err, &be) {
		t.Fatalf("push = %v; want a *BrokerError", err)
	}
	// A 502 may follow applying (the gateway may have passed the request
	// on): the push's outcome is open.
	want := "queen: broker answered 502 to POST " + gw.URL + "/other/api/v1/push (text/html): " +
		"<html> <head><title>502 Bad Gateway</title></head> <body>no route</body> </html>"
	if be.Error() != want || !errors.Is(err, queen.ErrOutcomeUnknown) {
		t.Errorf("message\n %q\nwant\n %q, matching ErrOutcomeUnknown", be, want)
	}
	if be.URL != gw.URL+"/other/api/v1/push" || be.Path != "/api/v1/push" || be.ContentType != "text/html" ||
		!strings.HasPrefix(string(be.Body), "<html>\n  <head>") {
		t.Errorf("BrokerError = %+v", be)
	}

	// No answer at all: the transport's error names the URL too.
	gw.Close()
	_, err = c.Queue("orders").Push(1).Execute(ctx)
	if err == nil || !strings.Contains(err.Error(), "POST "+gw.URL+"/queen/api/v1/push: no answer after 1 attempt(s)") {
		t.Errorf("push to a closed gateway: %v", err)
	}
}

// Client.Close waits for a long poll in flight: the pop returns what was
// pushed meanwhile to its caller, and Close returns then. A Close whose
// ctx ends first returns ctx's error and leaves the poll to go on. On the
// bubble's clock.
func TestCloseWaitsForLongPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := bubbleEnv(t)
		ctx := context.Background()
		other, err := queen.New(e.srv.URL, queen.WithHTTPClient(&http.Client{Transport: spyTransport{srv: e.srv, spy: &spy{}}}))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		type popped struct {
			msgs []*queen.Message
			err  error
			at   time.Duration
		}
		start := time.Now()
		got := make(chan popped, 1)
		go func() {
			msgs, err := e.c.Queue("polled").Wait(true).TimeoutMillis(30000).Pop(ctx)
			got <- popped{msgs, err, time.Since(start)}
		}()
		synctest.Wait() // the pop waits at the broker

		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := e.c.Close(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with a ctx that ends: %v", err)
		}
		if _, err := e.c.Queue("polled").Push(1).Execute(ctx); !errors.Is(err, queen.ErrClosed) {
			t.Fatalf("a call after Close: %v", err)
		}
		closed := make(chan error, 1)
		go func() { closed <- e.c.Close(ctx) }()
		time.Sleep(4 * time.Second)
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v while the long poll waited", err)
		case p := <-got:
			t.Fatalf("the long poll ended: %+v", p)
		default:
		}
		if _, err := other.Queue("polled").Push(map[string]int{"n": 1}).Execute(ctx); err != nil {
			t.Fatal(err)
		}
		p := <-got
		if p.err != nil || len(p.msgs) != 1 || p.at != 5*time.Second {
			t.Fatalf("the long poll: %d messages, %v, after %v; want the one pushed at 5 s", len(p.msgs), p.err, p.at)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}
