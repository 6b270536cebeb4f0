//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request written on a connection the broker had already closed, with
// no byte of it read, was not sent: it goes to the next broker, a pop and
// a commit too. The race of issue 37 (a node stopped, the client's next
// pop on the connection it kept to that node got EOF and was classed
// "outcome unknown"), made deterministic: the client's reader of the
// pooled connection is held until the client writes on it or closes it,
// as a busy machine holds it, and the next request starts once the
// broker's close has reached the client's socket.

const rawAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n" + `{"ok":true}`

// rawBroker answers every request with rawAnswer on connections it keeps
// open, until hangUp closes them all (a broker going down), and counts the
// requests it read.
type rawBroker struct {
	ln    net.Listener
	url   string
	hits  atomic.Int32
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newRawBroker(t *testing.T) *rawBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &rawBroker{ln: ln, url: "http://" + ln.Addr().String()}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go b.serve(c)
		}
	}()
	t.Cleanup(func() {
		b.hangUp()
		b.wg.Wait()
	})
	return b
}

func (b *rawBroker) serve(c net.Conn) {
	defer b.wg.Done()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		b.hits.Add(1)
		if _, err := io.WriteString(c, rawAnswer); err != nil {
			return
		}
	}
}

// hangUp stops listening and closes every connection the broker
// accepted.
func (b *rawBroker) hangUp() {
	_ = b.ln.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// heldConn is a client connection whose reads past the first answer wait
// until the client writes on it or closes it. idle is closed when net/http
// reads it past that answer (it keeps the connection for the next
// request), gone when it closes it.
type heldConn struct {
	*net.TCPConn
	read       atomic.Int64
	once, held sync.Once
	release    chan struct{}
	idle, gone chan struct{}
}

func newHeldConn(c net.Conn) *heldConn {
	return &heldConn{TCPConn: c.(*net.TCPConn), release: make(chan struct{}), idle: make(chan struct{}), gone: make(chan struct{})}
}

func (c *heldConn) Read(p []byte) (int, error) {
	if c.read.Load() >= int64(len(rawAnswer)) {
		c.held.Do(func() { close(c.idle) })
		<-c.release
	}
	n, err := c.TCPConn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *heldConn) Write(p []byte) (int, error) {
	next := c.read.Load() >= int64(len(rawAnswer)) // a request after the first
	n, err := c.TCPConn.Write(p)
	if next {
		c.once.Do(func() { close(c.release) })
	}
	return n, err
}

func (c *heldConn) Close() error {
	c.once.Do(func() {
		close(c.release)
		close(c.gone)
	})
	return c.TCPConn.Close()
}

// awaitClosed returns once the broker's close of conn has reached it.
func awaitClosed(conn net.Conn) {
	var p peeker
	for !p.peerClosed(conn) {
		runtime.Gosched()
	}
}

func TestBrokerClosedPooledConnFailsOver(t *testing.T) {
	for _, req := range []Request{
		{Method: http.MethodGet, Path: "/api/v1/pop/queue/q", NoRetryAfterSend: true},
		withFlag(txnReq),
		txnReq,
	} {
		t.Run(req.Method+" once="+strconv.FormatBool(req.NoRetryAfterSend), func(t *testing.T) {
			a := newRawBroker(t)
			b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
			var mu sync.Mutex
			var conns []*heldConn
			pool := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				hc := newHeldConn(c)
				mu.Lock()
				conns = append(conns, hc)
				mu.Unlock()
				return hc, nil
			}}
			t.Cleanup(pool.CloseIdleConnections)
			tr, _, _ := newTransport(t, Config{URLs: []string{a.url, b.URL}, HTTPClient: &http.Client{Transport: pool}})
			// A first request opens a connection to a, which net/http keeps
			// for the next one; on a busy machine it may not (its writer
			// reported the request written too late), and then again.
			var kept *heldConn
			var opened int32
			for kept == nil {
				resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/health"})
				require.NoError(t, err)
				require.Equal(t, a.url, resp.URL)
				opened++
				mu.Lock()
				hc := conns[len(conns)-1]
				mu.Unlock()
				select {
				case <-hc.idle:
					kept = hc
				case <-hc.gone:
				}
			}
			a.hangUp() // a goes down
			awaitClosed(kept)

			resp, err := tr.Do(context.Background(), req)
			require.NoError(t, err, "sent again to the next broker")
			assert.Equal(t, b.URL, resp.URL)
			assert.Equal(t, opened, a.hits.Load(), "a read only the first requests")
			assert.Equal(t, 1, b.Hits())
		})
	}
}

// A broker that accepts a connection and closes it without reading (a
// node stopping as the client dials): the request was not sent either.
func TestBrokerClosedNewConnFailsOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			closed <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	pool := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil || addr != ln.Addr().String() {
			return c, err
		}
		<-closed
		awaitClosed(c)
		return c, nil
	}}
	t.Cleanup(pool.CloseIdleConnections)
	tr, _, _ := newTransport(t, Config{URLs: []string{"http://" + ln.Addr().String(), b.URL}, HTTPClient: &http.Client{Transport: pool}})
	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q", NoRetryAfterSend: true})
	require.NoError(t, err)
	assert.Equal(t, b.URL, resp.URL)
	assert.Equal(t, 1, b.Hits())
}
