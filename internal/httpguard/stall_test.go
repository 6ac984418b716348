package httpguard

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGuardWriteStall: a client that reads none of a reply no longer holds its handler in a
// write forever: a handler streaming small flushed pieces and one writing megabytes see their
// write fail within a few WriteStall, and return; a client that reads the reply slowly, longer
// in all than WriteStall, gets all of it. Without the stall deadline both handlers were still
// writing when the test gave up, their connection's send queue full. The write's error says
// why: the bare "write tcp A->B: i/o timeout" in a server's log did not.
func TestGuardWriteStall(t *testing.T) {
	const stall = time.Second
	ended := make(chan string, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		piece := []byte("data: " + strings.Repeat("x", 1000) + "\n\n")
		for {
			if _, err := w.Write(piece); err != nil {
				ended <- "stream: " + err.Error()
				return
			}
			http.NewResponseController(w).Flush()
		}
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("y"), 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- "big: " + err.Error()
				return
			}
		}
	})
	const size = 16 << 20
	mux.HandleFunc("GET /reply", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("z"), size))
	})
	ts, _ := serve(t, Options{WriteStall: stall}, mux)
	addr := strings.TrimPrefix(ts.URL, "http://")
	for _, path := range []string{"/stream", "/big"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr) // and read nothing
	}
	for range 2 {
		select {
		case e := <-ended:
			if !strings.Contains(e, "timeout") || !strings.Contains(e, "reply cut: a piece of it (at most 64 KiB) waited over 1s for the client to read, which stopped reading or reads slower than that") {
				t.Errorf("a handler's write to a client reading nothing: %s; want the stall named", e)
			}
		case <-time.After(20 * stall):
			t.Fatalf("after %v a handler still writes to a client reading nothing", 20*stall)
		}
	}
	// A slow reader: 16 MiB, more than the sockets' buffers hold, at 1 MiB each 150 ms: about
	// 2.4 s, more than the stall.
	resp, err := http.Get(ts.URL + "/reply")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	buf := make([]byte, 1<<20)
	for {
		time.Sleep(150 * time.Millisecond)
		m, err := io.ReadFull(resp.Body, buf)
		n += m
		if err != nil {
			break
		}
	}
	if n != size {
		t.Errorf("a slow reader got %d bytes of %d", n, size)
	}
	// A kept-alive connection idle past the stall still gets net/http's own answer to its next,
	// malformed, request (net/http drops a reply's write deadline once the reply is done).
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /stream-none HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, first.Body)
	first.Body.Close()
	time.Sleep(stall + stall/2)
	io.WriteString(c, "NOT A REQUEST\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := br.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Errorf("a malformed request on a connection idle past the stall: %q, %v", line, err)
	}
}
