// Package httpguard is the front door of the toolkit's HTTP servers (distill env serve, student
// serve, curate view): it answers only requests for the server's own origin, so that a web page
// in the user's browser can neither drive a server on localhost nor read its replies through a
// DNS name pointed at 127.0.0.1. In order, a request is refused
//
//   - 403 when its Host is not a loopback name with the listening port (localhost, or an IP
//     literal of the loopback: 127.0.0.0/8, [::1], IPv4-mapped; no DNS name can rebind
//     to those) nor a name of Options.AllowHosts;
//   - 403 when a browser says it comes from another origin (Sec-Fetch-Site, else Origin) on a
//     method that is not GET, HEAD or OPTIONS;
//   - 403 when a browser says it comes from another site (Sec-Fetch-Site cross-site or
//     same-site: another port of localhost too) and it is not the load of a page in a tab
//     (Sec-Fetch-Mode navigate, Sec-Fetch-Dest document): an <img>, <script>, <iframe> or no-cors
//     fetch on another site's page sends a GET the page cannot read but the server acts on (curate
//     view ran a row's final and gold SQL for one), and a page framed elsewhere can be clicked
//     through (a browser too old to send Sec-Fetch-Site is not stopped here);
//   - 401 when Options.APIKeys are set and it lacks "Authorization: Bearer KEY" with one of them;
//   - 415 when it carries a body (POST, PUT, PATCH, or any method with one) whose Content-Type is
//     not application/json (a browser sends text/plain across origins without asking first);
//   - 413 when its body is over Options.MaxBody, or holds more JSON values than
//     Options.MaxValues (each value a decoder makes into a Go value costs tens of bytes, so
//     a body of "[{},{},…]" becomes tens of times its size in memory), 408 when the body does
//     not arrive within Options.BodyTimeout;
//   - 503 with Retry-After when the bodies of the requests in hand already hold
//     Options.MaxBodies bytes: a body takes room as its bytes arrive (what a request only
//     claims in its Content-Length takes none) and keeps it until its handler returns, so many
//     clients sending large bodies at once cannot take the server's memory.
//
// A reply's write that the client takes none of within Options.WriteStall fails, so that a
// client that stops reading cannot hold a handler, and what it holds, for good.
//
// Server puts a handler behind the guard on an http.Server with header and idle timeouts.
// Client names the client a request comes from, for per-client limits. Any package serving HTTP
// may import this one.
package httpguard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KeyEnv is the environment variable holding the servers' API keys (comma-separated) when
// --api-key is not given.
const KeyEnv = "CHAINEDSQL_API_KEY"

// Defaults of Options and of Server's timeouts.
const (
	DefaultMaxBody     = 8 << 20
	DefaultBodyTimeout = 60 * time.Second
	// HeaderTimeout bounds reading a request's line and headers.
	HeaderTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive connection idle this long.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
	// DefaultMaxValues is Options.MaxValues' default: a chat request whose logit_bias names
	// every token of a 152k vocabulary holds about 300,000.
	DefaultMaxValues = 1 << 20
	// DefaultMaxBodies is Options.MaxBodies' default.
	DefaultMaxBodies = 256 << 20
	// DefaultWriteStall is Options.WriteStall's default.
	DefaultWriteStall = time.Minute
)

// Options configure New.
type Options struct {
	// Name is the server's name in refusals ("distill env serve").
	Name string
	// AllowHosts are host names answered beside the loopback names, on any port ("*": every
	// host). A name is compared case-insensitively, without its port; an IPv6 address is
	// written without brackets or with them.
	AllowHosts []string
	// APIKeys, when not empty, are the bearer tokens a request must carry; each key is its
	// own client (Client).
	APIKeys []string
	// MaxBody caps a request body in bytes (default DefaultMaxBody).
	MaxBody int64
	// BodyTimeout bounds reading a request body (default DefaultBodyTimeout).
	BodyTimeout time.Duration
	// MaxValues caps the JSON values of a request body (default DefaultMaxValues).
	MaxValues int
	// MaxBodies caps the bytes of the bodies of the requests in hand together (default
	// DefaultMaxBodies, and never below MaxBody).
	MaxBodies int64
	// WriteStall bounds how long writing a reply may wait on a client that takes none of it
	// (default DefaultWriteStall): each write, of at most stallChunk bytes, and the reply's last
	// flush after the handler returns, must reach the connection within it, else the write
	// fails and the handler, which sees the error, ends. A reply may take any time in all.
	WriteStall time.Duration
}

// Guard checks requests before a handler sees them. Create it with New.
type Guard struct {
	name     string
	port     string
	anyHost  bool
	hosts    map[string]bool
	answers  string // the names it answers, for the 403 of another
	keys     [][sha256.Size]byte
	maxBody  int64
	bodyWait time.Duration
	cross    *http.CrossOriginProtection
	values   int
	bodies   chan struct{} // one token per byte would be too many: one per bodyUnit of MaxBodies
	stall    time.Duration
}

// bodyUnit is the granularity of Options.MaxBodies: a body takes ⌈bytes/bodyUnit⌉ tokens.
const bodyUnit = 64 << 10

// New returns the guard of a server listening on addr (its port is the one loopback names must
// carry). It refuses an empty API key or host name.
func New(addr net.Addr, o Options) (*Guard, error) {
	g := &Guard{name: o.Name, hosts: map[string]bool{}, maxBody: o.MaxBody, bodyWait: o.BodyTimeout, cross: http.NewCrossOriginProtection()}
	if g.name == "" {
		g.name = "this server"
	}
	if g.maxBody <= 0 {
		g.maxBody = DefaultMaxBody
	}
	if g.bodyWait <= 0 {
		g.bodyWait = DefaultBodyTimeout
	}
	if g.values = o.MaxValues; g.values <= 0 {
		g.values = DefaultMaxValues
	}
	if g.stall = o.WriteStall; g.stall <= 0 {
		g.stall = DefaultWriteStall
	}
	bodies := o.MaxBodies
	if bodies <= 0 {
		bodies = DefaultMaxBodies
	}
	g.bodies = make(chan struct{}, units(max(bodies, g.maxBody)))
	if addr != nil {
		if _, port, err := net.SplitHostPort(addr.String()); err == nil {
			g.port = port
		}
	}
	for _, h := range o.AllowHosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(h), "["), "]"))
		switch {
		case h == "":
			return nil, errors.New("httpguard: an empty host name in the allowed hosts")
		case h == "*":
			g.anyHost = true
		case strings.ContainsAny(h, "/ "):
			return nil, fmt.Errorf("httpguard: allowed host %q: want a host name or address, without scheme or path", h)
		}
		g.hosts[h] = true
	}
	g.answers = g.answered()
	for i, k := range o.APIKeys {
		if k == "" {
			return nil, fmt.Errorf("httpguard: API key %d is empty", i+1)
		}
		g.keys = append(g.keys, sha256.Sum256([]byte(k)))
	}
	g.cross.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.refuse(w, http.StatusForbidden, "cross_origin", fmt.Sprintf("%s refuses %s requests from other origins (Origin %q, Sec-Fetch-Site %q): a web page cannot drive it",
			g.name, r.Method, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")))
	}))
	return g, nil
}

// Keys reports whether the guard requires an API key.
func (g *Guard) Keys() bool { return len(g.keys) > 0 }

// Loopback reports whether addr is on the loopback interface (so that the loopback names are
// the ones its clients use).
func Loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// Server returns an http.Server serving h behind g, with the header, idle and header-size
// limits of this package. Writes have no deadline: a streamed reply may take minutes.
func (g *Guard) Server(h http.Handler, logger *log.Logger) *http.Server {
	return &http.Server{
		Handler:           g.Handler(h),
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          logger,
	}
}

type clientKey struct{}

// LoopbackClient is Client's name for every request from a loopback address.
const LoopbackClient = "loopback"

// Client names the client r comes from, for per-client limits: "key N" for the Nth API key
// (counted from 1) when the guard requires keys, else LoopbackClient for a loopback address
// (any of 127.0.0.0/8, ::1, IPv4-mapped: one machine, as the Host check takes it, and a process
// on it picks any of those addresses at will), else the remote IP address (an IPv4-mapped one
// as IPv4). A name a request gives itself (a header) is not used: it would let one client pass
// for many.
func Client(r *http.Request) string {
	if c, ok := r.Context().Value(clientKey{}).(string); ok {
		return c
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.IsLoopback():
		return LoopbackClient
	}
	return ip.String() // an IPv4-mapped address as the IPv4 one
}

// KeyClient returns Client's name for r ("key N") and true when the guard let r in by its Nth
// API key, else "" and false (the guard requires no keys): a server that keeps things a
// client made answers only the key that made them.
func KeyClient(r *http.Request) (string, bool) {
	c, ok := r.Context().Value(clientKey{}).(string)
	return c, ok
}

// Handler returns h behind the checks of the package comment. The body h reads has been read
// whole, within the body timeout and the size limit.
func (g *Guard) Handler(h http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, ok := g.authorize(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="chainedsql"`)
			msg := fmt.Sprintf("%s needs \"Authorization: Bearer KEY\" with a key given by --api-key or $%s", g.name, KeyEnv)
			if r.Header.Get("Authorization") != "" {
				msg = fmt.Sprintf("%s: the bearer token is not one of its keys (--api-key or $%s)", g.name, KeyEnv)
			}
			g.refuse(w, http.StatusUnauthorized, "unauthorized", msg)
			return
		}
		if hasBody(r) {
			if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
				g.refuse(w, http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf("Content-Type %q: %s takes application/json request bodies", ct, g.name))
				return
			}
			release, ok := g.readBody(w, r)
			if !ok {
				return
			}
			defer release()
		}
		if client != "" {
			r = r.WithContext(context.WithValue(r.Context(), clientKey{}, client))
		}
		h.ServeHTTP(w, r)
	})
	protected := g.cross.Handler(inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: g.stall}
		sw.arm()       // a 100 Continue that net/http writes when the body is read
		defer sw.arm() // the flush net/http makes after the handler returns
		w = sw
		if !g.hostAllowed(r.Host) {
			g.refuse(w, http.StatusForbidden, "host_not_allowed", fmt.Sprintf("%s answers only requests for %s, not Host %q: add --allow-host NAME to answer another name",
				g.name, g.answers, r.Host))
			return
		}
		// Other methods from another origin are the cross-origin protection's to refuse.
		safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
		if site := r.Header.Get("Sec-Fetch-Site"); safe && (site == "cross-site" || site == "same-site") && !pageLoad(r) {
			g.refuse(w, http.StatusForbidden, "cross_site", fmt.Sprintf("%s refuses requests another site's page makes (Sec-Fetch-Site %q, Sec-Fetch-Mode %q, Sec-Fetch-Dest %q): a web page cannot drive it; open its pages in a tab of their own",
				g.name, site, r.Header.Get("Sec-Fetch-Mode"), r.Header.Get("Sec-Fetch-Dest")))
			return
		}
		protected.ServeHTTP(w, r)
	})
}

// stallChunk is the most bytes a stallWriter hands the connection under one deadline.
const stallChunk = 64 << 10

// stallWriter is a ResponseWriter whose every write must reach the connection within stall of
// its start (Options.WriteStall): a client that reads none of a streamed reply otherwise held
// its handler in a write forever, and with it what the handler held (student serve's retired
// weights, which a reload then never released). A large write goes out in stallChunk pieces,
// each with its own deadline, so that a slow client that takes the reply stays served.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

// arm sets the connection's write deadline stall from now (a ResponseRecorder has none).
func (s *stallWriter) arm() { s.rc.SetWriteDeadline(time.Now().Add(s.stall)) }

func (s *stallWriter) WriteHeader(code int) {
	s.arm()
	s.ResponseWriter.WriteHeader(code)
}

func (s *stallWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), stallChunk)
		s.arm()
		m, err := s.ResponseWriter.Write(p[:c])
		n += m
		if err != nil {
			return n, s.stalled(err)
		}
		p = p[c:]
	}
	return n, nil
}

// stalled is err, a failed write, saying why when it is the stall deadline's: the bare "write
// tcp A->B: i/o timeout" that a server's log would show does not tell a client that stopped
// reading from a network fault.
func (s *stallWriter) stalled(err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return fmt.Errorf("reply cut: a piece of it (at most %d KiB) waited over %v for the client to read, which stopped reading or reads slower than that: %w", stallChunk>>10, s.stall, err)
}

// Flush sends what is buffered within the deadline, as http.Flusher.
func (s *stallWriter) Flush() {
	s.arm()
	s.rc.Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// pageLoad reports whether r is a browser loading a page into a tab or window of its own (a link
// followed, an address typed): a GET or HEAD navigation whose destination is a document.
func pageLoad(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

// answered lists the names g answers: the loopback names with its port, then the allowed
// hosts (IPv6 addresses in brackets) on any port.
func (g *Guard) answered() string {
	s := fmt.Sprintf("localhost:%s or a loopback address (127.0.0.1:%s, any of 127.0.0.0/8, [::1]:%s)", g.port, g.port, g.port)
	if len(g.hosts) == 0 {
		return s
	}
	var names []string
	for _, h := range slices.Sorted(maps.Keys(g.hosts)) {
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		names = append(names, h)
	}
	list := names[len(names)-1]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + list
	}
	return s + ", or for " + list + " on any port"
}

// hostAllowed reports whether a Host header names this server.
func (g *Guard) hostAllowed(hostport string) bool {
	if g.anyHost {
		return true
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "80"
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if g.hosts[host] {
		return true
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return g.port == "" || port == g.port
}

// authorize checks r's bearer token and returns the client it names ("" without keys).
func (g *Guard) authorize(r *http.Request) (string, bool) {
	if len(g.keys) == 0 {
		return "", true
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := 0
	for i, k := range g.keys {
		// Every key is compared, in constant time, so the time taken says nothing of which.
		if subtle.ConstantTimeCompare(sum[:], k[:]) == 1 && found == 0 {
			found = i + 1
		}
	}
	if found == 0 {
		return "", false
	}
	return "key " + strconv.Itoa(found), true
}

// hasBody reports whether r carries a body or is a method that does.
func hasBody(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// isJSON reports whether a Content-Type is application/json, with any parameters.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// readBody reads r's body whole within the body timeout, the size limit and the room among the
// bodies in hand, and gives it back to r; release gives its room back once the handler is done.
// On failure it answers the request and returns false.
func (g *Guard) readBody(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	if r.ContentLength > g.maxBody {
		g.refuse(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body of %d bytes is over %s's limit of %d", r.ContentLength, g.name, g.maxBody))
		return nil, false
	}
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(g.bodyWait)) == nil // a ResponseRecorder has none
	// MaxBytesReader tells net/http's own writer to close the connection after the reply.
	base := w
	if sw, ok := w.(*stallWriter); ok {
		base = sw.ResponseWriter
	}
	room := &roomReader{r: http.MaxBytesReader(base, r.Body, g.maxBody), bodies: g.bodies}
	release = room.release
	body, err := io.ReadAll(room)
	if deadline {
		rc.SetReadDeadline(time.Time{}) // the handler may run long (net/http clears it too once the body ends)
	}
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, errNoRoom):
		release()
		w.Header().Set("Connection", "close") // the rest of the body is not read
		w.Header().Set("Retry-After", "1")
		g.refuse(w, http.StatusServiceUnavailable, "server_busy", fmt.Sprintf("%s holds as many request bodies as it may (%d KiB): try again", g.name, cap(g.bodies)*bodyUnit>>10))
		return nil, false
	case errors.As(err, &tooBig):
		release()
		g.refuse(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body over %s's limit of %d bytes", g.name, g.maxBody))
		return nil, false
	case errors.As(err, &ne) && ne.Timeout():
		release()
		w.Header().Set("Connection", "close")
		g.refuse(w, http.StatusRequestTimeout, "request_timeout", fmt.Sprintf("request body not received within %s", g.bodyWait))
		return nil, false
	case err != nil:
		release()
		g.refuse(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("reading the request body: %v", err))
		return nil, false
	}
	if n := jsonValues(body, g.values); n > g.values {
		release()
		g.refuse(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body holds more than %d JSON values, %s's limit", g.values, g.name))
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return release, true
}

// units is the tokens of g.bodies n bytes take.
func units(n int64) int { return int((n + bodyUnit - 1) / bodyUnit) }

// errNoRoom ends a body's read when the bodies in hand hold all of Options.MaxBodies.
var errNoRoom = errors.New("no room for the request body")

// roomReader reads a body, taking a token of bodies for each bodyUnit of the bytes read as they
// arrive, without waiting: when none is free it fails with errNoRoom. A body so takes room for
// what it sent, not for what its Content-Length claims (a client that sends headers and then
// nothing holds none), and no reader waits on another's part (none can deadlock).
type roomReader struct {
	r      io.Reader
	bodies chan struct{}
	n      int64 // bytes read
	held   int   // tokens taken
}

func (rr *roomReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	rr.n += int64(n)
	for rr.held < units(rr.n) {
		select {
		case rr.bodies <- struct{}{}:
			rr.held++
		default:
			return n, errNoRoom
		}
	}
	return n, err
}

// release gives back the tokens taken.
func (rr *roomReader) release() {
	for ; rr.held > 0; rr.held-- {
		<-rr.bodies
	}
}

// jsonValues counts the values of the JSON text b, stopping past limit: every value but a
// container's first follows a comma, a container's first follows its bracket, so commas,
// opening brackets and the top-level value, outside strings, bound them from above.
func jsonValues(b []byte, limit int) int {
	n, str, esc := 1, false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case str:
			switch c {
			case '\\':
				esc = true
			case '"':
				str = false
			}
		case c == '"':
			str = true
		case c == ',' || c == '[' || c == '{':
			if n++; n > limit {
				return n
			}
		}
	}
	return n
}

// refusal is the body of a refused request: the fields of both OpenAI's error shape (message,
// type, code) and the env's (status, message), so every client of the servers reads it.
type refusal struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
		Status  int    `json:"status"`
	} `json:"error"`
}

func (g *Guard) refuse(w http.ResponseWriter, status int, code, msg string) {
	var e refusal
	e.Error.Message, e.Error.Code, e.Error.Status = msg, code, status
	e.Error.Type = "invalid_request_error"
	if status == http.StatusUnauthorized {
		e.Error.Type = "authentication_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(e) // a failed write means the client went away
}
