// Package cli is the one command-line skeleton of distill, curate and student: subcommands
// declared as values, flags allowed before and after positional arguments, help that shows the
// positional arguments, --version, and one convention for exit statuses (ExitOK, ExitFailure,
// ExitUsage, ExitInterrupted). flags.go holds the flag groups the binaries share.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/internal/buildinfo"
)

// The exit statuses of every binary.
const (
	// ExitOK is success, and -h, --help and --version.
	ExitOK = 0
	// ExitFailure is a runtime failure: the error is printed once.
	ExitFailure = 1
	// ExitUsage is a usage error: one error line and one line naming -h.
	ExitUsage = 2
	// ExitInterrupted is a command that failed after Ctrl-C or SIGTERM (128 + SIGINT).
	ExitInterrupted = 130
)

// Func runs a command once its flags and positional arguments are parsed. A nil error exits
// ExitOK; an error from Usagef exits ExitUsage; any other error exits ExitFailure, or
// ExitInterrupted when ctx was cancelled by a signal.
type Func func(ctx context.Context, c *Call) error

// Command is one subcommand: everything about it is declared here.
type Command struct {
	// Name is the word that selects the command ("eval").
	Name string
	// Summary is the one line shown in the command list.
	Summary string
	// Args is the positional-argument synopsis shown in the usage line. It also sets how many
	// the command takes: NAME is one, NAME... one or more, [NAME] one at most, [NAME...] any
	// number; "" takes none.
	Args string
	// Help is printed below the usage line of -h (optional).
	Help string
	// Setup defines the command's flags on fs and returns the function that runs it. A
	// command with Commands has no Setup.
	Setup func(fs *flag.FlagSet) Func
	// Commands are the subcommands of a group ("env serve").
	Commands []*Command
}

// Program is one binary.
type Program struct {
	// Name is the binary's name ("student").
	Name string
	// Summary is one line saying what the binary does.
	Summary string
	// Help is printed after the command list of -h (optional).
	Help string
	// Default runs when the first argument is a flag or there is none (distill's main job);
	// nil when a command must be named.
	Default *Command
	// Commands are the subcommands.
	Commands []*Command
}

// Call is what a command's Func gets besides its context.
type Call struct {
	// Name is the program and command path, e.g. "student eval"; errors are prefixed with it.
	Name string
	// Args are the positional arguments.
	Args []string
	// Stdout and Stderr are the command's output streams.
	Stdout, Stderr io.Writer
	// Flags is the parsed flag set.
	Flags *flag.FlagSet
	sig   *interrupts
}

// Given is the set of the names of the flags given on the command line.
func (c *Call) Given() map[string]bool {
	set := map[string]bool{}
	c.Flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// Abort returns a context that ends on a second Ctrl-C or SIGTERM, when note is printed to
// stderr after the command's name. Without a call to Abort before the first signal, the second
// kills the process at once. Outside Main (in tests) the context never ends.
func (c *Call) Abort(note string) context.Context {
	if c.sig == nil {
		return context.Background()
	}
	return c.sig.abort(func() { fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, note) })
}

// usageError is an error the user made on the command line.
type usageError struct {
	msg   string
	cause error // what Usage wrapped, nil from Usagef
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return e.cause }

// Usagef returns a usage error: the binary prints it with a hint to -h and exits ExitUsage.
func Usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// Usage wraps err as a usage error (nil stays nil); errors.Is and errors.As still see err.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{msg: err.Error(), cause: err}
}

// isUsage reports whether err is a usage error.
func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// Main runs the program on os.Args with Ctrl-C and SIGTERM cancelling the context, and exits
// with its status. The signal handler is never removed on the way to the exit, so a signal
// after the command ended does not kill the process with the signal instead of its status; it
// is removed only after the signal past which the next one should kill (see interrupts).
func (p *Program) Main() {
	sig := newInterrupts()
	os.Exit(p.run(sig.ctx, sig, os.Args[1:], os.Stdout, os.Stderr))
}

// Run runs the program on args and returns its exit status, without signal handling (the
// in-process form tests use).
func (p *Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return p.run(ctx, nil, args, stdout, stderr)
}

func (p *Program) run(ctx context.Context, sig *interrupts, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			p.usage(stdout)
			return ExitOK
		case "help":
			if len(args) == 1 {
				p.usage(stdout)
				return ExitOK
			}
			return p.dispatch(ctx, sig, p.Name, p.Commands, append(args[1:], "-h"), stdout, stderr)
		case "-version", "--version", "version":
			fmt.Fprintf(stdout, "%s %s\n", p.Name, buildinfo.Version())
			return ExitOK
		}
	}
	if p.Default != nil && (len(args) == 0 || strings.HasPrefix(args[0], "-")) {
		return p.exec(ctx, sig, p.Name, p.Default, args, stdout, stderr)
	}
	if len(args) == 0 {
		p.usage(stderr)
		return ExitUsage
	}
	return p.dispatch(ctx, sig, p.Name, p.Commands, args, stdout, stderr)
}

// dispatch runs the command of cmds that args[0] names; parent is the path so far.
func (p *Program) dispatch(ctx context.Context, sig *interrupts, parent string, cmds []*Command, args []string, stdout, stderr io.Writer) int {
	var c *Command
	for _, x := range cmds {
		if x.Name == args[0] {
			c = x
		}
	}
	if c == nil {
		return usageFail(stderr, parent, fmt.Errorf("unknown command %q", args[0]))
	}
	name := parent + " " + c.Name
	if len(c.Commands) == 0 {
		return p.exec(ctx, sig, name, c, args[1:], stdout, stderr)
	}
	rest := args[1:]
	if len(rest) == 0 {
		return usageFail(stderr, name, errors.New("no command given (want "+commandNames(c.Commands)+")"))
	}
	switch rest[0] {
	case "-h", "-help", "--help":
		p.groupUsage(stdout, name, c)
		return ExitOK
	}
	return p.dispatch(ctx, sig, name, c.Commands, rest, stdout, stderr)
}

// exec parses args for c and runs it.
func (p *Program) exec(ctx context.Context, sig *interrupts, name string, c *Command, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	run := c.Setup(fs)
	pos, err := Parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		if c == p.Default {
			p.usage(stdout)
		} else {
			p.commandUsage(stdout, name, c, fs)
		}
		return ExitOK
	}
	if err == nil {
		err = checkArgs(c.Args, pos)
	}
	if err != nil {
		return usageFail(stderr, name, errors.New(flagError(err)))
	}
	call := &Call{Name: name, Args: pos, Stdout: stdout, Stderr: stderr, Flags: fs, sig: sig}
	err = run(ctx, call)
	switch {
	case err == nil:
		return ExitOK
	case isUsage(err):
		return usageFail(stderr, name, err)
	}
	fmt.Fprintln(stderr, printable(prefixed(name, err)))
	if ctx.Err() != nil {
		return ExitInterrupted
	}
	return ExitFailure
}

// printable returns s with its control characters other than newline and tab written as Go
// escapes (\x1b, \u009b): an error can carry a provider's message or a database's text, and
// written raw to a terminal their escape sequences would set its title, clear it or write the
// clipboard (OSC 52).
func printable(s string) string {
	if !strings.ContainsFunc(s, escaped) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !escaped(r):
			b.WriteRune(r)
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// escaped reports the runes printable escapes.
func escaped(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }

// flagError is a flag package error with the flag named as the help and docs name it: two
// dashes ("invalid value "x" for flag -limit: ..." reads "invalid value "x" for --limit: ...").
func flagError(err error) string {
	return strings.NewReplacer("for flag -", "for --", "defined: -", "defined: --",
		"argument: -", "argument: --", "\" for -", "\" for --").Replace(err.Error())
}

// prefixed is err's message after name, unless it already begins with a command's name or, in
// the program's default command, with the program's; a library prefix that is the command's
// name or, in a subcommand, the program's is replaced by name (a library's "bench: ..." in
// "student bench" reads "student bench: ...", package student's "student: ..." in "student
// serve" reads "student serve: ...").
func prefixed(name string, err error) string {
	prog, _, _ := strings.Cut(name, " ")
	cmd := name[strings.LastIndex(name, " ")+1:]
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, prog+" "):
		return msg
	case cmd != prog && strings.HasPrefix(msg, cmd+": "):
		return strings.TrimSuffix(name, cmd) + msg
	case name != prog && strings.HasPrefix(msg, prog+": "):
		return name + msg[len(prog):]
	case strings.HasPrefix(msg, prog+":"):
		return msg
	}
	return name + ": " + msg
}

// usageFail prints a usage error's line and the hint to -h, and returns ExitUsage.
func usageFail(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "%s\nrun '%s -h' for usage\n", prefixed(name, err), name)
	return ExitUsage
}

// interrupts turns the first Ctrl-C or SIGTERM into a cancelled context and the second into an
// abort (when a command asked for one through Call.Abort) or the default action, death.
type interrupts struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan os.Signal

	mu          sync.Mutex
	abortCtx    context.Context
	abortCancel context.CancelFunc
	abortNote   func()
}

func newInterrupts() *interrupts {
	s := &interrupts{ch: make(chan os.Signal, 2)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go s.loop()
	return s
}

func (s *interrupts) loop() {
	<-s.ch
	s.cancel()
	s.mu.Lock()
	abort := s.abortCancel != nil
	s.mu.Unlock()
	if !abort {
		signal.Stop(s.ch) // the next one kills at once
		return
	}
	<-s.ch
	s.mu.Lock()
	s.abortNote()
	s.abortCancel()
	s.mu.Unlock()
	signal.Stop(s.ch) // a third one kills at once, should abandoning hang
}

func (s *interrupts) abort(note func()) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abortCtx == nil {
		s.abortCtx, s.abortCancel = context.WithCancel(context.Background())
		s.abortNote = note
	}
	return s.abortCtx
}
