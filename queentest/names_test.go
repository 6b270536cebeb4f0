package queentest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNames2x: the 2.x broker refuses a queue plus the wider of group and
// partition longer than 447 bytes, with 413 name_too_long naming the
// longest field; up to the bound it accepts any name (the 0.15.1 rules are
// pinned in TestBroker015TraceIDAndNames).
func TestNames2x(t *testing.T) {
	h := newHC(t, Start(t))
	refused := func(st int, raw []byte, field string, n int) {
		t.Helper()
		require.Equal(t, http.StatusRequestEntityTooLarge, st, string(raw))
		var e struct{ Error, Code string }
		require.NoError(t, json.Unmarshal(raw, &e))
		assert.Equal(t, "name_too_long", e.Code)
		assert.Contains(t, e.Error, field+" name is ")
		assert.Contains(t, e.Error, " "+strconvItoa(n)+" bytes")
	}
	h.push(item{"queue": strings.Repeat("q", 440), "payload": 1}) // with "Default": 447 bytes
	st, _, raw := h.do("POST", "/api/v1/push", item{"items": []item{{"queue": strings.Repeat("q", 440), "partition": strings.Repeat("p", 8), "payload": 1}}})
	refused(st, raw, "queue", 440)

	st, _, raw = h.do("GET", "/api/v1/pop/queue/qq/partition/"+strings.Repeat("p", 446)+"?consumerGroup=zz", nil)
	refused(st, raw, "partition", 446)
	st, _, raw = h.do("GET", "/api/v1/pop/queue/qq?consumerGroup="+strings.Repeat("g", 446), nil)
	refused(st, raw, "group", 446)
	st, _, _ = h.do("GET", "/api/v1/pop/queue/qq?consumerGroup="+strings.Repeat("g", 445), nil)
	assert.Equal(t, http.StatusNoContent, st, "445 + 2 bytes is within the bound")
	// Other names are the broker's to accept.
	for _, name := range []string{" ", "a b", "ü", "a/b", ".."} {
		h.push(item{"queue": name, "partition": name, "payload": 1})
		p := h.popQ(name, nil)
		assert.Equal(t, name, p.Queue)
		assert.Equal(t, name, p.Messages[0].Partition)
		st, _ := h.pop("/api/v1/pop/queue/"+url.PathEscape(name)+"/partition/"+url.PathEscape(name), nil)
		assert.Equal(t, http.StatusNoContent, st)
	}
}

func strconvItoa(n int) string { b, _ := json.Marshal(n); return string(b) }
