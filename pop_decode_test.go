package queen

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
)

// Each message keeps its payload byte for byte (Raw), and an object is
// also read into Data; other values leave Data nil.
func TestDecodePopPayloads(t *testing.T) {
	body := []byte(`{"success":true,"queue":"q","leaseId":"L","messages":[
		{"transactionId":"t0","partitionId":"1","data" : {"a": [1, {"b": null}], "s": "x\u00e9"} },
		{"transactionId":"t1","partitionId":"1","data":"text"},
		{"transactionId":"t2","partitionId":"1","data":12.50},
		{"transactionId":"t3","partitionId":"1","data":[1,2]},
		{"transactionId":"t4","partitionId":"1","data":null},
		{"transactionId":"t5","partitionId":"1"},
		{"transactionId":"t6","partitionId":"1","data":{"a":1,"a":2},"offset":7,"leaseId":"own"}]}`)
	res, err := (&Client{log: slog.New(slog.DiscardHandler)}).decodePop(body, "/p", false)
	if err != nil {
		t.Fatal(err)
	}
	raws := []string{`{"a": [1, {"b": null}], "s": "x\u00e9"}`, `"text"`, `12.50`, `[1,2]`, `null`, `null`, `{"a":1,"a":2}`}
	if len(res.messages) != len(raws) {
		t.Fatalf("%d messages", len(res.messages))
	}
	for i, m := range res.messages {
		if string(m.Raw) != raws[i] {
			t.Errorf("message %d: Raw %s, want %s", i, m.Raw, raws[i])
		}
		if (m.Data != nil) != (i == 0 || i == 6) {
			t.Errorf("message %d: Data %v", i, m.Data)
		}
	}
	if want := map[string]any{"a": []any{1.0, map[string]any{"b": nil}}, "s": "xé"}; !reflect.DeepEqual(res.messages[0].Data, want) {
		t.Errorf("Data %#v, want %#v", res.messages[0].Data, want)
	}
	if m := res.messages[6]; m.Data["a"] != 2.0 || m.Offset != 7 || m.LeaseID != "own" || res.messages[0].LeaseID != "L" || res.messages[0].Offset != -1 {
		t.Errorf("message 6 %+v, message 0 %+v", m, res.messages[0])
	}
}

// A pop answer that v2's defaults refuse (duplicate names, invalid UTF-8)
// is read as encoding/json reads it, whole: every message, each Data as
// encoding/json makes it.
func TestDecodePopReadsWhatEncodingJSONReads(t *testing.T) {
	for name, data := range map[string]string{
		"clean":              `{"k":"v","n":1}`,
		"duplicate name":     `{"k":"first","k":"last"}`,
		"invalid UTF-8":      "{\"k\":\"a\xffb\"}",
		"invalid UTF-8 name": "{\"k\xfe\":1}",
		"nested duplicate":   `{"o":{"x":1,"x":2},"y":[{"z":1,"z":3}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			body := []byte(`{"success":true,"queue":"q","leaseId":"L","messages":[` +
				`{"transactionId":"t0","partitionId":"1","data":{"plain":true}},` +
				`{"transactionId":"t1","partitionId":"1","data":` + data + `},` +
				`{"transactionId":"t2","partitionId":"1","data":{"plain":false}}]}`)
			res, err := (&Client{log: slog.New(slog.DiscardHandler)}).decodePop(body, "/p", false)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.messages) != 3 {
				t.Fatalf("%d messages", len(res.messages))
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(data), &want); err != nil {
				t.Fatal(err)
			}
			if got := res.messages[1].Data; !reflect.DeepEqual(got, want) {
				t.Errorf("Data %#v, encoding/json reads %#v", got, want)
			}
			if string(res.messages[1].Raw) != data {
				t.Errorf("Raw %q, want %q", res.messages[1].Raw, data)
			}
			if res.messages[0].Data["plain"] != true || res.messages[2].Data["plain"] != false || res.messages[2].TransactionID != "t2" {
				t.Errorf("neighbours %+v %+v", res.messages[0], res.messages[2])
			}
		})
	}
}
