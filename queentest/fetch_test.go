package queentest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tFetch struct {
	Entries []struct {
		Queue     string `json:"queue"`
		Partition string `json:"partition"`
		Records   []struct {
			Offset        int64           `json:"offset"`
			TransactionID string          `json:"transactionId"`
			Payload       json.RawMessage `json:"payload"`
			TS            string          `json:"ts"`
		} `json:"records"`
		HighWatermark  int64  `json:"highWatermark"`
		LogStartOffset int64  `json:"logStartOffset"`
		Error          string `json:"error"`
	} `json:"entries"`
}

func TestFetchByOffset(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	pushed := h.pushN("q", "p", 5)
	var out tFetch
	raw := h.doJSON("POST", "/api/v1/fetch", item{"entries": []item{
		{"queue": "q", "partition": "p", "offset": 2},
		{"queue": "q", "partition": "p", "offset": 5},
		{"queue": "q", "partition": "p", "offset": 6},
		{"queue": "missing", "offset": 0},
		{"queue": "q", "partition": "never", "offset": 0},
	}}, http.StatusOK, &out)
	require.Len(t, out.Entries, 5, string(raw))

	e := out.Entries[0]
	assert.Equal(t, "q", e.Queue)
	assert.Equal(t, "p", e.Partition)
	assert.EqualValues(t, 5, e.HighWatermark)
	assert.EqualValues(t, 0, e.LogStartOffset)
	assert.Empty(t, e.Error)
	require.Len(t, e.Records, 3)
	assert.EqualValues(t, 2, e.Records[0].Offset)
	assert.Equal(t, pushed[2].TransactionID, e.Records[0].TransactionID)
	assert.JSONEq(t, `{"n":2}`, string(e.Records[0].Payload))
	assert.Equal(t, "2026-11-30T12:00:00.000000Z", e.Records[0].TS)

	assert.Empty(t, out.Entries[1].Records, "offset == highWatermark: nothing yet, no error")
	assert.Empty(t, out.Entries[1].Error)
	assert.Equal(t, "OFFSET_OUT_OF_RANGE", out.Entries[2].Error)
	assert.Equal(t, "UNKNOWN_TOPIC_OR_PARTITION", out.Entries[3].Error)
	assert.Empty(t, out.Entries[4].Error, "a new partition of an existing queue is empty, not an error")
	assert.EqualValues(t, 0, out.Entries[4].HighWatermark)

	// Reads touch no cursor: a pop still gets everything.
	p := h.popQ("q", vals("batch", "10"))
	assert.Len(t, p.Messages, 5)
}

func TestFetchMaxBytesAndValidation(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 5) // payloads {"n":i}: 7 bytes each
	var out tFetch
	h.doJSON("POST", "/api/v1/fetch", item{"entries": []item{{"queue": "q", "partition": "p", "offset": 0, "maxBytes": 15}}}, http.StatusOK, &out)
	assert.Len(t, out.Entries[0].Records, 2)
	h.doJSON("POST", "/api/v1/fetch", item{"entries": []item{{"queue": "q", "partition": "p", "offset": 0, "maxBytes": 1}}}, http.StatusOK, &out)
	assert.Len(t, out.Entries[0].Records, 1, "the first record is always delivered")

	h.doJSON("POST", "/api/v1/fetch", item{}, http.StatusOK, &out)
	assert.Empty(t, out.Entries)
	st, _, _ := h.do("POST", "/api/v1/fetch", item{"entries": []item{{"queue": "q", "offset": -1}}})
	assert.Equal(t, http.StatusBadRequest, st)
	st, _, raw := h.do("POST", "/api/v1/fetch", item{"entries": make([]item, 1025)})
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "too many entries")
	st, _, _ = h.do("POST", "/api/v1/fetch", `{"entries":[`)
	assert.Equal(t, http.StatusBadRequest, st)
	// A numeric partition is read as its decimal name.
	h.pushN("q", "7", 1)
	h.doJSON("POST", "/api/v1/fetch", item{"entries": []item{{"queue": "q", "partition": 7, "offset": 0}}}, http.StatusOK, &out)
	assert.Equal(t, "7", out.Entries[0].Partition)
	assert.Len(t, out.Entries[0].Records, 1)
}

func TestFetchMaxWaitWakesOnPush(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 1)
	done := make(chan tFetch, 1)
	go func() {
		var out tFetch
		h.doJSON("POST", "/api/v1/fetch", item{"maxWaitMs": 60000, "entries": []item{{"queue": "q", "partition": "p", "offset": 1}}}, http.StatusOK, &out)
		done <- out
	}()
	for s.Requests(RouteFetch) == 0 { // the fetch has reached the broker
		time.Sleep(time.Millisecond)
	}
	h.pushN("q", "p", 1)
	// The margin is what the test tells apart: a fetch the push did not
	// wake would answer empty after its 60 s.
	select {
	case out := <-done:
		require.Len(t, out.Entries[0].Records, 1)
		assert.EqualValues(t, 1, out.Entries[0].Records[0].Offset)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting fetch was not woken by the push")
	}
	// Without new data it answers empty at the deadline.
	start := time.Now()
	var out tFetch
	h.doJSON("POST", "/api/v1/fetch", item{"maxWaitMs": 100, "entries": []item{{"queue": "q", "partition": "p", "offset": 2}}}, http.StatusOK, &out)
	assert.Empty(t, out.Entries[0].Records)
	assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond)
}
