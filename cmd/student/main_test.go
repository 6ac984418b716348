package main

import (
	"bytes"
	"context"
	"github.com/chainedsql/chainedsql/internal/cli/clitest"
	"github.com/chainedsql/chainedsql/internal/testbin"
	"io"
	"strings"
	"testing"
)

// dispatch runs the program in-process and returns its exit status.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return program.Run(ctx, args, stdout, stderr)
}

func TestDispatchUnknownAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if want := "student: unknown command \"nope\"\nrun 'student -h' for usage\n"; errb.String() != want {
		t.Fatalf("stderr %q, want %q", errb.String(), want)
	}
	errb.Reset()
	if code := dispatch(context.Background(), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "commands:") {
		t.Fatalf("no command: exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	if code := dispatch(context.Background(), []string{"help"}, &out, &errb); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range program.Commands {
		if !strings.Contains(out.String(), "  "+c.Name+" ") || !strings.Contains(out.String(), c.Summary) {
			t.Errorf("help does not list %s: %s", c.Name, out.String())
		}
	}
}

// TestConventions: help, --version and usage errors of every command, through the built binary.
func TestConventions(t *testing.T) {
	clitest.Conventions(t, testbin.Build(t, "."), program)
}
