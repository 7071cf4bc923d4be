package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of Config's connection limits.
const (
	DefaultReadTimeout = time.Minute
	DefaultIdleTimeout = time.Minute
	DefaultMaxConns    = 1024
)

// Probe connections: past Config.MaxConns the server still accepts up to
// probeConns connections, which may only ask the probe paths (others get
// 503) and are closed after one response or probeTimeout. Beyond them new
// connections are closed at once, so that idle or slow clients can neither
// exhaust the process's descriptors nor keep /health from answering.
const (
	probeConns   = 64
	probeTimeout = 10 * time.Second
)

// probePaths are the routes a probe connection may ask.
var probePaths = map[string]bool{"/health": true, "/ready": true, "/metrics": true}

// connLimiter is a listener that counts the connections it hands out and
// marks those past max as probe connections (see probeConns).
type connLimiter struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   int // connections being served, probes excluded
	probes int
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		switch {
		case l.open < l.max:
			l.open++
			l.mu.Unlock()
			return &limitedConn{Conn: c, l: l}, nil
		case l.probes < probeConns:
			l.probes++
			l.mu.Unlock()
			_ = c.SetDeadline(time.Now().Add(probeTimeout))
			return &limitedConn{Conn: c, l: l, probe: true}, nil
		}
		l.mu.Unlock()
		c.Close()
	}
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l     *connLimiter
	probe bool
	once  sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.probe {
			c.l.probes--
		} else {
			c.l.open--
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// probeKey marks the context of a request on a probe connection.
type probeKey struct{}

// connContext is http.Server's ConnContext: it marks probe connections.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok && lc.probe {
		return context.WithValue(ctx, probeKey{}, true)
	}
	return ctx
}

func onProbeConn(r *http.Request) bool {
	v, _ := r.Context().Value(probeKey{}).(bool)
	return v
}

// errTooManyConns refuses a request of a probe connection to a path other
// than the probes'.
func errTooManyConns(retry int) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "too_many_connections",
		Message: "the server has too many open connections (--max-conns); retry later", RetryAfter: retry}
}

// closeUnread makes the server close the connection after a response that
// leaves the request body unread: net/http would otherwise read (and wait
// for) up to 256 KiB of it to reuse the connection, so a client that never
// sends its body would hold the connection until the read timeout.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// limitBody gives the client ReadTimeout to send the request body: a body
// read past it fails (decodeBody answers 408). net/http lifts the deadline
// when the body has been read to its end, before it watches the connection
// for the client going away, so a long response is not cut by it
// (TestReadTimeoutSparesLongStreams).
func (s *Server) limitBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return // no body to wait for; the headers had ReadHeaderTimeout
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
}

// isTimeout reports whether err is a read that ran past its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
