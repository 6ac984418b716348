package plural

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 episodes"}, {1, "1 episode"}, {2, "2 episodes"}, {-1, "-1 episodes"}} {
		if got := Count(c.n, "episode"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCountInt64(t *testing.T) {
	if got := Count(int64(1), "row"); got != "1 row" {
		t.Errorf("Count(int64(1)) = %q", got)
	}
	if got := Noun(int32(3), "table"); got != "tables" {
		t.Errorf("Noun(int32(3)) = %q", got)
	}
}
