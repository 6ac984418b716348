package httpguard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// echo answers the client and the body it read; slow makes it wait before answering and report
// whether its request was cancelled meanwhile.
func echo(slow time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		select {
		case <-time.After(slow):
		case <-r.Context().Done():
		}
		json.NewEncoder(w).Encode(map[string]any{"client": Client(r), "body": string(body), "cancelled": r.Context().Err() != nil})
	})
}

// serve runs h behind a guard of o on a real loopback listener and returns its port.
func serve(t *testing.T, o Options, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	g, err := New(ts.Listener.Addr(), o)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = g.Server(h, nil)
	ts.Start()
	t.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	return ts, port
}

// probe is one request and what it must get.
type probe struct {
	name, method, host, body string
	header                   map[string]string
	status                   int
	says                     string // in the answer's body
}

func (p probe) run(t *testing.T, ts *httptest.Server) map[string]any {
	t.Helper()
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, err := http.NewRequest(p.method, ts.URL+"/x", body)
	if err != nil {
		t.Fatal(err)
	}
	if p.host != "" {
		req.Host = p.host
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != p.status || !strings.Contains(string(raw), p.says) {
		t.Errorf("%s: %d %s, want %d with %q", p.name, resp.StatusCode, raw, p.status, p.says)
	}
	var out map[string]any
	json.Unmarshal(raw, &out)
	if resp.StatusCode != 200 && p.status != 200 {
		e, _ := out["error"].(map[string]any)
		if e["message"] == nil || e["status"] != float64(p.status) {
			t.Errorf("%s: refusal %s lacks error.message and error.status", p.name, raw)
		}
	}
	return out
}

func TestGuardOrigin(t *testing.T) {
	ts, port := serve(t, Options{Name: "test server"}, echo(0))
	jsonCT := map[string]string{"Content-Type": "application/json"}
	for _, p := range []probe{
		{name: "127.0.0.1", method: "POST", body: "{}", header: jsonCT, status: 200, says: `"body":"{}"`},
		{name: "localhost", method: "GET", host: "localhost:" + port, status: 200},
		{name: "LOCALHOST", method: "GET", host: "LOCALHOST:" + port, status: 200},
		{name: "[::1]", method: "GET", host: "[::1]:" + port, status: 200},
		{name: "a foreign name", method: "POST", host: "attacker.example:" + port, body: "{}", header: jsonCT, status: 403,
			says: `answers only requests for localhost:` + port + ` or a loopback address (127.0.0.1:` + port + `, any of 127.0.0.0/8, [::1]:` + port + `), not Host \"attacker.example:` + port + `\": add --allow-host NAME`},
		{name: "a rebound name", method: "GET", host: "rebind.attacker.example", status: 403, says: "localhost:" + port},
		{name: "another port", method: "GET", host: "localhost:1", status: 403, says: "--allow-host"},
		{name: "no port", method: "GET", host: "localhost", status: 403},
		{name: "a cross-site POST", method: "POST", body: "{}", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, status: 403, says: "other origins"},
		{name: "a same-site POST (another port)", method: "POST", body: "{}", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, status: 403, says: "other origins"},
		{name: "a cross-site image", method: "GET", header: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, status: 403, says: "another site's page"},
		{name: "a same-site fetch", method: "GET", header: map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, status: 403, says: "another site's page"},
		{name: "a cross-site frame", method: "GET", header: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, status: 403, says: "another site's page"},
		{name: "a cross-site link followed", method: "GET", header: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, status: 200},
		{name: "an address typed", method: "GET", header: map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, status: 200},
		{name: "its own page's image", method: "GET", header: map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}, status: 200},
		{name: "a foreign Origin", method: "POST", body: "{}", header: map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example"}, status: 403, says: "other origins"},
		{name: "its own origin", method: "POST", body: "{}", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}, status: 200},
		{name: "text/plain", method: "POST", body: "{}", header: map[string]string{"Content-Type": "text/plain"}, status: 415, says: "application/json"},
		{name: "form", method: "POST", body: "a=1", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 415},
		{name: "no content type", method: "POST", body: "{}", status: 415},
		{name: "JSON with a charset", method: "POST", body: "{}", header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, status: 200},
		{name: "a GET with a text body", method: "GET", body: "x", header: map[string]string{"Content-Type": "text/plain"}, status: 415},
		{name: "a DELETE without a body", method: "DELETE", status: 200},
	} {
		p.run(t, ts)
	}
}

func TestGuardAllowHosts(t *testing.T) {
	ts, port := serve(t, Options{AllowHosts: []string{"Env.Internal", "[fd00::1]"}}, echo(0))
	for _, p := range []probe{
		{name: "an allowed name, any port", method: "GET", host: "env.internal:80", status: 200},
		{name: "an allowed name, no port", method: "GET", host: "env.internal", status: 200},
		{name: "an allowed address", method: "GET", host: "[fd00::1]:9000", status: 200},
		{name: "another name", method: "GET", host: "other.internal", status: 403,
			says: `localhost:` + port + ` or a loopback address (127.0.0.1:` + port + `, any of 127.0.0.0/8, [::1]:` + port + `), or for env.internal or [fd00::1] on any port, not Host \"other.internal\": add --allow-host NAME to answer another name`},
	} {
		p.run(t, ts)
	}
	ts, port = serve(t, Options{AllowHosts: []string{"myhost"}}, echo(0))
	probe{name: "one allowed name", method: "GET", host: "other.internal", status: 403, says: `[::1]:` + port + `), or for myhost on any port, not`}.run(t, ts)
	ts, _ = serve(t, Options{AllowHosts: []string{"*"}}, echo(0))
	probe{name: "any", method: "GET", host: "whatever.example", status: 200}.run(t, ts)
	// A page elsewhere still cannot drive a server answering any host.
	probe{name: "any, cross-site", method: "POST", host: "whatever.example", body: "{}", header: map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, status: 403}.run(t, ts)
	for _, bad := range [][]string{{""}, {"http://x"}, {"a/b"}} {
		if _, err := New(nil, Options{AllowHosts: bad}); err == nil {
			t.Errorf("allowed hosts %q: no error", bad)
		}
	}
	if _, err := New(nil, Options{APIKeys: []string{"k", ""}}); err == nil || !strings.Contains(err.Error(), "key 2 is empty") {
		t.Errorf("an empty key: %v", err)
	}
}

func TestGuardAPIKey(t *testing.T) {
	ts, port := serve(t, Options{APIKeys: []string{"first-key", "second-key"}}, echo(0))
	bearer := func(k string) map[string]string {
		return map[string]string{"Authorization": k, "Content-Type": "application/json"}
	}
	for _, p := range []probe{
		{name: "no key", method: "GET", status: 401, says: "Authorization: Bearer"},
		{name: "a wrong key", method: "GET", header: bearer("Bearer first-keyX"), status: 401, says: "not one of its keys"},
		{name: "a prefix of a key", method: "GET", header: bearer("Bearer first"), status: 401},
		{name: "basic auth", method: "GET", header: bearer("Basic Zmlyc3Qta2V5"), status: 401},
		{name: "no key and text/plain: 401 first", method: "POST", body: "x", header: map[string]string{"Content-Type": "text/plain"}, status: 401},
		{name: "a key from a foreign Host: 403 first", method: "GET", host: "attacker.example:" + port, header: bearer("Bearer first-key"), status: 403},
		{name: "the second key", method: "POST", body: "{}", header: bearer("bearer second-key"), status: 200, says: `"client":"key 2"`},
		{name: "the first key", method: "GET", header: bearer("Bearer first-key"), status: 200, says: `"client":"key 1"`},
	} {
		p.run(t, ts)
	}
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("WWW-Authenticate %q", got)
	}
	// Without keys a client is its remote address, every loopback one the same client.
	ts, _ = serve(t, Options{}, echo(0))
	probe{name: "no keys", method: "GET", status: 200, says: `"client":"loopback"`}.run(t, ts)
}

// TestClientLoopback: every loopback address is one client; another address is its own.
func TestClientLoopback(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:4000":          LoopbackClient,
		"127.0.0.2:4000":          LoopbackClient,
		"127.255.3.9:1":           LoopbackClient,
		"[::1]:4000":              LoopbackClient,
		"[::ffff:127.0.0.3]:4000": LoopbackClient,
		"10.1.2.3:4000":           "10.1.2.3",
		"[2001:db8::1]:4000":      "2001:db8::1",
		"[::ffff:10.1.2.3]:4000":  "10.1.2.3",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		if got := Client(r); got != want {
			t.Errorf("%s: client %q, want %q", addr, got, want)
		}
	}
}

func TestGuardBody(t *testing.T) {
	ts, _ := serve(t, Options{MaxBody: 10, BodyTimeout: 300 * time.Millisecond}, echo(600*time.Millisecond))
	jsonCT := map[string]string{"Content-Type": "application/json"}
	probe{name: "over the limit", method: "POST", body: `{"a":"0123456789"}`, header: jsonCT, status: 413, says: "limit of 10"}.run(t, ts)
	// A handler running past the body timeout is not cancelled by it.
	out := probe{name: "a slow handler", method: "POST", body: `{}`, header: jsonCT, status: 200}.run(t, ts)
	if out["cancelled"] != false {
		t.Errorf("a handler running past the body timeout: %v", out)
	}

	// A body sent slower than the timeout is refused with 408 soon after it.
	addr := ts.Listener.Addr().String()
	for _, chunked := range []bool{false, true} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		head := "POST /x HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n"
		if chunked {
			fmt.Fprintf(conn, "%sTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", head)
		} else {
			fmt.Fprintf(conn, "%sContent-Length: 8\r\n\r\n{", head)
		}
		began := time.Now()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		took := time.Since(began)
		conn.Close()
		if err != nil {
			t.Fatalf("chunked %v: %v", chunked, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), "within 300ms") {
			t.Errorf("chunked %v: a stalled body: %d %s", chunked, resp.StatusCode, raw)
		}
		if took > 5*time.Second {
			t.Errorf("chunked %v: answered after %v, want about 300ms", chunked, took)
		}
	}

	// Headers not finished within HeaderTimeout: the server closes the connection.
	if testing.Short() {
		return
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: %s\r\n", addr)
	conn.SetReadDeadline(time.Now().Add(HeaderTimeout + 10*time.Second))
	began := time.Now()
	_, err = io.ReadAll(conn)
	if took := time.Since(began); err != nil || took < HeaderTimeout-time.Second || took > HeaderTimeout+5*time.Second {
		t.Errorf("stalled headers: closed after %v (%v), want %v", took, err, HeaderTimeout)
	}
}

// TestGuardValues: a body of more JSON values than MaxValues is 413 before the handler decodes
// it; commas and brackets inside strings are not values.
func TestGuardValues(t *testing.T) {
	ts, _ := serve(t, Options{MaxValues: 5}, echo(0))
	jsonCT := map[string]string{"Content-Type": "application/json"}
	probe{name: "six values", method: "POST", body: `[{},{},{},{},{}]`, header: jsonCT, status: 413, says: "more than 5 JSON values"}.run(t, ts)
	probe{name: "five values", method: "POST", body: `{"a":[1,2,3]}`, header: jsonCT, status: 200}.run(t, ts)
	probe{name: "punctuation in strings", method: "POST", body: `{"a":"[,{,[,{,\",[,{"}`, header: jsonCT, status: 200}.run(t, ts)
	if n := jsonValues([]byte(`[`+strings.Repeat(`{},`, 1000)+`{}]`), 1<<20); n != 1+1+1000+1001 {
		t.Errorf("jsonValues of 1,001 objects in a list: %d, want an upper bound of 2,003 (1 + the bracket + 1,000 commas + 1,001 braces)", n)
	}
}

// TestGuardBodiesHeld: while one request's body holds all of MaxBodies (its handler still
// running), another with a body is 503 with Retry-After at once; a request without a body is
// answered; once the first ends, a body fits again. Room is taken for bytes received, not
// claimed: connections that send a Content-Length of MaxBody and then nothing, and a small body
// sent chunked (no Content-Length), take only what arrived.
func TestGuardBodiesHeld(t *testing.T) {
	const unit = 64 << 10
	ts, _ := serve(t, Options{MaxBody: 4 * unit, MaxBodies: 4 * unit, BodyTimeout: 2 * time.Second}, echo(900*time.Millisecond))
	jsonCT := map[string]string{"Content-Type": "application/json"}
	big := `{"a":"` + strings.Repeat("x", 4*unit-10) + `"}`
	done := make(chan map[string]any)
	go func() {
		done <- probe{name: "the holder", method: "POST", body: big, header: jsonCT, status: 200}.run(t, ts)
	}()
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	probe{name: "a second body", method: "POST", body: `{}`, header: jsonCT, status: 503, says: "request bodies"}.run(t, ts)
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("refused after %v: a body that finds no room is refused at once", d)
	}
	probe{name: "no body", method: "GET", status: 200}.run(t, ts)
	<-done
	probe{name: "after the holder", method: "POST", body: `{}`, header: jsonCT, status: 200}.run(t, ts)

	// Ten connections claim MaxBody each and send nothing: a small POST is still answered.
	addr := ts.Listener.Addr().String()
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, 4*unit)
	}
	time.Sleep(200 * time.Millisecond)
	t0 = time.Now()
	probe{name: "beside bodies only claimed", method: "POST", body: `{}`, header: jsonCT, status: 200}.run(t, ts)
	if d := time.Since(t0); d > 1500*time.Millisecond {
		t.Errorf("a small POST beside claimed bodies took %v", d)
	}

	// Four small chunked bodies at once, each in a slow handler: each holds one unit, not MaxBody.
	res := make(chan string, 4)
	for range 4 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				res <- err.Error()
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", addr)
			line, _ := bufio.NewReader(c).ReadString('\n')
			res <- strings.TrimSpace(line)
		}()
	}
	for range 4 {
		if line := <-res; line != "HTTP/1.1 200 OK" {
			t.Errorf("a small chunked body beside three others: %q, want 200", line)
		}
	}
}
