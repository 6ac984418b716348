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
// rebound name loads the server's own page; and it loads an image, a no-cors fetch and a frame
// of a GET the server acts on. None reaches the handler; a link followed from that page to the
// server, and the server's own page, still do. It skips without Chromium ($CHAINEDSQL_CHROMIUM, else chromium on PATH).
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
	var got atomic.Int32 // GETs of /act, which acts as curate view's /api/results does (runs SQL)
	target.HandleFunc("GET /act", func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "image/gif")
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
	// A page elsewhere makes GETs it cannot read but the server would act on: an image, a no-cors
	// fetch, a frame. None reaches the handler.
	act := "http://127.0.0.1:" + port + "/act"
	for _, origin := range []string{"http://attacker.test:" + attackerPort, attacker.URL} {
		run(chromedp.Navigate(origin + "/"))
		eval(fmt.Sprintf(`new Promise(done => { const i = new Image(); i.onload = i.onerror = () => done("img"); i.src = %q + "?img"; })`, act))
		eval(fmt.Sprintf(`fetch(%q + "?fetch", {mode: "no-cors"}).then(() => "fetched", e => "error: " + e.message)`, act))
		eval(fmt.Sprintf(`new Promise(done => { const f = document.createElement("iframe"); f.onload = () => done("frame"); f.src = %q + "?frame"; document.body.appendChild(f); setTimeout(() => done("frame timeout"), 5000); })`, act))
		if n := got.Load(); n != 0 {
			t.Fatalf("from %s: the GET handler ran %d times for another site's image, fetch or frame", origin, n)
		}
	}
	// A link from another site to the server's page opens it in the tab.
	run(chromedp.Navigate(attacker.URL + "/"))
	eval(fmt.Sprintf(`(() => { const a = document.createElement("a"); a.href = %q; document.body.appendChild(a); a.click(); return "clicked"; })()`, act+"?link"))
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := got.Load(); n != 1 {
		t.Errorf("a link followed from another site reached the handler %d times, want 1", n)
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
