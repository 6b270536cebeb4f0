package wire

import (
	"reflect"
	"testing"

	"github.com/google/go-querystring/query"
)

// PopQuery.Values is written out by hand; it must encode every field as
// go-querystring encodes its tags. Each field is set in turn (pointers
// also to their zero value), then all of them together; a field of a
// kind the test does not know fails it, so a new field cannot be missed.
func TestPopQueryValuesMatchQuerystring(t *testing.T) {
	typ := reflect.TypeFor[PopQuery]()
	// settings returns the values field i is given in turn.
	settings := func(i int) []reflect.Value {
		f := typ.Field(i)
		switch f.Type {
		case reflect.TypeFor[string]():
			return []reflect.Value{reflect.ValueOf("x " + f.Name + "&=?/ü")}
		case reflect.TypeFor[bool]():
			return []reflect.Value{reflect.ValueOf(true)}
		case reflect.TypeFor[int]():
			return []reflect.Value{reflect.ValueOf(7), reflect.ValueOf(-3)}
		case reflect.TypeFor[*int]():
			zero, one, big := 0, 1, 123456
			return []reflect.Value{reflect.ValueOf(&zero), reflect.ValueOf(&one), reflect.ValueOf(&big)}
		case reflect.TypeFor[*bool]():
			f, tr := false, true
			return []reflect.Value{reflect.ValueOf(&f), reflect.ValueOf(&tr)}
		}
		t.Fatalf("field %s: type %s not covered by this test", f.Name, f.Type)
		return nil
	}
	check := func(q PopQuery) {
		t.Helper()
		want, err := query.Values(q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.Values()
		if err != nil {
			t.Fatal(err)
		}
		if got.Encode() != want.Encode() || len(got) != len(want) {
			t.Errorf("%+v:\n got  %s\n want %s", q, got.Encode(), want.Encode())
		}
	}

	check(PopQuery{})
	var all PopQuery
	for i := range typ.NumField() {
		for _, v := range settings(i) {
			var q PopQuery
			reflect.ValueOf(&q).Elem().Field(i).Set(v)
			check(q)
			reflect.ValueOf(&all).Elem().Field(i).Set(v)
		}
	}
	check(all)
}
