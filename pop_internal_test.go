package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// q builds url.Values from key, value pairs.
func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// waitDefaults are the long-poll parameters every waiting pop sends.
var waitDefaults = []string{"wait", "true", "timeout", "30000"}

func with(base []string, kv ...string) []string { return append(append([]string(nil), base...), kv...) }

type popCase struct {
	name  string
	build func(c *Client) *QueueBuilder
	path  string
	query url.Values
}

func runPopCases(t *testing.T, tests []popCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t) // 204: an empty pop
			msgs, err := tt.build(c).Pop(context.Background())
			require.NoError(t, err)
			assert.Empty(t, msgs)
			r := rec.only(t)
			assert.Equal(t, http.MethodGet, r.Method)
			assert.Equal(t, tt.path, r.Path)
			assert.Equal(t, tt.query, r.Query, "query %s", r.RawQuery)
			assert.Empty(t, r.Body)
		})
	}
}

// The autopilot rule of PROTOCOL.md 3.3: knobs left unset are omitted and
// autopilot=true is sent; a knob set is a pin; with both pinned no autopilot
// travels; Autopilot(false) always sends a batch and partitions only above 1.
func TestPopAutopilotRule(t *testing.T) {
	const path = "/api/v1/pop/queue/orders"
	orders := func(c *Client) *QueueBuilder { return c.Queue("orders") }
	runPopCases(t, []popCase{
		{"unset: autopilot, neither knob", orders, path, q(with(waitDefaults, "autopilot", "true")...)},
		{"Batch(0) is unset", func(c *Client) *QueueBuilder { return orders(c).Batch(0) }, path, q(with(waitDefaults, "autopilot", "true")...)},
		{"batch only: autopilot + batch", func(c *Client) *QueueBuilder { return orders(c).Batch(50) }, path,
			q(with(waitDefaults, "autopilot", "true", "batch", "50")...)},
		{"partitions only: autopilot + partitions", func(c *Client) *QueueBuilder { return orders(c).Partitions(8) }, path,
			q(with(waitDefaults, "autopilot", "true", "partitions", "8")...)},
		{"Partitions(1) is a pin too", func(c *Client) *QueueBuilder { return orders(c).Partitions(1) }, path,
			q(with(waitDefaults, "autopilot", "true", "partitions", "1")...)},
		{"both: no autopilot", func(c *Client) *QueueBuilder { return orders(c).Batch(100).Partitions(10) }, path,
			q(with(waitDefaults, "batch", "100", "partitions", "10")...)},
		{"Autopilot(true) is the default", func(c *Client) *QueueBuilder { return orders(c).Autopilot(true) }, path,
			q(with(waitDefaults, "autopilot", "true")...)},
		{"off, unset: batch 1", func(c *Client) *QueueBuilder { return orders(c).Autopilot(false) }, path,
			q(with(waitDefaults, "batch", "1")...)},
		{"off, batch set", func(c *Client) *QueueBuilder { return orders(c).Autopilot(false).Batch(7) }, path,
			q(with(waitDefaults, "batch", "7")...)},
		{"off, Partitions(1) not sent", func(c *Client) *QueueBuilder { return orders(c).Autopilot(false).Partitions(1) }, path,
			q(with(waitDefaults, "batch", "1")...)},
		{"off, partitions above 1 sent", func(c *Client) *QueueBuilder { return orders(c).Autopilot(false).Partitions(4) }, path,
			q(with(waitDefaults, "batch", "1", "partitions", "4")...)},
		{"off, both", func(c *Client) *QueueBuilder { return orders(c).Autopilot(false).Batch(20).Partitions(3) }, path,
			q(with(waitDefaults, "batch", "20", "partitions", "3")...)},
		{"off after on: the last call wins", func(c *Client) *QueueBuilder { return orders(c).Autopilot(true).Autopilot(false) }, path,
			q(with(waitDefaults, "batch", "1")...)},
	})
}

func TestPopOptionsOnTheWire(t *testing.T) {
	const path = "/api/v1/pop/queue/orders"
	orders := func(c *Client) *QueueBuilder { return c.Queue("orders") }
	auto := with(waitDefaults, "autopilot", "true")
	runPopCases(t, []popCase{
		{"named group sends subscriptionMode=new when unset", func(c *Client) *QueueBuilder { return orders(c).Group("billing") }, path,
			q(with(auto, "consumerGroup", "billing", "subscriptionMode", "new")...)},
		{"SubscriptionModeAll", func(c *Client) *QueueBuilder {
			return orders(c).Group("billing").SubscriptionMode(SubscriptionModeAll)
		}, path, q(with(auto, "consumerGroup", "billing", "subscriptionMode", "all")...)},
		{"SubscriptionModeNew", func(c *Client) *QueueBuilder {
			return orders(c).Group("billing").SubscriptionMode(SubscriptionModeNew)
		}, path, q(with(auto, "consumerGroup", "billing", "subscriptionMode", "new")...)},
		{"SubscriptionFrom a time, mode all", func(c *Client) *QueueBuilder {
			return orders(c).Group("audit").SubscriptionFrom("2026-10-22T00:00:00Z")
		}, path, q(with(auto, "consumerGroup", "audit", "subscriptionMode", "all", "subscriptionFrom", "2026-10-22T00:00:00Z")...)},
		{"SubscriptionFrom now with an explicit mode", func(c *Client) *QueueBuilder {
			return orders(c).Group("audit").SubscriptionMode(SubscriptionModeNew).SubscriptionFrom("now")
		}, path, q(with(auto, "consumerGroup", "audit", "subscriptionMode", "new", "subscriptionFrom", "now")...)},
		{"queue mode sends no subscription", func(c *Client) *QueueBuilder {
			return orders(c).SubscriptionMode(SubscriptionModeAll)
		}, path, q(auto...)},
		{"Wait(false): no timeout", func(c *Client) *QueueBuilder { return orders(c).Wait(false) }, path,
			q("wait", "false", "autopilot", "true")},
		{"Wait(true) and TimeoutMillis at the cap", func(c *Client) *QueueBuilder { return orders(c).Wait(true).TimeoutMillis(60000) }, path,
			q("wait", "true", "timeout", "60000", "autopilot", "true")},
		{"TimeoutMillis(1500)", func(c *Client) *QueueBuilder { return orders(c).TimeoutMillis(1500) }, path,
			q("wait", "true", "timeout", "1500", "autopilot", "true")},
		{"CommitOnDelivery(true) is autoAck=true", func(c *Client) *QueueBuilder { return orders(c).CommitOnDelivery(true) }, path,
			q(with(auto, "autoAck", "true")...)},
		{"CommitOnDelivery(false) sends nothing", func(c *Client) *QueueBuilder { return orders(c).CommitOnDelivery(false) }, path,
			q(auto...)},
		{"Conflation(false) sends nothing", func(c *Client) *QueueBuilder { return orders(c).Conflation(false) }, path, q(auto...)},
		{"LeaseTime", func(c *Client) *QueueBuilder { return orders(c).LeaseTime(90 * time.Second) }, path,
			q(with(auto, "leaseSeconds", "90")...)},
		{"LeaseTime rounds up to whole seconds", func(c *Client) *QueueBuilder { return orders(c).LeaseTime(1500 * time.Millisecond) }, path,
			q(with(auto, "leaseSeconds", "2")...)},
		{"LeaseTime under a second is one second, not unset", func(c *Client) *QueueBuilder { return orders(c).LeaseTime(time.Nanosecond) }, path,
			q(with(auto, "leaseSeconds", "1")...)},
		{"LeaseTime(0) is unset: the queue's lease time", func(c *Client) *QueueBuilder { return orders(c).LeaseTime(0) }, path,
			q(auto...)},
		{"queue name is path-escaped", func(c *Client) *QueueBuilder { return c.Queue("a b?c%d#e") }, "/api/v1/pop/queue/a%20b%3Fc%25d%23e", q(auto...)},
		{"the spec page's consumer-group options", func(c *Client) *QueueBuilder {
			return orders(c).Group("billing").SubscriptionMode(SubscriptionModeAll).Batch(100).Partitions(10)
		}, path, q(with(waitDefaults, "consumerGroup", "billing", "subscriptionMode", "all", "batch", "100", "partitions", "10")...)},
	})
}

func TestPopConflationOnTheWire(t *testing.T) {
	rec, c := newRecorder(t, ok200(t, "broker-2.x/pop_conflation_empty.json"))
	msgs, err := c.Queue("prices").Group("ticker").Conflation(true).Pop(context.Background())
	require.NoError(t, err)
	assert.Empty(t, msgs)
	r := rec.only(t)
	assert.Equal(t, "/api/v1/pop/queue/prices", r.Path)
	// A conflating pop is exempt from autopilot on the broker: none is sent.
	assert.Equal(t, q(with(waitDefaults, "consumerGroup", "ticker", "subscriptionMode", "new", "conflation", "true")...), r.Query)
}

func TestPopRoutes(t *testing.T) {
	auto := with(waitDefaults, "autopilot", "true")
	runPopCases(t, []popCase{
		{"pinned partition route, escaped", func(c *Client) *QueueBuilder { return c.Queue("orders").Partition("customer 42") },
			"/api/v1/pop/queue/orders/partition/customer%2042", q(waitDefaults...)},
		{"pinned: partitions and autopilot do not apply", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("p1").Batch(5).Partitions(3)
		}, "/api/v1/pop/queue/orders/partition/p1", q(with(waitDefaults, "batch", "5")...)},
		{"pinned, autopilot off: batch 1", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("p1").Autopilot(false)
		}, "/api/v1/pop/queue/orders/partition/p1", q(with(waitDefaults, "batch", "1")...)},
		{"pinned with group", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("p1").Group("g").CommitOnDelivery(true)
		}, "/api/v1/pop/queue/orders/partition/p1", q(with(waitDefaults, "consumerGroup", "g", "subscriptionMode", "new", "autoAck", "true")...)},
		{"namespace discovery", func(c *Client) *QueueBuilder { return c.Namespace("shop") },
			"/api/v1/pop", q(with(auto, "namespace", "shop")...)},
		{"namespace and task discovery", func(c *Client) *QueueBuilder { return c.Namespace("shop").Task("billing").Group("g").Batch(10) },
			"/api/v1/pop", q(with(waitDefaults, "autopilot", "true", "batch", "10", "namespace", "shop", "task", "billing", "consumerGroup", "g", "subscriptionMode", "new")...)},
		{"task discovery", func(c *Client) *QueueBuilder { return c.Task("billing").Wait(false) },
			"/api/v1/pop", q("wait", "false", "autopilot", "true", "task", "billing")},
	})
}

// A message pinned as the first one of 0.15.1's capture, field by field.
func TestPopDecodes015Message(t *testing.T) {
	_, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_queue_mode_three.json"))
	msgs, err := c.Queue("t1").Batch(10).Wait(false).Pop(context.Background())
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	m := msgs[0]
	assert.Equal(t, "01a22ab9-ddc0-7000-b545-bb73f2d3995e", m.ID)
	assert.Equal(t, "ffe7f660-3b61-4801-b0b6-1f658bead534", m.TransactionID)
	assert.Equal(t, "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", m.PartitionID)
	assert.Equal(t, "01a22ab9-e36e-7000-b8e0-b47a83022bfd", m.LeaseID)
	assert.Equal(t, "t1", m.Queue, "copied down from the top level")
	assert.Equal(t, "p1", m.Partition)
	assert.Equal(t, "__QUEUE_MODE__", m.ConsumerGroup)
	assert.Equal(t, time.Date(2026, 11, 30, 4, 32, 33, 733541000, time.UTC), m.CreatedAt)
	assert.Empty(t, m.TraceID)
	assert.Empty(t, m.ProducerSub)
	assert.Equal(t, 0, m.DeliveryAttempt, "0.15.1 does not report it")
	assert.Equal(t, int64(-1), m.Offset, "0.15.1 does not report it")
	assert.Equal(t, map[string]any{"n": float64(1)}, m.Data)
	assert.JSONEq(t, `{"n":1}`, string(m.Raw))
	assert.Equal(t, "tx-client-3", msgs[2].TransactionID)
}

func TestPopDecodes2xMessages(t *testing.T) {
	_, c := newRecorder(t, ok200(t, "broker-2.x/pop_two_partitions_mixed_payloads.json"))
	res, err := c.pop(context.Background(), mustPopRequest(t, c.Queue("orders").Group("billing")), false)
	require.NoError(t, err)
	require.Len(t, res.messages, 6)
	require.NotNil(t, res.autopilot)
	assert.Equal(t, 2, res.autopilot.Partitions)
	assert.Equal(t, 150, res.autopilot.Batch)
	assert.Equal(t, "0196f5a0-0000-7000-8000-00000000aaaa", res.leaseID)

	m := res.messages[0]
	assert.Equal(t, "tx-1", m.TransactionID)
	assert.Equal(t, "17", m.PartitionID, "a decimal pid on 2.x, kept as an opaque string")
	assert.Equal(t, "eu", m.Partition)
	assert.Equal(t, "orders", m.Queue)
	assert.Equal(t, "billing", m.ConsumerGroup)
	assert.Equal(t, "5f0c7d1e-3b2a-4c8d-9e6f-0a1b2c3d4e5f", m.TraceID)
	assert.Equal(t, 1, m.DeliveryAttempt)
	assert.Equal(t, int64(41), m.Offset)
	assert.Equal(t, 12.5, m.Data["total"])
	assert.Equal(t, time.Date(2026, 10, 22, 8, 15, 30, 123456000, time.UTC), m.CreatedAt)

	second := res.messages[1]
	assert.Equal(t, 2, second.DeliveryAttempt)
	assert.Equal(t, "23", res.messages[2].PartitionID, "each message keeps its own partition")
	for _, m := range res.messages {
		assert.Equal(t, res.leaseID, m.LeaseID, "one lease for every partition of the pop")
	}
}

func mustPopRequest(t *testing.T, b *QueueBuilder) *popRequest {
	t.Helper()
	r, err := b.popRequest()
	require.NoError(t, err)
	return r
}

// Every answer that means "nothing to take" on one of the two generations.
func TestPopEmptyAnswers(t *testing.T) {
	tests := []struct {
		name   string
		answer answer
		pinned bool
	}{
		{"2.x 204 without a body", answer{status: http.StatusNoContent}, false},
		{"0.15.1 no_available_partition (HTTP 200, success false)", ok200(t, "broker-0.15.1/pop_no_available_partition.json"), false},
		{"0.15.1 partition_not_found on the pinned route", ok200(t, "broker-0.15.1/pop_partition_not_found.json"), true},
		{"0.15.1 lease_held on the pinned route", ok200(t, "broker-0.15.1/pop_lease_held.json"), true},
		{"0.15.1 long-poll timeout: success true, leaseId null", ok200(t, "broker-0.15.1/pop_long_poll_timeout.json"), false},
		{"0.15.1 first pop of a new group: a lease, no message", ok200(t, "broker-0.15.1/pop_group_new_first_pop_empty.json"), false},
		{"200 with an empty body", answer{status: http.StatusOK}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, tt.answer)
			b := c.Queue("t1")
			if tt.pinned {
				b = b.Partition("p1")
			}
			msgs, err := b.Pop(context.Background())
			require.NoError(t, err)
			assert.Empty(t, msgs)
		})
	}
}

func TestPopPayloadsThatAreNotObjects(t *testing.T) {
	t.Run("0.15.1 string payload on the pinned route", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_pinned_string_payload.json"))
		msgs, err := c.Queue("t2").Partition("Default").Pop(context.Background())
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		assert.Nil(t, msgs[0].Data)
		assert.Equal(t, `"plain string payload"`, string(msgs[0].Raw))
		s, err := Decode[string](msgs[0])
		require.NoError(t, err)
		assert.Equal(t, "plain string payload", s)
	})
	t.Run("0.15.1 number payloads", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_group_number_payloads.json"))
		msgs, err := c.Queue("s1").Group("SG").SubscriptionMode(SubscriptionModeAll).Pop(context.Background())
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		for i, m := range msgs {
			n, err := Decode[int](m)
			require.NoError(t, err)
			assert.Equal(t, i+1, n)
			assert.Nil(t, m.Data)
			assert.Equal(t, "SG", m.ConsumerGroup)
		}
	})
	t.Run("2.x array, null, number, string, bool", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-2.x/pop_two_partitions_mixed_payloads.json"))
		msgs, err := c.Queue("orders").Group("billing").Pop(context.Background())
		require.NoError(t, err)
		require.Len(t, msgs, 6)
		raws := []string{`{"total":12.5,"lines":[1,2]}`, `[1,2,3]`, `null`, `7`, `"plain text"`, `true`}
		for i, m := range msgs {
			assert.Equal(t, raws[i], string(m.Raw), "message %d keeps its payload", i)
			assert.Equal(t, i == 0, m.Data != nil, "Data only for the object payload (message %d)", i)
		}
		arr, err := Decode[[]int](msgs[1])
		require.NoError(t, err)
		assert.Equal(t, []int{1, 2, 3}, arr)
		null, err := Decode[*int](msgs[2])
		require.NoError(t, err)
		assert.Nil(t, null)
		b, err := Decode[bool](msgs[5])
		require.NoError(t, err)
		assert.True(t, b)
		type order struct {
			Total float64 `json:"total"`
			Lines []int   `json:"lines"`
		}
		o, err := Decode[order](msgs[0])
		require.NoError(t, err)
		assert.Equal(t, order{Total: 12.5, Lines: []int{1, 2}}, o)
		_, err = Decode[int](msgs[4])
		assert.Error(t, err, "a string payload does not decode into an int")
	})
}

func TestPopCommitOnDeliveryAnswers(t *testing.T) {
	for _, file := range []string{"broker-0.15.1/pop_auto_ack.json", "broker-2.x/pop_commit_on_delivery.json"} {
		t.Run(file, func(t *testing.T) {
			_, c := newRecorder(t, ok200(t, file))
			msgs, err := c.Queue("q").CommitOnDelivery(true).Pop(context.Background())
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			assert.Empty(t, msgs[0].LeaseID, "committed on delivery: no lease")
			assert.NotEmpty(t, msgs[0].TransactionID)
		})
	}
	_, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_auto_ack.json"))
	msgs, err := c.Queue("t4").CommitOnDelivery(true).Pop(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "11111111-2222-3333-4444-555555555555", msgs[0].TraceID)
}

func TestPopConflation(t *testing.T) {
	t.Run("echoed: messages handed out", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-2.x/pop_conflation_one.json"))
		msgs, err := c.Queue("prices").Group("ticker").Conflation(true).Pop(context.Background())
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		assert.Equal(t, 1.0871, msgs[0].Data["bid"])
	})
	t.Run("conflict: the group's policy wins, a warning is logged", func(t *testing.T) {
		var logs bytes.Buffer
		_, c := newRecorderOpts(t, []Option{WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))},
			ok200(t, "broker-2.x/pop_conflation_conflict.json"))
		msgs, err := c.Queue("prices").Group("ticker").Conflation(true).Pop(context.Background())
		require.NoError(t, err)
		assert.Len(t, msgs, 1)
		assert.Contains(t, logs.String(), "conflation")
	})
	for _, file := range []string{
		"broker-0.15.1/pop_group_three.json",               // a backlog the old broker did not conflate
		"broker-0.15.1/pop_no_available_partition.json",    // empty, but still no echo
		"broker-0.15.1/pop_group_new_first_pop_empty.json", // success, no echo
		"broker-2.x/pop_two_partitions_mixed_payloads.json",
	} {
		t.Run("no echo: "+file, func(t *testing.T) {
			_, c := newRecorder(t, ok200(t, file))
			msgs, err := c.Queue("t1").Group("G").Conflation(true).Pop(context.Background())
			require.ErrorIs(t, err, ErrConflationUnsupported)
			assert.NotErrorIs(t, err, ErrInvalidArgument)
			assert.Nil(t, msgs, "nothing of the answer is handed out")
		})
	}
	t.Run("a pop without conflation ignores the missing echo", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_group_three.json"))
		msgs, err := c.Queue("t1").Group("G").Pop(context.Background())
		require.NoError(t, err)
		assert.Len(t, msgs, 3)
	})
}

func TestPopBrokerErrors(t *testing.T) {
	tests := []struct {
		name   string
		answer answer
		status int
		code   string
		msg    string
	}{
		{"2.x 400 conflation refusal", answer{status: 400, body: golden(t, "broker-2.x/pop_400_conflation_needs_group.json")}, 400, "", "conflation requires consumerGroup"},
		{"0.15.1 SQL error with HTTP 200", answer{status: 200, body: `{"error":"ERROR:  relation does not exist","messages":[],"success":false}`}, 200, "", "relation does not exist"},
		{"0.15.1 unknown route: 404 HTML", answer{status: 404, body: golden(t, "broker-0.15.1/unknown_route_404.html")}, 404, "", "File Not Found"},
		{"2.x 503 no leader", answer{status: 503, body: golden(t, "broker-2.x/error_503_no_leader.json"), header: map[string]string{"Retry-After": "1"}}, 503, "no_leader", "no leader"},
		{"not JSON with 200", answer{status: 200, body: "{oops"}, 200, "", "undecodable pop answer"},
		{"messages not an array", answer{status: 200, body: `{"success":true,"messages":{}}`}, 200, "", "undecodable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, tt.answer)
			msgs, err := c.Namespace("ns").Pop(context.Background())
			assert.Nil(t, msgs)
			var be *BrokerError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, tt.status, be.Status)
			assert.Equal(t, tt.code, be.Code)
			assert.Contains(t, be.Message, tt.msg)
			assert.Equal(t, http.MethodGet, be.Method)
			assert.Equal(t, "/api/v1/pop", be.Path)
		})
	}
}

// The wire query type encodes exactly the fields set; this pins the names.
func TestPopQueryNames(t *testing.T) {
	r := mustPopRequest(t, (&Client{}).Queue("q").Group("g").SubscriptionMode(SubscriptionModeAll).
		SubscriptionFrom("now").Batch(3).Partitions(2).TimeoutMillis(10).CommitOnDelivery(true).LeaseTime(5*time.Second))
	v, err := r.query.Values()
	require.NoError(t, err)
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	assert.JSONEq(t, `{"consumerGroup":["g"],"subscriptionMode":["all"],"subscriptionFrom":["now"],"batch":["3"],
		"partitions":["2"],"wait":["true"],"timeout":["10"],"autoAck":["true"],"leaseSeconds":["5"]}`, string(raw))
}

// A discovery pop against a broker without that route (0.15.1: a 404 with
// an HTML body; 2.x: no_such_route) says so with ErrNotSupported, and the
// broker's answer stays reachable. A JSON 404 of a broker that has the
// route is just a *BrokerError.
func TestPopDiscoveryNotSupported(t *testing.T) {
	for name, a := range map[string]answer{
		"0.15.1 HTML 404":   {status: 404, body: golden(t, "broker-0.15.1/unknown_route_404.html")},
		"2.x no_such_route": {status: 404, body: `{"code":"no_such_route","error":"not found","path":"/api/v1/pop"}`},
	} {
		t.Run(name, func(t *testing.T) {
			_, c := newRecorder(t, a)
			_, err := c.Namespace("shop").Pop(context.Background())
			require.ErrorIs(t, err, ErrNotSupported)
			var be *BrokerError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, 404, be.Status)
		})
	}
	_, c := newRecorder(t, answer{status: 404, body: `{"success":false,"error":"queue not found"}`})
	_, err := c.Namespace("shop").Pop(context.Background())
	assert.NotErrorIs(t, err, ErrNotSupported)
	// A pop of a named queue is never "not supported": its route exists on
	// every broker.
	_, c = newRecorder(t, answer{status: 404, body: golden(t, "broker-0.15.1/unknown_route_404.html")})
	_, err = c.Queue("q").Wait(false).Pop(context.Background())
	assert.NotErrorIs(t, err, ErrNotSupported)
}

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
