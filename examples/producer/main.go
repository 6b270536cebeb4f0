// Command producer is a web service that pushes one message per HTTP
// request through a batching queen.Producer: many requests at once become a
// few push requests to the broker, and each request still answers with its
// own message's result (201 with the message id once the broker stored it,
// 400 for a body that is not JSON, 503 when it could not be stored).
//
// During a broker outage (a restart, refused connections, 429 or 5xx) the
// producer keeps each event and sends it again with backoff: a request
// waits, and is answered 201 once the broker is back, if that is within the
// producer's delivery timeout (20 s here) and the client still waits. Past
// it the answer is 503 with Retry-After, saying whether the event surely
// was not stored (queen.ErrNotSent) or may have been (queen.ErrOutcomeUnknown).
// After the outage every user's events go out again: no restart of the
// service, no Resume.
//
//	go run ./examples/producer                        # in-process broker (queentest), serves :8080
//	curl -d '{"page":"/home"}' 'localhost:8080/events?user=u-42'
//	go run ./examples/producer -demo 5000             # sends itself 5000 requests, prints a summary, exits
//	QUEEN_URL=http://localhost:6632 go run ./examples/producer
//	QUEEN_URL=http://h1:6632,http://h2:6632 go run ./examples/producer # a cluster
//
// With QUEEN_URL unset it starts the in-memory broker of the queentest
// package in the same process, so it runs on a fresh machine. Ctrl-C or
// SIGTERM stops it cleanly: the HTTP server stops taking requests and
// finishes those under way, then the producer sends what it holds (Close).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to serve on")
	flag.StringVar(&cfg.queue, "queue", "events", "queue the events go to")
	flag.IntVar(&cfg.demo, "demo", 0, "send this many requests to itself from 64 goroutines, print a summary and exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// config is what the flags set.
type config struct {
	addr, queue string
	demo        int
}

// handler takes one event per request and pushes it with the producer.
type handler struct {
	events *queen.Producer // bound to the queue
}

// maxBody bounds an event.
const maxBody = 64 << 10

// ServeHTTP handles POST /events?user=ID: the body (JSON) is the event;
// the user picks the partition, so one user's events keep their order.
func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an event", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	to := h.events
	if user := r.URL.Query().Get("user"); user != "" {
		to = to.Partition(user)
	}
	// The request's ctx bounds the wait for room in the producer's buffer
	// and for the result; once buffered, the event is sent even if the
	// client goes away.
	res, err := to.Push(r.Context(), json.RawMessage(body)).Wait(r.Context())
	switch {
	case errors.Is(err, queen.ErrInvalidArgument):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, queen.ErrNotSent):
		// The broker never got it (an outage past the delivery timeout,
		// or an earlier event of this user failed): nothing stored.
		w.Header().Set("Retry-After", "5")
		http.Error(w, "not stored, send it again: "+err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		// Not stored, or not known to be: the caller may send it again.
		w.Header().Set("Retry-After", "5")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{
		"messageId": res.MessageID, "transactionId": res.TransactionID, "status": string(res.Status),
	})
}

// run serves until ctx ends (or, with cfg.demo, until the demo is done).
func run(ctx context.Context, cfg config, out io.Writer) error {
	url, opts := brokers(os.Getenv("QUEEN_URL"))
	if url == "" {
		srv := queentest.NewServer()
		defer srv.Close()
		url = srv.URL
		fmt.Fprintln(out, "QUEEN_URL not set: using an in-process queentest broker at", url)
	}
	client, err := queen.New(url, opts...)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	// An outage is ridden out for up to 20 s per event; a request waits
	// that long at most (less if its client gives up).
	events, err := client.Queue(cfg.queue).Producer(queen.WithDeliveryTimeout(20 * time.Second))
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		_ = events.Close(context.Background())
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/events", handler{events: events})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(out, "serving POST http://%s/events (queue %s)\n", ln.Addr(), cfg.queue)

	var demoErr error
	if cfg.demo > 0 {
		demoErr = demo(ctx, "http://"+ln.Addr().String()+"/events", cfg.demo, out)
	} else {
		<-ctx.Done()
	}

	// Stop taking requests and finish those under way, then send what the
	// producer holds.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		fmt.Fprintln(out, "http shutdown:", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if err := events.Close(sctx); err != nil {
		return fmt.Errorf("producer close: %w", err)
	}
	fmt.Fprintln(out, "stopped; every accepted event was stored")
	return demoErr
}

// demo sends n events to url from 64 goroutines, spread over 16 users,
// and prints how many were stored and how fast.
func demo(ctx context.Context, url string, n int, out io.Writer) error {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	var next, created atomic.Int64
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				body := `{"n":` + strconv.FormatInt(i, 10) + `,"page":"/home"}`
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"?user=u-"+strconv.FormatInt(i%16, 10), strings.NewReader(body))
				resp, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						err = fmt.Errorf("event %d: HTTP %d", i, resp.StatusCode)
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				created.Add(1)
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	fmt.Fprintf(out, "demo: %d of %d events stored in %v (%.0f requests/s)\n",
		created.Load(), n, d.Round(time.Millisecond), float64(created.Load())/d.Seconds())
	return firstErr
}

// brokers splits QUEEN_URL, one URL or a comma list of the brokers of a
// cluster, into the first URL and the options naming the others.
func brokers(list string) (string, []queen.Option) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return "", nil
	}
	return urls[0], []queen.Option{queen.WithURLs(urls[1:]...)}
}
