package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testProgram has a default command, a plain command, a group and a command failing as told.
func testProgram(got *[]string) *Program {
	record := func(fs *flag.FlagSet) Func {
		n := fs.Int("n", 0, "a number")
		v := fs.Bool("v", false, "verbose")
		return func(ctx context.Context, c *Call) error {
			*got = append([]string{fmt.Sprintf("%s n=%d v=%t", c.Name, *n, *v)}, c.Args...)
			return nil
		}
	}
	return &Program{
		Name:    "prog",
		Summary: "A test program.",
		Default: &Command{Summary: "the main job", Setup: record},
		Commands: []*Command{
			{Name: "copy", Summary: "copy things", Args: "SRC... DST", Setup: record},
			{Name: "grp", Summary: "a group", Commands: []*Command{
				{Name: "sub", Summary: "a subcommand", Args: "[NAME]", Setup: record},
			}},
			{Name: "fail", Summary: "fail as told", Setup: func(fs *flag.FlagSet) Func {
				how := fs.String("how", "", "usage or runtime")
				return func(ctx context.Context, c *Call) error {
					switch *how {
					case "usage":
						return Usagef("--how %s is wrong", *how)
					case "prefixed":
						return errors.New("fail: already named")
					case "library":
						return errors.New("prog: a package named like the program")
					case "escapes":
						return errors.New("teacher: bad \x1b]0;title\x07\x1b[2J\u009b31m \x1b]52;c;aGk=\x07 end\nnext\tline")
					}
					return errors.New("it broke")
				}
			}},
		},
	}
}

func run(p *Program, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = p.Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun(t *testing.T) {
	var got []string
	p := testProgram(&got)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"prog n=0 v=false"}},
		{[]string{"-n", "3", "-v"}, []string{"prog n=3 v=true"}},
		{[]string{"copy", "a", "--n=2", "b", "-v", "c"}, []string{"prog copy n=2 v=true", "a", "b", "c"}},
		{[]string{"copy", "a", "-n", "-5", "b"}, []string{"prog copy n=-5 v=false", "a", "b"}},
		{[]string{"copy", "a", "--", "-v", "-"}, []string{"prog copy n=0 v=false", "a", "-v", "-"}},
		{[]string{"grp", "sub", "x", "--v"}, []string{"prog grp sub n=0 v=true", "x"}},
		{[]string{"grp", "sub"}, []string{"prog grp sub n=0 v=false"}},
	} {
		got = nil
		code, _, stderr := run(p, c.args...)
		if code != ExitOK || !slices.Equal(got, c.want) {
			t.Errorf("%q: exit %d (%s), ran %q, want %q", c.args, code, stderr, got, c.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	var got []string
	p := testProgram(&got)
	for _, c := range []struct {
		args      []string
		line, cmd string
	}{
		{[]string{"nope"}, `prog: unknown command "nope"`, "prog"},
		{[]string{"--bogus"}, "prog: flag provided but not defined: --bogus", "prog"},
		{[]string{"copy", "a", "-n", "x", "b"}, `prog copy: invalid value "x" for --n: parse error`, "prog copy"},
		{[]string{"copy", "a", "-n"}, "prog copy: flag needs an argument: --n", "prog copy"},
		{[]string{"copy", "a"}, "prog copy: no DST given", "prog copy"},
		{[]string{"copy"}, "prog copy: no SRC given", "prog copy"},
		{[]string{"grp"}, "prog grp: no command given (want sub)", "prog grp"},
		{[]string{"grp", "up"}, `prog grp: unknown command "up"`, "prog grp"},
		{[]string{"grp", "sub", "a", "b"}, `prog grp sub: unexpected argument "b"`, "prog grp sub"},
		{[]string{"-v", "extra"}, `prog: unexpected argument "extra"`, "prog"},
		{[]string{"fail", "--how", "usage"}, "prog fail: --how usage is wrong", "prog fail"},
	} {
		got = nil
		code, stdout, stderr := run(p, c.args...)
		want := c.line + "\nrun '" + c.cmd + " -h' for usage\n"
		if code != ExitUsage || stderr != want || stdout != "" || got != nil {
			t.Errorf("%q: exit %d, stdout %q, stderr %q, ran %q; want exit 2 and stderr %q", c.args, code, stdout, stderr, got, want)
		}
	}
}

func TestFailures(t *testing.T) {
	p := testProgram(new([]string))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fail"}, "prog fail: it broke\n"},
		{[]string{"fail", "--how", "prefixed"}, "prog fail: already named\n"},
		{[]string{"fail", "--how", "library"}, "prog fail: a package named like the program\n"},
		// A provider's error message (distill's early stop) or a database's text reaches the
		// terminal as text: its control characters, but newline and tab, written escaped, so
		// none sets the title, clears the screen or writes the clipboard (OSC 52).
		{[]string{"fail", "--how", "escapes"}, `prog fail: teacher: bad \x1b]0;title\x07\x1b[2J\u009b31m \x1b]52;c;aGk=\x07 end` + "\nnext\tline\n"},
	} {
		if code, _, stderr := run(p, c.args...); code != ExitFailure || stderr != c.want {
			t.Errorf("%q: exit %d, stderr %q; want 1 and %q", c.args, code, stderr, c.want)
		}
	}
	// A failure after the context ended (Ctrl-C in Main) is an interruption.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	if code := p.Run(ctx, []string{"fail"}, &out, &errb); code != ExitInterrupted || errb.String() != "prog fail: it broke\n" {
		t.Errorf("interrupted: exit %d, stderr %q", code, errb.String())
	}
}

func TestHelpAndVersion(t *testing.T) {
	var got []string
	p := testProgram(&got)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"usage: prog [flags]\n       prog COMMAND ...", "A test program.", "  copy         copy things", "  grp sub      a subcommand", "  --n int\n    \ta number\n"}},
		{[]string{"--help"}, []string{"usage: prog [flags]"}},
		{[]string{"help"}, []string{"commands:"}},
		{[]string{"-v", "-h"}, []string{"usage: prog [flags]"}},
		{[]string{"copy", "-h"}, []string{"usage: prog copy [flags] SRC... DST\n\ncopy things\n", "  --v\n    \tverbose\n"}},
		{[]string{"copy", "a", "--help", "b"}, []string{"usage: prog copy [flags] SRC... DST"}},
		{[]string{"help", "copy"}, []string{"usage: prog copy [flags] SRC... DST"}},
		{[]string{"grp", "-h"}, []string{"usage: prog grp COMMAND", "  sub          a subcommand"}},
		{[]string{"grp", "sub", "-h"}, []string{"usage: prog grp sub [flags] [NAME]"}},
		{[]string{"--version"}, []string{"prog devel"}},
		{[]string{"version"}, []string{"prog devel"}},
	} {
		got = nil
		code, stdout, stderr := run(p, c.args...)
		if code != ExitOK || stderr != "" || got != nil {
			t.Errorf("%q: exit %d, stderr %q, ran %q", c.args, code, stderr, got)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%q: stdout lacks %q:\n%s", c.args, w, stdout)
			}
		}
	}
	// Without a default command, no arguments print the command list as an error.
	p.Default = nil
	if code, stdout, stderr := run(p); code != ExitUsage || stdout != "" || !strings.Contains(stderr, "  copy ") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestArgCount(t *testing.T) {
	for _, c := range []struct {
		synopsis string
		min, max int
	}{
		{"", 0, 0},
		{"DIR", 1, 1},
		{"RUN_DIR...", 1, -1},
		{"[PATH]", 0, 1},
		{"[PATH...]", 0, -1},
		{"SRC... DST", 2, -1},
		{"A [B]", 1, 2},
	} {
		if min, max := argCount(c.synopsis); min != c.min || max != c.max {
			t.Errorf("%q: %d..%d, want %d..%d", c.synopsis, min, max, c.min, c.max)
		}
	}
}

func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	s := fs.String("s", "", "")
	b := fs.Bool("b", false, "")
	pos, err := Parse(fs, []string{"x", "-s", "--", "y", "-b=false", "--s=z", "-", "--", "-s", "w"})
	if err != nil || *s != "z" || *b || !slices.Equal(pos, []string{"x", "y", "-", "-s", "w"}) {
		t.Fatalf("pos %q, s %q, b %t, err %v", pos, *s, *b, err)
	}
	if _, err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// TestUsageWraps: Usage keeps the cause for errors.Is, prints its text, and stays a usage error.
func TestUsageWraps(t *testing.T) {
	cause := errors.New("bad value")
	err := fmt.Errorf("--x: %w", Usage(cause))
	if !errors.Is(err, cause) || !isUsage(err) || err.Error() != "--x: bad value" {
		t.Fatalf("Usage(cause) wrapped: %v (is cause %v, usage %v)", err, errors.Is(err, cause), isUsage(err))
	}
	if Usage(nil) != nil || errors.Unwrap(Usagef("plain")) != nil {
		t.Fatal("Usage(nil) or Usagef has a cause")
	}
}
