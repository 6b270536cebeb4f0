package queen_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// unreadableAck is a RoundTripper whose first 200 ack answer (applied by
// the broker) reaches the client unreadable: a body that is not JSON.
type unreadableAck struct {
	rt   http.RoundTripper
	seen atomic.Int32
}

func (u *unreadableAck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := u.rt.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && strings.HasPrefix(req.URL.Path, "/api/v1/ack") && u.seen.Add(1) == 1 {
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader("{not json"))
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return resp, err
}

// An ack whose outcome is unknown (the broker may have applied it) is sent
// again: here the first ack's answer, applied, is unreadable, and a 5xx
// answers the next ack (queentest's fault injection). Every message ends
// acked, none is given up; a refusal of the repeat (0.15.1: the lease was
// released by the first attempt) is logged at Info as most likely applied,
// not as a refusal; OnLoopError hears of no refusal.
func TestConsumeAckOutcomeUnknownSentAgain(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			logs := &logSink{}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c, err := queen.New(srv.URL, queen.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
				queen.WithHTTPClient(&http.Client{Transport: &unreadableAck{rt: tr}}))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close(context.Background()) }()
			ctx := context.Background()
			payloads := []any{map[string]any{"i": 0}, map[string]any{"i": 1}, map[string]any{"i": 2}, map[string]any{"i": 3}}
			if _, err := c.Queue("q").Partition("p").Push(payloads...).Execute(ctx); err != nil {
				t.Fatal(err)
			}
			srv.FailNextWith(queentest.RouteAckBatch, 1, queentest.Failure{Status: http.StatusBadGateway})
			srv.FailNextWith(queentest.RouteAck, 1, queentest.Failure{Status: http.StatusBadGateway})
			var refusals atomic.Int32
			err = execute(t, ctx, func(ctx context.Context) error {
				return c.Queue("q").Batch(2).Each().Limit(4).
					Consume(ctx, func(context.Context, *queen.Message) error { return nil }).
					OnLoopError(func(_ context.Context, err error) {
						if _, ok := errors.AsType[*queen.AckError](err); ok {
							refusals.Add(1)
						}
					}).Execute(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			if strings.Contains(out, "its messages come back when their lease ends") {
				t.Fatalf("an ack of unknown outcome was given up:\n%s", out)
			}
			if strings.Contains(out, "broker refused acks") || refusals.Load() > 0 {
				t.Fatalf("the repeat of an applied ack was reported as a refusal:\n%s", out)
			}
			if p == queentest.Profile015 && !strings.Contains(out, "most likely that attempt applied them") {
				t.Fatalf("the refused repeat was not logged as most likely applied:\n%s", out)
			}
			msgs, err := c.Queue("q").Wait(false).Batch(10).Pop(ctx)
			if err != nil || len(msgs) != 0 {
				t.Fatalf("left after the loop: %d messages (%v)", len(msgs), err)
			}
		})
	}
}
