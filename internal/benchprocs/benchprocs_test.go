package benchprocs

import (
	"flag"
	"runtime"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, list := range []string{"", "2", "1", "2,2", "2,1,2", " 1, 2 ,1", "4,2,1,4"} {
		if err := Check(list); err != nil {
			t.Errorf("Check(%q) = %v, want nil", list, err)
		}
	}
	for _, tc := range []struct{ list, want string }{
		{"2,1", "first row (-2) would run with GOMAXPROCS 1"},
		{"1,2", "(-cpu 1,2,1)"},
		{"1,2,4", "GOMAXPROCS 4"},
		{"2,x", `"2,x"`},
		{"2,1,", "(-cpu 2,1,2)"},
	} {
		err := Check(tc.list)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want an error containing %q", tc.list, err, tc.want)
		}
	}
}

// TestThreads: under go test's own -test.cpu (one value by default) Threads passes and returns
// GOMAXPROCS (a list Check refuses skips: Threads would fail, as it should in a benchmark).
func TestThreads(t *testing.T) {
	if f := flag.Lookup("test.cpu"); f != nil && Check(f.Value.String()) != nil {
		t.Skipf("-test.cpu %s: Threads refuses it", f.Value)
	}
	if got := Threads(t); got != runtime.GOMAXPROCS(0) {
		t.Errorf("Threads = %d, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
}
