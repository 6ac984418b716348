package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func TestDispatchUnknownAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Fatalf("stderr %q does not name the command", errb.String())
	}
	if code := dispatch(context.Background(), nil, &out, &errb); code != 2 {
		t.Fatalf("no command: exit %d, want 2", code)
	}
	out.Reset()
	register("zz-test", "a test command", func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		io.WriteString(stdout, strings.Join(args, ","))
		return 7
	})
	defer delete(commands, "zz-test")
	if code := dispatch(context.Background(), []string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "zz-test") {
		t.Fatalf("help: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := dispatch(context.Background(), []string{"zz-test", "a", "b"}, &out, &errb); code != 7 || out.String() != "a,b" {
		t.Fatalf("dispatch: exit %d, output %q", code, out.String())
	}
}
