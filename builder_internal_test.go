package queen

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setterArgs gives each setter parameter values that differ from the zero
// builder's: a bool both ways (one of them changes something).
func setterArgs(t *testing.T, typ reflect.Type) [][]reflect.Value {
	t.Helper()
	one := func(in reflect.Type) []reflect.Value {
		switch in.Kind() {
		case reflect.Bool:
			return []reflect.Value{reflect.ValueOf(true), reflect.ValueOf(false)}
		case reflect.String:
			return []reflect.Value{reflect.ValueOf("0194f1a2-0000-7000-8000-000000000001").Convert(in)}
		case reflect.Int:
			return []reflect.Value{reflect.ValueOf(7)}
		case reflect.Int64: // time.Duration
			return []reflect.Value{reflect.ValueOf(3 * time.Second).Convert(in)}
		case reflect.Func:
			return []reflect.Value{reflect.MakeFunc(in, func([]reflect.Value) []reflect.Value {
				out := make([]reflect.Value, in.NumOut())
				for i := range out {
					out[i] = reflect.Zero(in.Out(i))
				}
				return out
			})}
		case reflect.Struct: // QueueConfig
			v := reflect.New(in).Elem()
			v.FieldByName("Namespace").SetString("ns")
			return []reflect.Value{v}
		case reflect.Slice: // variadic ids
			return []reflect.Value{reflect.ValueOf([]string{"id-1", "id-2"})}
		}
		t.Fatalf("no test value for a %v parameter", in)
		return nil
	}
	calls := [][]reflect.Value{nil}
	for i := 1; i < typ.NumIn(); i++ { // 0 is the receiver
		var next [][]reflect.Value
		for _, prefix := range calls {
			for _, v := range one(typ.In(i)) {
				next = append(next, append(append([]reflect.Value(nil), prefix...), v))
			}
		}
		calls = next
	}
	return calls
}

// Every setter of every value builder (a method returning its own type)
// leaves its receiver as it was and returns another builder with the
// change; the setters are found by reflection, so a new one is covered.
func TestSettersReturnChangedCopies(t *testing.T) {
	c := &Client{}
	qb := c.Queue("q").Partition("p").Group("g")
	builders := []any{
		qb,
		qb.Push("a", "b").TransactionIDs("x"),
		qb.Create(),
		qb.Delete(),
		qb.Consume(context.Background(), func(context.Context, *Message) error { return nil }),
		c.Transaction().Queue("t").Partition("p"),
	}
	setters := 0
	for _, b := range builders {
		bv := reflect.ValueOf(b)
		bt := bv.Type()
		for m := range bt.Methods() {
			if m.Type.NumOut() != 1 || m.Type.Out(0) != bt {
				continue
			}
			setters++
			for _, args := range setterArgs(t, m.Type) {
				shown := make([]any, len(args))
				for i, a := range args {
					shown[i] = a.Interface()
				}
				name := fmt.Sprintf("%v.%s%v", bt.Elem().Name(), m.Name, shown)
				before := fmt.Sprintf("%#v", bv.Elem().Interface())
				call := m.Func.Call
				if m.Type.IsVariadic() {
					call = m.Func.CallSlice
				}
				out := call(append([]reflect.Value{bv}, args...))[0]
				assert.Equal(t, before, fmt.Sprintf("%#v", bv.Elem().Interface()), "%s changed its receiver", name)
				assert.NotEqual(t, bv.Pointer(), out.Pointer(), "%s returned its receiver", name)
			}
		}
	}
	assert.GreaterOrEqual(t, setters, 30, "setters found")
}

// A copy of a builder with slices shares no array a later setter writes.
func TestPushBuilderCopiesShareNoIDs(t *testing.T) {
	c := &Client{}
	base := c.Queue("q").Push("a", "b")
	x := base.TransactionIDs("x1", "x2")
	y := x.TransactionIDs("y1")
	require.Equal(t, []string{"x1", "x2"}, x.txIDs)
	require.Equal(t, []string{"y1"}, y.txIDs)
	require.Empty(t, base.txIDs)
}
