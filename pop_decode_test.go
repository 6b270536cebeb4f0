package queen

import (
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
