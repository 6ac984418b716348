package teachers_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oaitest"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/teachers"
)

// benchReply is a typical teacher turn: 1.5 kB of reasoning and a short SQL answer.
func benchReply(oaitest.Request) oaitest.Response {
	return oaitest.Response{
		Think:   strings.Repeat("The question asks for a count of the rows that match; join on the key. ", 21),
		Content: "<sql>SELECT count(*) FROM customer c JOIN orders o ON o.customer_id = c.id</sql>",
	}
}

// BenchmarkStreamVsPlain compares plain and streamed requests through teachers.Client against the local
// fake server in vLLM's wire shape (reasoning in message.reasoning; the stream in deltas of 8
// bytes, about two tokens, as vLLM sends them). Server and client share the process, so the
// figure includes the server's work for each mode. Run both in one invocation (-count 6) and
// compare with benchstat.
func BenchmarkStreamVsPlain(b *testing.B) {
	for _, mode := range []string{"plain", "stream"} {
		b.Run(mode, func(b *testing.B) {
			srv := oaitest.NewServer(b, benchReply, oaitest.WithPersonality(oaitest.Personalities["vllm"]),
				oaitest.WithModels("test-model"), oaitest.WithoutBodies())
			c := newClient(b, endpoint(srv, func(e *teachers.Endpoint) {
				e.Provider, e.Stream, e.MaxConcurrency = teachers.ProviderVLLM, mode == "stream", 64
			}))
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rep, err := c.Chat(context.Background(), question, chat.Options{})
					if err != nil || len(rep.Reasoning) != 1491 {
						b.Errorf("reply: %d bytes of reasoning, %v", len(rep.Reasoning), err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// helperServerEnv makes TestHelperStreamServer serve instead of skipping.
const helperServerEnv = "CHAINEDSQL_TEACHERS_HELPER_SERVER"

// TestHelperStreamServer is the fake server of BenchmarkStreamsInFlight, run in a process of
// its own so that the benchmark's peak RSS is the client's alone: vLLM's shape, each stream
// 2 kB of reasoning in 16-byte deltas, 8 ms apart (about 1.3 s a reply). It prints the base
// URL and serves until its stdin closes.
func TestHelperStreamServer(t *testing.T) {
	if os.Getenv(helperServerEnv) != "1" {
		t.Skip("helper process of BenchmarkStreamsInFlight")
	}
	p := oaitest.Personalities["vllm"]
	p.ChunkBytes, p.ChunkDelay = 16, 8*time.Millisecond
	srv := oaitest.NewServer(t, func(r oaitest.Request) oaitest.Response {
		resp := oaitest.Response{Think: strings.Repeat("reasoning ", 200), Content: "<sql>SELECT 1</sql>"}
		if !r.Stream {
			resp.Delay = 1300 * time.Millisecond // as long as a stream of the same reply
		}
		return resp
	}, oaitest.WithPersonality(p), oaitest.WithModels("test-model"), oaitest.WithoutBodies())
	fmt.Printf("URL=%s\n", srv.BaseURL())
	io.Copy(io.Discard, os.Stdin)
}

// BenchmarkStreamsInFlight measures the client's peak memory with 2,000 conversations in
// flight at once against a server in another process, streamed and (for reference) plain,
// waiting as long for the whole reply. It reports the peak resident set of the benchmark
// process over the run (VmHWM after resetting it) and the most requests the client had in
// flight. Run it with -benchtime 1x.
func BenchmarkStreamsInFlight(b *testing.B) {
	for _, mode := range []string{"stream", "plain"} {
		b.Run(mode, func(b *testing.B) { benchInFlight(b, mode == "stream") })
	}
}

func benchInFlight(b *testing.B, stream bool) {
	const n = 2000
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStreamServer$", "-test.v")
	cmd.Env = append(os.Environ(), helperServerEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var base string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "URL="); ok {
			base = u
			break
		}
	}
	if base == "" {
		b.Fatal("the helper server printed no URL")
	}
	go io.Copy(io.Discard, out)
	c, err := teachers.New(teachers.Endpoint{Name: "bench", BaseURL: base, Model: "test-model", Provider: teachers.ProviderVLLM,
		Stream: stream, MaxConcurrency: n, Timeout: time.Minute, MaxRetries: 0})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	debug.FreeOSMemory()                                  // what earlier benchmarks left behind
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM (Linux); the figure is then this run's peak
	before := shared.PeakRSS()
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msgs := []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprintf("conversation %d", i)}}
				if _, err := c.Chat(context.Background(), msgs, chat.Options{}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	st := c.Stats()
	b.ReportMetric(float64(shared.PeakRSS())/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(before)/(1<<20), "start-RSS-MiB")
	b.ReportMetric(float64(st.MaxInFlight), "max-in-flight")
}
