package queen

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queen-go/queen/internal/wire"
)

// The response decoders face whatever a broker, a proxy or a broken
// network hands them: they may fail, never panic. Run one with, e.g.,
//
//	go test -run '^$' -fuzz FuzzDecodePop .
//
// A plain `go test` runs the seed corpus (every golden body) only.

// addGoldenSeeds adds every testdata file whose name starts with one of
// the prefixes, plus a few hostile bodies.
func addGoldenSeeds(f *testing.F, add func(body []byte), prefixes ...string) {
	f.Helper()
	for _, dir := range []string{"broker-0.15.1", "broker-2.x"} {
		entries, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			for _, p := range prefixes {
				if strings.HasPrefix(e.Name(), p) {
					b, err := os.ReadFile(filepath.Join("testdata", dir, e.Name()))
					if err != nil {
						f.Fatal(err)
					}
					add(b)
				}
			}
		}
	}
	for _, s := range []string{"", "null", "[]", "{}", "[null]", `[{}]`, `{"messages":null}`, `{"messages":[null]}`,
		`{"messages":[{"data":}]}`, `{"success":false,"error":"lease_held"}`, `[{"index":-1}]`, `[{"index":99}]`,
		`{"error":null}`, `"text"`, `42`, "\x00\xff", `[{"status":"queued"},{"status":"queued"}]`} {
		add([]byte(s))
	}
}

func FuzzDecodePop(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b, false); f.Add(b, true) }, "pop_", "error_")
	c := &Client{log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, body []byte, conflation bool) {
		res, err := c.decodePop(body, "/api/v1/pop/queue/q", conflation)
		if err != nil {
			if res != nil {
				t.Fatalf("result %+v with error %v", res, err)
			}
			return
		}
		for i, m := range res.messages {
			if m == nil || len(m.Raw) == 0 {
				t.Fatalf("message %d: %+v", i, m)
			}
		}
	})
}

func FuzzDecodeAcks(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b, uint8(1)); f.Add(b, uint8(3)) }, "ack_")
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		items := make([]wire.AckItem, int(n%8)+1)
		for i := range items {
			items[i] = wire.AckItem{TransactionID: "tx", PartitionID: "p", Status: "completed"}
		}
		res, err := decodeAcks(body, "/api/v1/ack/batch", items)
		if err == nil && len(res) != len(items) {
			t.Fatalf("%d results for %d acks", len(res), len(items))
		}
		if res != nil && len(res) != len(items) {
			t.Fatalf("partial results: %d for %d", len(res), len(items))
		}
		_ = err
	})
}

func FuzzDecodeRenew(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b) }, "renew_")
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRenew(body, "L1", "/api/v1/lease/L1/extend")
		if r.LeaseID != "L1" {
			t.Fatalf("lease id %q", r.LeaseID)
		}
		if err == nil && !r.Success && r.Error == "" {
			t.Fatal("a failed renewal without a reason")
		}
	})
}

func FuzzDecodePush(f *testing.F) {
	addGoldenSeeds(f, func(b []byte) { f.Add(b, uint8(1)); f.Add(b, uint8(3)) }, "push_")
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		items := make([]wire.PushItem, int(n%8)+1)
		for i := range items {
			items[i] = wire.PushItem{Queue: "q", Payload: []byte("1"), TransactionID: "tx"}
		}
		res, err := decodePush(201, body, items)
		if res != nil && len(res) != len(items) {
			t.Fatalf("%d results for %d items", len(res), len(items))
		}
		if pe, ok := err.(*PushError); ok {
			_ = pe.Error() // must not panic either
			if len(pe.Failed) == 0 {
				t.Fatal("push error without a failed item")
			}
		}
	})
}
