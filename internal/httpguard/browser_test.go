package httpguard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserOtherOrigin puts headless Chromium where the attack happens: a page of another
// origin (attacker.test, resolved to 127.0.0.1, and 127.0.0.1 on another port) tries to POST to
// a guarded server on 127.0.0.1, as a simple text/plain request and as JSON (preflighted), and a
// rebound name loads the server's own page. None reaches the handler; the server's own page
// still can. It skips without Chromium ($CHAINEDSQL_CHROMIUM, else chromium on PATH).
func TestBrowserOtherOrigin(t *testing.T) {
	exe := os.Getenv("CHAINEDSQL_CHROMIUM")
	if exe == "" {
		var err error
		if exe, err = exec.LookPath("chromium"); err != nil {
			t.Skip("no Chromium: install Debian's chromium or set CHAINEDSQL_CHROMIUM")
		}
	}
	var ran atomic.Int32
	target := http.NewServeMux()
	target.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>own</title><p>the server's own page</p>")
	})
	target.HandleFunc("POST /x", func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ran": true}`)
	})
	guarded, port := serve(t, Options{Name: "test server"}, target)
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>elsewhere</title><p>a page elsewhere</p>")
	}))
	defer attacker.Close()
	_, attackerPort, _ := strings.Cut(strings.TrimPrefix(attacker.URL, "http://"), ":")

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("host-resolver-rules", "MAP attacker.test 127.0.0.1"), chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The browser starts with the first action, on bctx itself: a context derived for one
	// action would take the browser down when cancelled.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	run := func(a chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	// post is a page's fetch to url: the status it may read, "opaque", or the error.
	post := func(url, contentType, mode string) string {
		return eval(fmt.Sprintf(`fetch(%q, {method: "POST", mode: %q, headers: {"Content-Type": %q}, body: "{}"})
			.then(r => r.type === "opaque" ? "opaque" : String(r.status), e => "error: " + e.message)`, url, mode, contentType))
	}
	target127 := "http://127.0.0.1:" + port + "/x"
	for _, origin := range []string{"http://attacker.test:" + attackerPort, attacker.URL} {
		run(chromedp.Navigate(origin + "/"))
		for _, c := range []struct{ ct, mode string }{{"text/plain", "no-cors"}, {"application/json", "cors"}, {"text/plain", "cors"}} {
			got := post(target127, c.ct, c.mode)
			if n := ran.Load(); n != 0 {
				t.Fatalf("from %s, %s %s: the handler ran (%s)", origin, c.ct, c.mode, got)
			}
			if got == "200" {
				t.Errorf("from %s, %s %s: the page read 200", origin, c.ct, c.mode)
			}
		}
	}
	// DNS rebinding: the attacker's name on the server's port loads nothing of the server.
	run(chromedp.Navigate("http://attacker.test:" + port + "/page"))
	if body := eval(`Promise.resolve(document.body.innerText)`); !strings.Contains(body, "--allow-host") || strings.Contains(body, "own page") {
		t.Errorf("a rebound name: %q", body)
	}
	if got := post("http://attacker.test:"+port+"/x", "application/json", "cors"); got != "403" || ran.Load() != 0 {
		t.Errorf("a rebound name's own POST: %s (handler ran %d times)", got, ran.Load())
	}
	// The server's own page can.
	run(chromedp.Navigate(guarded.URL + "/page"))
	if got := post(guarded.URL+"/x", "application/json", "cors"); got != "200" || ran.Load() != 1 {
		t.Errorf("its own page: %s (handler ran %d times)", got, ran.Load())
	}
}
