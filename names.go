package queen

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/queen-go/queen/internal/wire"
)

// MaxNameBytes is the longest queue, partition or consumer-group name the
// client sends, in bytes of UTF-8.
//
// It comes from the tighter of the two broker generations. A 2.x broker
// refuses (413 name_too_long) a request whose tenant, queue and the longer
// of its group and partition names add up to more than 447 bytes; with no
// tenant (a plain broker), two names of 223 bytes always fit, whatever the
// other name is. A 0.15.1 broker keeps each name in a VARCHAR(255) column,
// which 223 bytes never exceed. Behind a proxy that sets a tenant, the 2.x
// budget shrinks by the tenant's length, which only that broker can check.
const MaxNameBytes = 223

// ErrInvalidName is matched (errors.Is) by the error for a queue, partition
// or consumer-group name the client refuses to send: only white space, a
// '/', the path segments "." and "..", a control character, bytes that are
// not UTF-8, or more than MaxNameBytes bytes. The error names the rule and
// the name. It matches ErrInvalidArgument too. (An empty name where one is
// required has its own sentinels: ErrEmptyQueue, ErrEmptyPartition,
// ErrEmptyGroup.)
var ErrInvalidName = newArgError("invalid name")

// nameKind says which name is checked, for the error and for the sentinel
// of an empty name.
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
// that no broker stores. An empty name fails with the kind's ErrEmpty...
// sentinel; use checkOptionalName where "" means "none".
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
