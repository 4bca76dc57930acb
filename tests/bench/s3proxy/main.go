// s3proxy: a remote link for tests/bench/bench_s3.py, in front of a local S3 server (this
// kernel has no netem): every request waits -delay before it is forwarded, every new
// connection -delay more (its handshake's round trip), and all response bodies share one
// token bucket of -rate bits/s (a link's capacity, shared by every connection, first
// come first served in chunks of 16 KiB). Go's standard library only; the bench builds it
// with `go build` into its scratch folder.
//
//	s3proxy -listen 127.0.0.1:0 -upstream http://127.0.0.1:PORT -delay 20ms -rate 400e6
//
// Prints "listening HOST:PORT" on stdout once it accepts connections.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"
)

// link: the shared bucket, as a schedule: a chunk of n bytes leaves at the later of now
// and the end of the chunk before it, and takes n/rate seconds.
type link struct {
	mu   sync.Mutex
	next time.Time
	bps  float64 // bytes per second
}

func (l *link) take(n int) {
	l.mu.Lock()
	now := time.Now()
	start := l.next
	if start.Before(now) {
		start = now
	}
	l.next = start.Add(time.Duration(float64(n) / l.bps * float64(time.Second)))
	end := l.next
	l.mu.Unlock()
	if d := time.Until(end); d > 0 {
		time.Sleep(d)
	}
}

type slowBody struct {
	r io.ReadCloser
	l *link
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(p) > 16<<10 {
		p = p[:16<<10]
	}
	n, err := b.r.Read(p)
	if n > 0 {
		b.l.take(n)
	}
	return n, err
}

func (b *slowBody) Close() error { return b.r.Close() }

// delayConn: a new connection's first read waits one more delay (its handshake).
type delayConn struct {
	net.Conn
	once  sync.Once
	delay time.Duration
}

func (c *delayConn) Read(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Read(p)
}

type delayListener struct {
	net.Listener
	delay time.Duration
}

func (l delayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &delayConn{Conn: c, delay: l.delay}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the S3 server's URL")
	delay := flag.Duration("delay", 20*time.Millisecond, "added to each request")
	rate := flag.Float64("rate", 400e6, "bits per second shared by all responses")
	flag.Parse()
	up, err := url.Parse(*upstream)
	if err != nil || *upstream == "" {
		log.Fatalf("s3proxy: -upstream URL needed")
	}
	l := &link{bps: *rate / 8}
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	proxy.ModifyResponse = func(r *http.Response) error {
		r.Body = &slowBody{r: r.Body, l: l}
		return nil
	}
	// the signature covers the Host header: keep the client's
	director := proxy.Director
	proxy.Director = func(r *http.Request) {
		host := r.Host
		director(r)
		r.Host = host
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(*delay)
		proxy.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("s3proxy: %v", err)
	}
	fmt.Fprintf(os.Stdout, "listening %s\n", ln.Addr())
	os.Stdout.Sync()
	log.Fatal(http.Serve(delayListener{ln, *delay}, handler))
}
