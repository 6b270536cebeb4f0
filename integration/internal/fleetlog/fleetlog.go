// Package fleetlog is the event log of the fleet scenario's worker
// processes (integration/fleet_test.go, internal/fleetworker): one JSON
// object per line, each written with one unbuffered write, so that a log
// holds every event up to the moment its process was killed.
package fleetlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kinds of events.
const (
	// Start: the handler got message G (partition P, transaction T).
	Start = "start"
	// End: the handler is about to return for message G; OK is false when
	// it returns an error.
	End = "end"
	// Sent: request R is about to be written: an ack with Items, or a
	// lease renewal (Kind Renew).
	Sent = "sent"
	// Done: request R was answered (Code) or failed (Err); for an ack, Bad
	// lists the positions of Items the broker did not apply, every one
	// when the request failed or was refused as a whole.
	Done = "done"
	// Signal: the process got a stop signal.
	Signal = "signal"
	// Exit: Execute returned (Err when it failed).
	Exit = "exit"
)

// Kinds of requests (Event.Kind).
const (
	Ack   = ""
	Renew = "renew"
)

// Item is one acknowledgment of an ack request.
type Item struct {
	P string `json:"p"` // partition id
	T string `json:"t"` // transaction id
	S string `json:"s"` // status: completed, failed, retry, dlq
}

// Event is one line of a worker's log. Ns is the wall clock in Unix
// nanoseconds: it orders the events of different processes of one
// machine, nothing else.
type Event struct {
	Ev    string `json:"ev"`
	Ns    int64  `json:"ns"`
	P     string `json:"p,omitempty"`
	T     string `json:"t,omitempty"`
	G     int    `json:"g"`
	OK    bool   `json:"ok,omitempty"`
	R     int64  `json:"r,omitempty"`
	Kind  string `json:"k,omitempty"`
	Items []Item `json:"items,omitempty"`
	Code  int    `json:"code,omitempty"`
	Bad   []int  `json:"bad,omitempty"`
	Err   string `json:"err,omitempty"`
}

// Writer appends events to a file, one write per event, in the order of
// the calls.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Create opens path for appending (creating it).
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write stamps e with the time and appends it. A failed write ends the
// process: a log with a hole would make the scenario's counts wrong.
func (w *Writer) Write(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.Ns = time.Now().UnixNano()
	line, err := json.Marshal(e)
	if err == nil {
		_, err = w.f.Write(append(line, '\n'))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetlog:", err)
		os.Exit(3)
	}
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Tail reads a log that is still being written: each Read returns the
// complete lines appended since the last.
type Tail struct {
	path    string
	off     int64
	partial []byte
}

// NewTail reads path from its start.
func NewTail(path string) *Tail { return &Tail{path: path} }

// Read returns the events of the complete lines appended since the last
// call. A missing file has no events yet.
func (t *Tail) Read() ([]Event, error) {
	f, err := os.Open(t.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.off += int64(len(b))
	b = append(t.partial, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	t.partial = append([]byte(nil), b[end:]...)
	var out []Event
	for line := range bytes.Lines(b[:end]) {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return out, fmt.Errorf("%s: line %q: %w", t.path, bytes.TrimSpace(line), err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Partial returns what follows the last complete line: a line the process
// was writing when it was killed.
func (t *Tail) Partial() []byte { return t.partial }
