// Package clitest checks a built binary against the conventions of internal/cli, for the
// binaries' tests.
package clitest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/internal/cli"
	"github.com/chainedsql/chainedsql/internal/testbin"
)

// Conventions runs the binary bin, built from p, on the help, version and usage-error forms
// of every command: -h and --help exit 0 with the usage on stdout (a command's showing its
// positional arguments), --version prints p.Name and a version, an unknown flag (also after a
// positional argument) and an unknown command exit 2 with exactly their error line and the
// hint to -h on stderr.
func Conventions(t *testing.T, bin string, p *cli.Program) {
	t.Helper()
	runBin := func(args ...string) (int, string, string) {
		t.Helper()
		return testbin.Run(t, exec.Command(bin, args...))
	}
	usageError := func(path, line string, args ...string) {
		t.Helper()
		code, stdout, stderr := runBin(args...)
		if want := line + "\nrun '" + path + " -h' for usage\n"; code != cli.ExitUsage || stderr != want || stdout != "" {
			t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", p.Name, args, code, stdout, stderr, want)
		}
	}
	for _, h := range []string{"-h", "--help", "help"} {
		code, stdout, stderr := runBin(h)
		if code != cli.ExitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: "+p.Name) {
			t.Errorf("%s %s: exit %d, stderr %q, stdout %q", p.Name, h, code, stderr, stdout)
		}
		for _, c := range p.Commands {
			if !strings.Contains(stdout, "  "+c.Name+" ") {
				t.Errorf("%s %s lists no %s:\n%s", p.Name, h, c.Name, stdout)
			}
		}
	}
	if code, stdout, _ := runBin("--version"); code != cli.ExitOK || !strings.HasPrefix(stdout, p.Name+" ") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("%s --version: exit %d, stdout %q", p.Name, code, stdout)
	}
	usageError(p.Name, p.Name+`: unknown command "no-such-command"`, "no-such-command")
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			args := append(append([]string(nil), path...), c.Name)
			name := p.Name + " " + strings.Join(args, " ")
			if len(c.Commands) > 0 {
				if code, stdout, _ := runBin(append(args, "-h")...); code != cli.ExitOK || !strings.HasPrefix(stdout, "usage: "+name+" COMMAND") {
					t.Errorf("%s -h: exit %d, stdout %q", name, code, stdout)
				}
				usageError(name, name+`: unknown command "no-such-command"`, append(args, "no-such-command")...)
				walk(args, c.Commands)
				continue
			}
			usage := "usage: " + name + " [flags]"
			if c.Args != "" {
				usage += " " + c.Args
			}
			for _, h := range []string{"-h", "--help"} {
				code, stdout, stderr := runBin(append(args, h)...)
				if code != cli.ExitOK || stderr != "" || !strings.HasPrefix(stdout, usage+"\n") || !strings.Contains(stdout, c.Summary) {
					t.Errorf("%s %s: exit %d, stderr %q, stdout %q; want it to begin %q", name, h, code, stderr, stdout, usage)
				}
			}
			usageError(name, name+": flag provided but not defined: --no-such-flag", append(args, "--no-such-flag")...)
			if c.Args != "" {
				// After a positional argument a flag is still a flag.
				usageError(name, name+": flag provided but not defined: --no-such-flag", append(args, "ARG", "--no-such-flag")...)
			}
		}
	}
	walk(nil, p.Commands)
	if p.Default != nil {
		usageError(p.Name, p.Name+": flag provided but not defined: --no-such-flag", "--no-such-flag")
	}
}
