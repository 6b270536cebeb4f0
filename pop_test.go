package queen_test

import (
	"errors"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A pop whose answer is lost may have leased messages: it is not sent
// again (a second pop would answer "empty" while the first claim holds
// them), the caller gets ErrOutcomeUnknown, and the messages come back
// when the lease ends. Nothing is lost.
func TestPopAnswerLostIsOutcomeUnknown(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run("wait="+strconv.FormatBool(wait), func(t *testing.T) {
			clock := queentest.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			srv := queentest.Start(t, queentest.WithClock(clock))
			c := retryingClient(t, srv.URL)
			ctx := t.Context()
			mustPush(t, c, "jobs", "p", 1, 2, 3)
			pop := func() ([]*queen.Message, error) {
				return c.Queue("jobs").Group("g").SubscriptionMode(queen.SubscriptionModeAll).
					Batch(10).Wait(wait).TimeoutMillis(200).Pop(ctx)
			}

			srv.ResetCounters()
			srv.DropNextResponses(queentest.RoutePop, 1)
			msgs, err := pop()
			if !errors.Is(err, queen.ErrOutcomeUnknown) {
				t.Fatalf("Pop = %d messages, %v; want ErrOutcomeUnknown", len(msgs), err)
			}
			if msgs != nil {
				t.Fatalf("Pop returned %d messages with its error", len(msgs))
			}
			var ue *url.Error
			if !errors.As(err, &ue) {
				t.Fatalf("Pop = %v; want the network failure wrapped", err)
			}
			if n := srv.Requests(queentest.RoutePop); n != 1 {
				t.Fatalf("the pop was sent %d times, want once", n)
			}
			if n := srv.LeasedCount("jobs", "g"); n != 3 {
				t.Fatalf("LeasedCount = %d; the lost claim should hold the 3 messages", n)
			}

			// The claim holds them until its lease ends (60 s by default),
			// then every one is delivered again.
			clock.Advance(61 * time.Second)
			msgs, err = pop()
			if err != nil {
				t.Fatal(err)
			}
			got := payloads(msgs)
			sort.Strings(got)
			if len(got) != 3 || got[0] != "1" || got[1] != "2" || got[2] != "3" {
				t.Fatalf("after the lease: %v; want 1, 2, 3", got)
			}
		})
	}
}

// The answers a broker sends without serving a pop (429, 503) are retried;
// a 500 may come after the claim and is ErrOutcomeUnknown with the
// broker's answer; other refusals are the *BrokerError.
func TestPopStatuses(t *testing.T) {
	tests := []struct {
		status  int
		sent    int
		unknown bool
	}{
		{429, 2, false}, {503, 2, false}, {500, 1, true}, {502, 1, true}, {504, 1, true},
		{501, 1, false}, {507, 1, false}, {400, 1, false},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			srv := queentest.Start(t)
			c := retryingClient(t, srv.URL)
			mustPush(t, c, "jobs", "p", 1)
			srv.ResetCounters()
			srv.FailNext(queentest.RoutePop, 1, tc.status, 0)
			msgs, err := c.Queue("jobs").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Pop(t.Context())
			if n := srv.Requests(queentest.RoutePop); n != tc.sent {
				t.Fatalf("sent %d times, want %d", n, tc.sent)
			}
			if tc.sent == 2 {
				if err != nil || len(msgs) != 1 {
					t.Fatalf("Pop = %d, %v; want the message after a retry", len(msgs), err)
				}
				return
			}
			var be *queen.BrokerError
			if !errors.As(err, &be) || be.Status != tc.status {
				t.Fatalf("Pop = %v; want a *BrokerError %d", err, tc.status)
			}
			if errors.Is(err, queen.ErrOutcomeUnknown) != tc.unknown {
				t.Fatalf("Pop = %v; ErrOutcomeUnknown should be %v", err, tc.unknown)
			}
		})
	}
}
