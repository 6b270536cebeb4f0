package queen

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// The consume loop's hot path reads pop answers with a lean, strict reader
// instead of reflection: one pass over the body that builds the messages
// and their Data maps directly, the strings a pop repeats in every message
// (partition, partition id, group, lease) shared. It accepts only the
// canonical shape of a 2.x answer and reports ok=false for anything else
// (escapes or non-ASCII in the strings it keeps, a refusal, the conflation
// echo, numbers that are not plain integers, duplicate or case-folded keys,
// invalid JSON, ...); the caller then uses decodePop. On every answer it
// accepts, the result equals decodePop's (a differential fuzz test holds
// it to that).

// maxSkipDepth bounds the nesting the reader walks; deeper values go to
// encoding/json.
const maxSkipDepth = 200

// decodePopFast is decodePop for the answers the lean reader accepts; ok is
// false when the caller must use decodePop.
func decodePopFast(body []byte) (*popResult, bool) {
	r := popReader{b: body}
	if !r.topLevel() {
		return nil, false
	}
	r.ws()
	if r.i != len(r.b) || !r.success || r.errSeen {
		return nil, false
	}
	if len(r.msgs) == 0 {
		return nil, false // the slow path reads what an empty answer says
	}
	res := &popResult{autopilot: r.autopilot}
	if r.lease != nil {
		res.leaseID = *r.lease
	}
	res.messages = make([]*Message, len(r.msgs))
	for i := range r.msgs {
		pm := &r.msgs[i]
		m := pm.msg
		if !pm.leaseSet {
			m.LeaseID = res.leaseID
		}
		if m.Queue == "" {
			m.Queue = r.queue
		}
		if len(m.Raw) == 0 {
			m.Raw = json.RawMessage("null")
		}
		if pm.dataSlow && len(m.Raw) > 0 && m.Raw[0] == '{' {
			var v any
			if json.Unmarshal(m.Raw, &v) == nil {
				m.Data, _ = v.(map[string]any)
			}
		}
		res.messages[i] = m
	}
	return res, true
}

// popMsg is a message being read, with what the final pass needs.
type popMsg struct {
	msg      *Message
	leaseSet bool // the message carried its own (non-null) leaseId
	dataSlow bool // Data is left to encoding/json
}

type popReader struct {
	b []byte
	i int

	success   bool
	errSeen   bool
	queue     string
	lease     *string
	autopilot *wire.AutopilotEcho
	msgs      []popMsg
	interned  []string
	dataKeys  []string // the data objects' keys, which the messages of a pop mostly share
	shareKeys bool     // several messages ahead: intern data keys in dataKeys
}

func (r *popReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next skips whitespace and returns the next byte (0 at the end).
func (r *popReader) next() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

func (r *popReader) eat(c byte) bool {
	if r.next() == c {
		r.i++
		return true
	}
	return false
}

func (r *popReader) literal(word string) bool {
	if len(r.b)-r.i >= len(word) && string(r.b[r.i:r.i+len(word)]) == word {
		r.i += len(word)
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes and returns
// its content; any other string is refused.
func (r *popReader) plainString() ([]byte, bool) {
	if r.next() != '"' {
		return nil, false
	}
	start := r.i + 1
	for j := start; j < len(r.b); j++ {
		c := r.b[j]
		switch {
		case c == '"':
			r.i = j + 1
			return r.b[start:j], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// intern returns b as a string, shared with an earlier one of the same bytes.
func (r *popReader) intern(b []byte) string { return internIn(&r.interned, b) }

// internIn returns b as a string, shared with one of tab (of at most 16)
// of the same bytes, else added to it.
func internIn(tab *[]string, b []byte) string {
	for _, s := range *tab {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if len(*tab) < 16 {
		*tab = append(*tab, s)
	}
	return s
}

// str reads a string or null into a string field; null leaves the field as
// it is (encoding/json does the same). ptr is set when a string was read.
func (r *popReader) str(dst *string, shared bool, ptr *bool) bool {
	if r.next() == 'n' {
		if ptr != nil {
			*ptr = false
		}
		return r.literal("null")
	}
	b, ok := r.plainString()
	if !ok {
		return false
	}
	if shared {
		*dst = r.intern(b)
	} else {
		*dst = string(b)
	}
	if ptr != nil {
		*ptr = true
	}
	return true
}

// integer reads a JSON integer (no fraction, no exponent) that fits int64;
// null reads as set=false.
func (r *popReader) integer() (v int64, set, ok bool) {
	if r.next() == 'n' {
		return 0, false, r.literal("null")
	}
	j, neg := r.i, false
	if j < len(r.b) && r.b[j] == '-' {
		neg = true
		j++
	}
	start := j
	for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
		if j-start >= 18 {
			return 0, false, false
		}
		v = v*10 + int64(r.b[j]-'0')
		j++
	}
	if j == start || (r.b[start] == '0' && j-start > 1) {
		return 0, false, false
	}
	if j < len(r.b) {
		switch r.b[j] {
		case '.', 'e', 'E':
			return 0, false, false
		}
	}
	r.i = j
	if neg {
		v = -v
	}
	return v, true, true
}

func (r *popReader) intField(dst *int) bool {
	v, set, ok := r.integer()
	if !ok || int64(int(v)) != v {
		return false
	}
	if set {
		*dst = int(v)
	}
	return true
}

// skip validates and skips one value of any kind.
func (r *popReader) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := r.next(); {
	case c == '{':
		r.i++
		if r.eat('}') {
			return true
		}
		for {
			if r.next() != '"' || !r.skipString() || !r.eat(':') || !r.skip(depth+1) {
				return false
			}
			if r.eat('}') {
				return true
			}
			if !r.eat(',') {
				return false
			}
		}
	case c == '[':
		r.i++
		if r.eat(']') {
			return true
		}
		for {
			if !r.skip(depth + 1) {
				return false
			}
			if r.eat(']') {
				return true
			}
			if !r.eat(',') {
				return false
			}
		}
	case c == '"':
		return r.skipString()
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, ok := r.number()
		return ok
	}
	return false
}

// skipString skips a string with any escapes the JSON grammar allows.
func (r *popReader) skipString() bool {
	j := r.i + 1
	for j < len(r.b) {
		c := r.b[j]
		switch {
		case c == '"':
			r.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if j+1 >= len(r.b) {
				return false
			}
			switch r.b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(r.b) {
					return false
				}
				for _, h := range r.b[j+2 : j+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				j += 6
			default:
				return false
			}
		default:
			j++
		}
	}
	return false
}

// number reads a number as the JSON grammar has it and returns its text.
func (r *popReader) number() ([]byte, bool) {
	b, j := r.b, r.i
	digits := func() bool {
		s := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j > s
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
	}
	s := b[r.i:j]
	r.i = j
	return s, true
}

// value reads any value as encoding/json decodes it into an interface{}.
// simple is false when the value holds something the reader leaves to
// encoding/json (a string with escapes or non-ASCII bytes, a number out of
// float64 range, deep nesting); the value is then only validated.
func (r *popReader) value(depth int) (v any, simple, ok bool) {
	if depth > maxSkipDepth {
		return nil, false, false
	}
	switch c := r.next(); {
	case c == '{':
		r.i++
		m := map[string]any{}
		if r.eat('}') {
			return m, true, true
		}
		simple = true
		for {
			start := r.i
			k, plain := r.plainString()
			if !plain {
				r.i = start
				r.ws()
				if r.next() != '"' || !r.skipString() {
					return nil, false, false
				}
				simple = false
			}
			if !r.eat(':') {
				return nil, false, false
			}
			ev, es, ok := r.value(depth + 1)
			if !ok {
				return nil, false, false
			}
			if simple && es {
				if r.shareKeys {
					m[internIn(&r.dataKeys, k)] = ev
				} else {
					m[string(k)] = ev
				}
			} else {
				simple = false
			}
			if r.eat('}') {
				return m, simple, true
			}
			if !r.eat(',') {
				return nil, false, false
			}
		}
	case c == '[':
		r.i++
		a := []any{}
		if r.eat(']') {
			return a, true, true
		}
		simple = true
		for {
			ev, es, ok := r.value(depth + 1)
			if !ok {
				return nil, false, false
			}
			if simple && es {
				a = append(a, ev)
			} else {
				simple = false
			}
			if r.eat(']') {
				return a, simple, true
			}
			if !r.eat(',') {
				return nil, false, false
			}
		}
	case c == '"':
		start := r.i
		if s, plain := r.plainString(); plain {
			return string(s), true, true
		}
		r.i = start
		return nil, false, r.skipString()
	case c == 't':
		return true, true, r.literal("true")
	case c == 'f':
		return false, true, r.literal("false")
	case c == 'n':
		return nil, true, r.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		s, ok := r.number()
		if !ok {
			return nil, false, false
		}
		f, err := strconv.ParseFloat(string(s), 64)
		if err != nil {
			return nil, false, true
		}
		return f, true, true
	}
	return nil, false, false
}

// object reads an object, calling field for each key that is one of known;
// other keys are skipped. A key matching a known one only when case is
// ignored (encoding/json would take it), or a known key seen twice, is
// refused.
func (r *popReader) object(known []string, field func(k int) bool) bool {
	if !r.eat('{') {
		return false
	}
	if r.eat('}') {
		return true
	}
	var seen uint64
	for {
		key, ok := r.plainString()
		if !ok || !r.eat(':') {
			return false
		}
		k := -1
		for n, name := range known {
			if string(key) == name {
				k = n
				break
			}
		}
		if k < 0 {
			for _, name := range known {
				if strings.EqualFold(string(key), name) {
					return false
				}
			}
		}
		if k >= 0 {
			if seen&(1<<k) != 0 {
				return false
			}
			seen |= 1 << k
			if !field(k) {
				return false
			}
		} else if !r.skip(0) {
			return false
		}
		if r.eat('}') {
			return true
		}
		if !r.eat(',') {
			return false
		}
	}
}

var topKeys = []string{"success", "error", "queue", "partition", "partitionId", "leaseId", "consumerGroup",
	"messages", "partitionsClaimed", "conflation", "conflationConflict", "autopilot"}

func (r *popReader) topLevel() bool {
	if r.next() != '{' {
		return false
	}
	var leaseSet bool
	var lease string
	ok := r.object(topKeys, func(k int) bool {
		switch k {
		case 0: // success
			switch r.next() {
			case 't':
				r.success = true
				return r.literal("true")
			case 'f':
				r.success = false
				return r.literal("false")
			case 'n':
				return r.literal("null")
			}
			return false
		case 1: // error: any text means decodePop decides
			var e string
			if !r.str(&e, false, nil) {
				return false
			}
			r.errSeen = e != ""
			return true
		case 2:
			return r.str(&r.queue, true, nil)
		case 3, 4, 6: // partition, partitionId, consumerGroup: checked, not kept
			if r.next() == 'n' {
				return r.literal("null")
			}
			_, ok := r.plainString()
			return ok
		case 5:
			return r.str(&lease, true, &leaseSet)
		case 7:
			return r.messages()
		case 8:
			var n int
			return r.intField(&n)
		case 11: // autopilot: small and once per pop
			r.ws()
			start := r.i
			if !r.skip(0) {
				return false
			}
			var ap *wire.AutopilotEcho
			if json.Unmarshal(r.b[start:r.i], &ap) != nil {
				return false
			}
			r.autopilot = ap
			return true
		}
		return false // conflation, conflationConflict: decodePop's business
	})
	if leaseSet {
		r.lease = &lease
	}
	return ok
}

var messageKeys = []string{"id", "transactionId", "traceId", "data", "producerSub", "createdAt", "partitionId",
	"partition", "leaseId", "consumerGroup", "deliveryAttempt", "offset", "queue", "retryCount"}

func (r *popReader) messages() bool {
	if r.next() == 'n' {
		r.msgs = nil
		return r.literal("null")
	}
	if !r.eat('[') {
		return false
	}
	n := estimateMessages(r.b[r.i:])
	r.msgs = make([]popMsg, 0, n)
	r.shareKeys = n > 1
	if r.eat(']') {
		return true
	}
	for {
		if r.next() != '{' {
			return false
		}
		m := &Message{Offset: -1}
		pm := popMsg{msg: m}
		var traceSet, subSet bool
		var retry int
		ok := r.object(messageKeys, func(k int) bool {
			switch k {
			case 0:
				return r.str(&m.ID, false, nil)
			case 1:
				return r.str(&m.TransactionID, false, nil)
			case 2:
				return r.str(&m.TraceID, false, &traceSet)
			case 3:
				r.ws()
				start := r.i
				v, simple, ok := r.value(0)
				if !ok {
					return false
				}
				m.Raw = json.RawMessage(bytes.Clone(r.b[start:r.i]))
				if simple {
					m.Data, _ = v.(map[string]any)
				} else {
					pm.dataSlow = true
				}
				return true
			case 4:
				return r.str(&m.ProducerSub, true, &subSet)
			case 5:
				if r.next() == 'n' {
					return r.literal("null")
				}
				b, ok := r.plainString()
				if !ok {
					return false
				}
				m.CreatedAt = parseCreatedAt(b)
				return true
			case 6:
				return r.str(&m.PartitionID, true, nil)
			case 7:
				return r.str(&m.Partition, true, nil)
			case 8:
				return r.str(&m.LeaseID, true, &pm.leaseSet)
			case 9:
				return r.str(&m.ConsumerGroup, true, nil)
			case 10:
				return r.intField(&m.DeliveryAttempt)
			case 11:
				v, set, ok := r.integer()
				if set {
					m.Offset = v
				}
				return ok
			case 12:
				return r.str(&m.Queue, true, nil)
			case 13:
				return r.intField(&retry)
			}
			return false
		})
		if !ok {
			return false
		}
		if !traceSet {
			m.TraceID = ""
		}
		if !subSet {
			m.ProducerSub = ""
		}
		r.msgs = append(r.msgs, pm)
		if r.eat(']') {
			return true
		}
		if !r.eat(',') {
			return false
		}
	}
}

// estimateMessages counts the "transactionId" keys ahead: the number of
// messages of a canonical answer (each has one), used to size the slice
// and to tell whether data keys are worth sharing.
func estimateMessages(b []byte) int {
	return bytes.Count(b, transactionIDKey)
}

var transactionIDKey = []byte(`"transactionId"`)

// parseCreatedAt reads the broker's usual "2006-01-02T15:04:05.000Z" (any
// fraction of 1 to 9 digits, or none) without going through time.Parse;
// anything else goes to parseBrokerTime.
func parseCreatedAt(b []byte) time.Time {
	num := func(s []byte) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	slow := func() time.Time { return parseBrokerTime(string(b)) }
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[len(b)-1] != 'Z' {
		return slow()
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(time.Month(month), year) || hour > 23 || minute > 59 || sec > 59 {
		return slow()
	}
	nsec := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return slow()
		}
		n, ok := num(frac[1:])
		if !ok {
			return slow()
		}
		for range 10 - len(frac) {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
}

func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
