//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// tlsPair returns a server TLS config with httptest's certificate and a
// client config that trusts it.
func tlsPair(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	client.ServerName = "example.com" // a name of httptest's certificate
	return &tls.Config{Certificates: srv.TLS.Certificates, SessionTicketsDisabled: true}, client
}

// tlsAccepter accepts TLS connections, completes each handshake and hands
// the connection, with the socket under it, to serve.
func tlsAccepter(t *testing.T, cfg *tls.Config, serve func(raw net.Conn, tc *tls.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := tls.Server(raw, cfg)
				if tc.Handshake() != nil {
					_ = raw.Close()
					return
				}
				serve(raw, tc)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Over TLS, a pooled connection: a broker answers once, then dies (its
// sockets closed without a close_notify, as a killed process's are) while
// the client's reader of the kept connection is held, as a busy machine
// holds it. The look under the TLS connection sees the close: the next
// request, a pop, goes to the next broker, not a byte of it written.
func TestTLSBrokerClosedPooledConnFailsOver(t *testing.T) {
	scfg, ccfg := tlsPair(t)
	var mu sync.Mutex
	var raws []net.Conn
	var hits atomic.Int32
	deadAddr := tlsAccepter(t, scfg, func(raw net.Conn, tc *tls.Conn) {
		mu.Lock()
		raws = append(raws, raw)
		mu.Unlock()
		br := bufio.NewReader(tc)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			hits.Add(1)
			if _, err := io.WriteString(tc, rawAnswer); err != nil {
				return
			}
		}
	})
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) }))
	b.StartTLS()
	t.Cleanup(b.Close)
	var held *pollConn
	pool := &http.Transport{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		var under net.Conn = raw
		if addr == deadAddr {
			pc := newPollConn(raw)
			mu.Lock()
			held = pc
			mu.Unlock()
			under = pc
		}
		tc := tls.Client(under, ccfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return tc, nil
	}}
	t.Cleanup(pool.CloseIdleConnections)
	tr, _, _ := newTransport(t, Config{URLs: []string{"https://" + deadAddr, b.URL}, HTTPClient: &http.Client{Transport: pool}})
	// A first request opens a connection to the broker, which net/http
	// keeps for the next one; on a busy machine it may not, and then again.
	var pc *pollConn
	for opened := int32(1); pc == nil; opened++ {
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/health"})
		require.NoError(t, err)
		require.Equal(t, "https://"+deadAddr, resp.URL)
		mu.Lock()
		last := held
		mu.Unlock()
		last.hold.Store(true)
		select { // net/http's reader of the kept connection is held
		case <-last.held:
			pc = last
		case <-last.gone:
		}
		require.Equal(t, opened, hits.Load())
	}
	first := hits.Load()
	mu.Lock()
	for _, raw := range raws { // the broker dies
		_ = raw.Close()
	}
	mu.Unlock()
	awaitClosed(pc.TCPConn)

	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q", NoRetryAfterSend: true})
	require.NoError(t, err, "not sent: goes to the next broker")
	assert.Equal(t, b.URL, resp.URL)
	assert.Equal(t, first, hits.Load(), "the dead broker read the first requests only")
}

// pollConn is a client socket whose reads, once hold is set, wait until
// the client writes on it or closes it; held is closed when a read waits.
// It reads in short polls so that a read already under way when hold is
// set waits too.
type pollConn struct {
	*net.TCPConn
	hold                    atomic.Bool
	heldOnce, freed, closed sync.Once
	held, gone, free        chan struct{}
}

func newPollConn(c net.Conn) *pollConn {
	return &pollConn{TCPConn: c.(*net.TCPConn), held: make(chan struct{}), gone: make(chan struct{}), free: make(chan struct{})}
}

func (c *pollConn) Read(p []byte) (int, error) {
	for {
		if c.hold.Load() {
			c.heldOnce.Do(func() { close(c.held) })
			<-c.free
			_ = c.SetReadDeadline(time.Time{})
			return c.TCPConn.Read(p)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := c.TCPConn.Read(p)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *pollConn) Write(p []byte) (int, error) {
	n, err := c.TCPConn.Write(p)
	if c.hold.Load() {
		c.freed.Do(func() { close(c.free) })
	}
	return n, err
}

func (c *pollConn) Close() error {
	c.freed.Do(func() { close(c.free) })
	c.closed.Do(func() { close(c.gone) })
	return c.TCPConn.Close()
}

// The look at a TLS connection: open, open with a record waiting (data,
// as a new connection's session tickets are), closed by a dead broker,
// closed by a TLS 1.2 broker's close_notify.
func TestPeerClosedOverTLS(t *testing.T) {
	scfg, ccfg := tlsPair(t)
	type server struct {
		raw net.Conn
		tc  *tls.Conn
	}
	dial := func(t *testing.T, scfg *tls.Config) (*tls.Conn, server) {
		t.Helper()
		got := make(chan server, 1)
		addr := tlsAccepter(t, scfg, func(raw net.Conn, tc *tls.Conn) {
			got <- server{raw, tc}
			<-t.Context().Done()
		})
		raw, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = raw.Close() })
		tc := tls.Client(raw, ccfg)
		require.NoError(t, tc.Handshake())
		return tc, <-got
	}
	var p peeker

	t.Run("open, then a record waiting, then killed", func(t *testing.T) {
		tc, s := dial(t, scfg)
		assert.False(t, p.peerClosed(tc), "open")
		_, err := s.tc.Write([]byte("unasked"))
		require.NoError(t, err)
		awaitBytes(tc.NetConn())
		assert.False(t, p.peerClosed(tc), "a record waits: it may be data")
		_ = s.raw.Close()
		awaitClosedAfterBytes(t, tc)
	})
	t.Run("killed", func(t *testing.T) {
		tc, s := dial(t, scfg)
		_ = s.raw.Close()
		awaitClosed(tc.NetConn())
		assert.True(t, p.peerClosed(tc))
	})
	t.Run("close_notify of TLS 1.2", func(t *testing.T) {
		s12 := scfg.Clone()
		s12.MaxVersion = tls.VersionTLS12
		tc, s := dial(t, s12)
		require.Equal(t, uint16(tls.VersionTLS12), tc.ConnectionState().Version)
		_ = s.tc.Close() // close_notify, then the socket's close
		awaitBytes(tc.NetConn())
		assert.True(t, p.peerClosed(tc))
	})
}

// awaitBytes returns once conn's socket has a byte to read.
func awaitBytes(conn net.Conn) {
	raw, _ := conn.(syscall.Conn).SyscallConn()
	var n int
	for n == 0 {
		_ = raw.Control(func(fd uintptr) {
			var b [1]byte
			n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		runtime.Gosched()
	}
}

// awaitClosedAfterBytes reads what waits on tc until the killed broker's
// close shows: a record read, the look sees the close.
func awaitClosedAfterBytes(t *testing.T, tc *tls.Conn) {
	t.Helper()
	buf := make([]byte, 64)
	n, err := tc.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "unasked", string(buf[:n]))
	awaitClosed(tc.NetConn())
	var p peeker
	assert.True(t, p.peerClosed(tc), "killed after the record was read")
}
