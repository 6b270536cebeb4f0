package queen

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/queen-go/queen/internal/wire"
)

// MaxNameBytes is the longest queue, partition or consumer-group name the
// client sends, in bytes of UTF-8: two such names fit both generations'
// limits (docs/ARCHITECTURE.md, "Names").
const MaxNameBytes = 223

// ErrInvalidName is matched by the error for a name the client refuses to
// send: only white space, a '/', "." or "..", a control character, bytes
// not UTF-8, or over MaxNameBytes. It matches ErrInvalidArgument too; an
// empty name has its own sentinel (ErrEmptyQueue, ...).
var ErrInvalidName = newArgError("invalid name")

type nameKind int

const (
	queueName nameKind = iota
	partitionName
	groupName
)

func (k nameKind) String() string {
	switch k {
	case partitionName:
		return "partition"
	case groupName:
		return "consumer group"
	}
	return "queue"
}

func (k nameKind) empty() error {
	switch k {
	case partitionName:
		return ErrEmptyPartition
	case groupName:
		return ErrEmptyGroup
	}
	return ErrEmptyQueue
}

// checkName refuses a name that could mean something else in a URL path, or
// that no broker stores; "" fails with the kind's ErrEmpty... sentinel.
func checkName(kind nameKind, name string) error {
	if name == "" {
		return kind.empty()
	}
	var rule string
	switch {
	case strings.TrimSpace(name) == "":
		rule = "is only white space"
	case name == "." || name == "..":
		rule = "is a relative path segment"
	case strings.Contains(name, "/"):
		rule = "contains '/'"
	case !utf8.ValidString(name):
		rule = "is not valid UTF-8"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		rule = "contains a control character"
	case len(name) > MaxNameBytes:
		rule = fmt.Sprintf("is %d bytes long, more than the %d allowed", len(name), MaxNameBytes)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s %q %s", ErrInvalidName, kind, shorten(name), rule)
}

// checkOptionalName is checkName for a name that may be left empty (the
// Default partition, queue mode).
func checkOptionalName(kind nameKind, name string) error {
	if name == "" {
		return nil
	}
	return checkName(kind, name)
}

// shorten cuts a long name for an error message.
func shorten(s string) string {
	const keep = 40
	if len(s) <= keep {
		return s
	}
	return s[:keep] + "..."
}

// escape escapes one path segment (wire.Segment).
func escape(s string) string { return wire.Segment(s) }
