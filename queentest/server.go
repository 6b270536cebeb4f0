package queentest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queen-go/queen/internal/wire"
)

// Version is what GET /health reports as the broker version.
const Version = "2.2.0-queentest"

// maxBody is the 2.x broker's default request body limit (QUEEN_MAX_BODY_BYTES).
const maxBody = 64 << 20

// Server is an in-memory Queen broker serving the 2.x HTTP API on a loopback
// port. Create one with NewServer (or Start in a test) and point a client at
// URL. It is safe for concurrent use; Close stops it.
type Server struct {
	// URL is the broker's base URL, "http://127.0.0.1:PORT", without a
	// trailing slash.
	URL string

	addr   string
	b      *broker
	faults faults
	log    *slog.Logger
	hs     *http.Server
	// profile is the broker generation served, generation what it does
	// on the wire; legacy is profile == Profile015.
	profile    Profile
	generation wire.Generation
	legacy     bool

	lmu      sync.Mutex // guards ln, conns, refuseGen, closing, stopped, inflight
	ln       net.Listener
	conns    map[net.Conn]struct{}
	gen      int
	closing  bool
	stopped  bool // Stop: down until Resume (cluster.go)
	inflight int
	idle     *sync.Cond

	closed    chan struct{}
	closeOnce sync.Once
	bg        sync.WaitGroup // serve loops and reopen timers
	unsub     func()
}

// Option configures a Server.
type Option func(*options)

type options struct {
	clock    Clock
	addr     string
	defaults *QueueConfig
	log      *slog.Logger
	profile  Profile
	entryMax int
}

// WithClock makes the broker read time from c: lease expiry,
// delayedProcessing, the dedup window, message timestamps (createdAt) and
// subscription times.
// Use a *FakeClock to move time by hand in tests.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithAddr sets the listen address (default "127.0.0.1:0", a free loopback
// port). cmd/queentest uses it.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// WithDefaultQueueConfig sets the configuration of queues created
// implicitly by a push (or a pop) without a configure. Start from
// DefaultQueueConfig; a LeaseTime of zero or less means 60 seconds.
func WithDefaultQueueConfig(c QueueConfig) Option {
	return func(o *options) { o.defaults = &c }
}

// WithLogger sends one debug line per request, and fault-injection events,
// to l. The default logger discards everything.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// NewServer starts a broker at once and returns it. It panics if it cannot
// listen (like httptest.NewServer); use Listen to get the error instead.
func NewServer(opts ...Option) *Server {
	s, err := Listen(opts...)
	if err != nil {
		panic("queentest: " + err.Error())
	}
	return s
}

// Listen is NewServer returning the listen error instead of panicking.
func Listen(opts ...Option) (*Server, error) {
	o := newOptions(opts)
	return listen(&o, o.newBroker())
}

// newOptions applies opts to the defaults.
func newOptions(opts []Option) options {
	o := options{clock: systemClock{}, addr: "127.0.0.1:0", profile: Profile2x}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.clock == nil {
		o.clock = systemClock{}
	}
	return o
}

// newBroker returns the broker state the options describe.
func (o *options) newBroker() *broker {
	legacy := o.profile == Profile015
	defaults := DefaultQueueConfig()
	if legacy {
		defaults = defaultQueueConfig015()
	}
	if o.defaults != nil {
		defaults = *o.defaults
	}
	b := newBroker(o.clock, defaults, legacy)
	if o.entryMax > 0 {
		b.entryMax = o.entryMax
	}
	return b
}

// listen serves the broker state b on a listener of its own at o.addr: a
// Server, or one node of a Cluster.
func listen(o *options, b *broker) (*Server, error) {
	legacy := o.profile == Profile015
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		addr:       ln.Addr().String(),
		b:          b,
		log:        o.log,
		profile:    o.profile,
		generation: o.profile.generation(),
		legacy:     legacy,
		ln:         ln,
		conns:      map[net.Conn]struct{}{},
		closed:     make(chan struct{}),
	}
	s.URL = "http://" + s.addr
	s.idle = sync.NewCond(&s.lmu)
	s.faults.init()
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
		ConnState:         s.connState,
	}
	if n, ok := o.clock.(clockNotifier); ok {
		s.unsub = n.subscribe(s.b.wake)
	}
	s.bg.Add(1)
	go s.serve(ln)
	return s, nil
}

// Start starts a broker for the test t and closes it when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := NewServer(opts...)
	t.Cleanup(s.Close)
	return s
}

// Addr returns the host:port the broker listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops the broker: it stops listening, ends parked long polls,
// closes every connection and returns once no request handler or
// background goroutine of the Server is left. Calling it again does nothing.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.lmu.Lock()
		s.closing = true
		s.gen++
		s.lmu.Unlock()
		close(s.closed)
		_ = s.hs.Close()
		s.lmu.Lock()
		if s.ln != nil {
			_ = s.ln.Close()
			s.ln = nil
		}
		for c := range s.conns {
			_ = c.Close()
		}
		for s.inflight > 0 {
			s.idle.Wait()
		}
		s.lmu.Unlock()
		s.bg.Wait()
		if s.unsub != nil {
			s.unsub()
		}
	})
}

func (s *Server) serve(ln net.Listener) {
	defer s.bg.Done()
	_ = s.hs.Serve(ln)
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	switch st {
	case http.StateNew:
		if s.closing || s.stopped {
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(s.conns, c)
	}
}

// enter counts a request in; false once the Server is closing.
func (s *Server) enter() bool {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closing || s.stopped {
		return false
	}
	s.inflight++
	return true
}

func (s *Server) leave() {
	s.lmu.Lock()
	s.inflight--
	if s.inflight == 0 {
		s.idle.Broadcast()
	}
	s.lmu.Unlock()
}

// ------------------------------------------------------------------ requests

// request is one parsed HTTP request handed to a route handler.
type request struct {
	r      *http.Request
	ctx    context.Context
	params []string
	query  url.Values
	body   []byte
}

type handler func(s *Server, w *recorder, req *request)

// ServeHTTP serves the broker's HTTP API. Every request is counted for its
// route, delayed, failed or cut as the fault injection says, and otherwise
// applied and answered.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeErrorDirect(w, http.StatusServiceUnavailable, "retry", "the broker is closing")
		return
	}
	defer s.leave()
	s.stampDate(w)

	route, h, params := match(r, &s.generation, s.legacy)
	s.faults.count(route)
	s.log.Debug("queentest request", "method", r.Method, "path", r.URL.Path, "route", string(route))

	if d := s.faults.latencyOf(route); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if f, ok := s.faults.takeFail(route); ok {
		s.log.Debug("queentest injected failure", "route", string(route), "status", f.Status)
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", formatRetryAfter(f.RetryAfter))
		}
		writeErrorDirect(w, f.Status, f.Code, "injected failure (queentest FailNext)")
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeErrorDirect(w, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
			return
		}
		writeErrorDirect(w, http.StatusBadRequest, "bad_body", "cannot read the request body: "+err.Error())
		return
	}
	rec := newRecorder()
	h(s, rec, &request{r: r, ctx: r.Context(), params: params, query: r.URL.Query(), body: body})

	if s.faults.takeDrop(route) {
		s.log.Debug("queentest dropped a response", "route", string(route))
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // no hijack: abort the connection anyway
	}
	s.stampDate(w)
	rec.writeTo(w)
}

// stampDate sets the Date header of an answer from the broker's Clock (an
// HTTP date: whole seconds, rounded down), as both real brokers send one
// from theirs (2.x: axum::serve's hyper server, main.rs; 0.15.1:
// uWebSockets). net/http would stamp the real time.
func (s *Server) stampDate(w http.ResponseWriter) {
	w.Header().Set("Date", s.b.clock.Now().UTC().Format(http.TimeFormat))
}

// match finds the route of r on generation gen: its fault-injection name,
// its handler and its path parameters. The 2.x broker unescapes path
// parameters; 0.15.1 (uWebSockets) hands them to its routes raw
// (gen.RawPathParams). The routes gen does not serve (gen.Serves:
// discovery pop, fetch, queue depth, DLQ replay and purge on 0.15.1) answer
// its 404, and legacy swaps in the 0.15.1 profile's handlers.
func match(r *http.Request, gen *wire.Generation, legacy bool) (Route, handler, []string) {
	raw := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	seg := make([]string, len(raw))
	for i, p := range raw {
		u, err := url.PathUnescape(p)
		if err != nil || gen.RawPathParams {
			u = p
		}
		seg[i] = u
	}
	m := r.Method
	var params []string
	// is matches the request against method and a route of the broker's,
	// keeping the route's path parameters.
	is := func(method string, rt wire.Route) bool {
		if m != method || !gen.Serves(method, rt) {
			return false
		}
		p, ok := rt.Match(seg)
		if ok {
			params = p
		}
		return ok
	}
	// by picks the handler of the served profile.
	by := func(h2, h015 handler) handler {
		if legacy {
			return h015
		}
		return h2
	}
	notFound := by((*Server).handleNotFound, (*Server).handleNotFound015)
	switch {
	case is("GET", wire.RouteHealth):
		return RouteHealth, by((*Server).handleHealth, (*Server).handleHealth015), nil
	case is("POST", wire.RoutePush):
		return RoutePush, by((*Server).handlePush, (*Server).handlePush015), nil
	case is("GET", wire.RoutePopQueue):
		return RoutePop, by((*Server).handlePopQueue, (*Server).handlePop015), params
	case is("GET", wire.RoutePopPartition):
		return RoutePop, by((*Server).handlePopPartition, (*Server).handlePop015), params
	case is("GET", wire.RoutePopDiscover):
		return RoutePop, (*Server).handlePopDiscover, nil
	case is("POST", wire.RouteAck):
		return RouteAck, by((*Server).handleAck, (*Server).handleAck015), nil
	case is("POST", wire.RouteAckBatch):
		return RouteAckBatch, by((*Server).handleAck, (*Server).handleAckBatch015), nil
	case is("POST", wire.RouteLeaseExtend):
		return RouteRenew, by((*Server).handleRenew, (*Server).handleRenew015), params
	case is("POST", wire.RouteTransaction):
		return RouteTransaction, by((*Server).handleTransaction, (*Server).handleTransaction015), nil
	case is("POST", wire.RouteConfigure):
		return RouteConfigure, by((*Server).handleConfigure, (*Server).handleConfigure015), nil
	case is("GET", wire.RouteQueues):
		return RouteQueues, by((*Server).handleListQueues, (*Server).handleListQueues015), nil
	case is("GET", wire.RouteQueue):
		return RouteQueues, by((*Server).handleGetQueue, (*Server).handleGetQueue015), params
	case is("DELETE", wire.RouteQueue):
		return RouteQueues, by((*Server).handleDeleteQueue, (*Server).handleDeleteQueue015), params
	case is("GET", wire.RouteQueueDepth):
		return RouteQueues, (*Server).handleQueueDepth, params
	case is("POST", wire.RouteSeekGroup):
		return RouteSeek, by((*Server).handleSeek, (*Server).handleSeek015), params
	case is("POST", wire.RouteSeekPartition):
		return RouteSeek, by((*Server).handleSeek, (*Server).handleSeekPartition015), params
	case is("GET", wire.RouteGroups):
		return RouteGroups, by((*Server).handleListGroups, (*Server).handleListGroups015), nil
	case is("GET", wire.RouteGroupsLagging):
		return RouteGroups, (*Server).handleLaggingGroups, nil
	case is("GET", wire.RouteGroup):
		return RouteGroups, by((*Server).handleGroupDetail, (*Server).handleGroupDetail015), params
	case is("DELETE", wire.RouteGroup):
		return RouteGroups, by((*Server).handleDeleteGroup, (*Server).handleDeleteGroup015), params
	case is("DELETE", wire.RouteGroupQueue):
		return RouteGroups, by((*Server).handleDeleteGroup, (*Server).handleDeleteGroup015), params
	case is("POST", wire.RouteGroupSubscription):
		return RouteGroups, (*Server).handleGroupSubscription, params
	case is("GET", wire.RouteDLQ):
		return RouteDLQ, by((*Server).handleDLQList, (*Server).handleDLQList015), nil
	case is("DELETE", wire.RouteDLQ):
		return RouteDLQ, (*Server).handleDLQPurge, nil
	case is("POST", wire.RouteDLQReplay):
		return RouteDLQ, (*Server).handleDLQReplay, params
	case is("POST", wire.RouteMessageRetry):
		params, _ = wire.RouteMessageRetry.Match(raw) // as sent, like the message routes
		return RouteDLQ, (*Server).handleDLQRetryByAddress, params
	case is("GET", wire.RouteMessage):
		// 2.x reads these two segments as sent, like 0.15.1.
		params, _ = wire.RouteMessage.Match(raw)
		return RouteMessages, by((*Server).handleGetMessage, (*Server).handleGetMessage015), params
	case is("DELETE", wire.RouteMessage):
		params, _ = wire.RouteMessage.Match(raw)
		return RouteMessages, by((*Server).handleDeleteMessage, (*Server).handleDeleteMessage015), params
	case is("POST", wire.RouteFetch):
		return RouteFetch, (*Server).handleFetch, nil
	case is("POST", wire.RouteStatsRefresh):
		return "", (*Server).handleStatsRefresh, nil
	}
	return "", notFound, nil
}

// handleNotFound answers an unknown route as the 2.x broker does:
// 404 {"code":"no_such_route","error":"not found","path":...}.
func (s *Server) handleNotFound(w *recorder, req *request) {
	w.json(http.StatusNotFound, map[string]string{"code": "no_such_route", "error": "not found", "path": req.r.URL.Path})
}

// --------------------------------------------------------------- responses

// recorder buffers a handler's answer, so that it can be sent, or dropped
// (DropNextResponses) after the broker applied the request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}, status: http.StatusOK} }

func (w *recorder) Header() http.Header         { return w.header }
func (w *recorder) Write(p []byte) (int, error) { return w.body.Write(p) }
func (w *recorder) WriteHeader(status int)      { w.status = status }

func (w *recorder) writeTo(dst http.ResponseWriter) {
	for k, v := range w.header {
		dst.Header()[k] = v
	}
	if w.status == http.StatusNoContent {
		dst.WriteHeader(w.status)
		return
	}
	dst.Header().Set("Content-Length", strconv.Itoa(w.body.Len()))
	dst.WriteHeader(w.status)
	_, _ = dst.Write(w.body.Bytes())
}

// json answers status with v as a JSON body.
func (w *recorder) json(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"cannot encode the answer","code":"internal"}`)
	}
	w.header.Set("Content-Type", "application/json")
	w.status = status
	w.body.Reset()
	w.body.Write(b)
}

// error answers the 2.x error envelope {"error","code"}.
func (w *recorder) error(status int, code, msg string) {
	w.json(status, map[string]string{"error": msg, "code": code})
}

func (w *recorder) noContent() {
	w.status = http.StatusNoContent
	w.body.Reset()
}

// writeErrorDirect answers the error envelope on w itself, for the answers
// ServeHTTP gives before a route handler runs.
func writeErrorDirect(w http.ResponseWriter, status int, code, msg string) {
	rec := newRecorder()
	rec.error(status, code, msg)
	rec.writeTo(w)
}

// decodeBody unmarshals a JSON body; an empty body is an error.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("empty body")
	}
	return json.Unmarshal(body, v)
}

// readJSON decodes the JSON body a route requires (decodeBody) into v. On
// failure it answers 400 bad_body, msgPrefix followed by the error, and
// reports false.
func (w *recorder) readJSON(body []byte, v any, msgPrefix string) bool {
	if err := decodeBody(body, v); err != nil {
		w.error(http.StatusBadRequest, "bad_body", msgPrefix+err.Error())
		return false
	}
	return true
}

// decodeJSONLenient is json.Unmarshal that also accepts an empty body.
func decodeJSONLenient(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return json.Unmarshal(body, v)
}

// nameTooLong checks the 2.x composite-name bound (413 name_too_long):
// queue + the wider of group and partition, at most nameBudget bytes. The
// error names the longest of the three, a tie going to the queue, as the
// broker's check_message_key_names does.
func nameTooLong(w *recorder, queue, group, partition string) bool {
	if len(queue)+max(len(group), len(partition)) <= nameBudget {
		return false
	}
	field, n := "queue", len(queue)
	switch {
	case len(queue) >= len(group) && len(queue) >= len(partition):
	case len(group) >= len(partition):
		field, n = "group", len(group)
	default:
		field, n = "partition", len(partition)
	}
	w.error(http.StatusRequestEntityTooLarge, "name_too_long",
		fmt.Sprintf("%s name is %d bytes; the composite store key limit leaves %d bytes for names", field, n, nameBudget))
	return true
}

// ------------------------------------------------------- 0.15.1 answers

// The 0.15.1 broker answers input it refuses before the database with a
// real status and {"error"}; everything that reached the database comes
// back 200 (its headers are written before its status), a database error
// as {"success":false,"error":"ERROR:  ..."}.

// plainError answers status with the 0.15.1 envelope {"error": msg}.
func (w *recorder) plainError(status int, msg string) {
	w.json(status, map[string]string{"error": msg})
}

// dbError answers a 0.15.1 database error: 200 {"success":false,"error"},
// the text as PostgreSQL words it.
func (w *recorder) dbError(msg string) {
	w.json(http.StatusOK, map[string]any{"success": false, "error": "ERROR:  " + msg + "\n"})
}

// readBody015 reads a JSON body as 0.15.1's read_json_body does: an empty
// body is 400 "Empty request body", one that does not parse 400
// "Invalid JSON: ...". It reports false after answering.
func (w *recorder) readBody015(body []byte, v any) bool {
	if len(bytes.TrimSpace(body)) == 0 {
		w.plainError(http.StatusBadRequest, "Empty request body")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) || json.Valid(body) {
			// Valid JSON of another shape: the routes check what they need.
			return true
		}
		w.plainError(http.StatusBadRequest, "Invalid JSON: "+err.Error())
		return false
	}
	return true
}

// jsonKind is the JSON type of raw: "string", "number", "bool", "null",
// "object", "array", or "" when raw is absent.
func jsonKind(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return ""
	}
	switch t[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonString is raw as a string when it is one.
func jsonString(raw json.RawMessage) (string, bool) {
	if jsonKind(raw) != "string" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// colLimit015 is 0.15.1's VARCHAR(255) bound on queue, partition,
// consumer-group and transaction-id columns, in characters.
const colLimit015 = 255

// tooLong015 reports whether s overflows a 0.15.1 VARCHAR(255) column.
func tooLong015(s string) bool { return utf8.RuneCountInString(s) > colLimit015 }

// errTooLong015 is PostgreSQL's refusal of such a value.
const errTooLong015 = "value too long for type character varying(255)"

// handleNotFound015 answers an unknown route as 0.15.1's uWebSockets does:
// a 404 HTML page with no Content-Type header (a nil value keeps net/http
// from sniffing one).
func (s *Server) handleNotFound015(w *recorder, _ *request) {
	w.body.Reset()
	w.header["Content-Type"] = nil
	w.status = http.StatusNotFound
	w.body.WriteString("<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>")
}
