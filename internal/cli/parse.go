package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Parse parses args into fs with flags allowed before, between and after the positional
// arguments, which it returns in order. "--" ends the flags: everything after it is
// positional. A lone "-" is positional (stdin, by convention). A non-boolean flag given
// without "=" takes the next argument as its value, whatever it looks like, as in package flag.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBool(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	// Only flags and their values were passed, so nothing is left over; a stray word means
	// the flag set saw something this loop did not (a name the lookup missed).
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return pos, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// argCount is how many positional arguments a synopsis takes: min and max (-1: no limit).
func argCount(synopsis string) (min, max int) {
	for _, w := range strings.Fields(synopsis) {
		optional := strings.HasPrefix(w, "[")
		many := strings.HasSuffix(strings.TrimSuffix(w, "]"), "...")
		if !optional {
			min++
		}
		switch {
		case max < 0:
		case many:
			max = -1
		default:
			max++
		}
	}
	return min, max
}

// checkArgs is the usage error for a number of positional arguments the synopsis refuses.
func checkArgs(synopsis string, pos []string) error {
	min, max := argCount(synopsis)
	switch {
	case max >= 0 && len(pos) > max:
		return fmt.Errorf("unexpected argument %q", pos[max])
	case len(pos) < min:
		want := strings.Fields(synopsis)[len(pos)]
		return fmt.Errorf("no %s given", strings.TrimSuffix(want, "..."))
	}
	return nil
}

// usage writes the program's help: the usage lines, the command list and Help; with a Default
// command also its help and flags.
func (p *Program) usage(w io.Writer) {
	if p.Default != nil {
		fmt.Fprintf(w, "usage: %s\n       %s COMMAND ...\n", strings.TrimSpace(p.Name+" [flags] "+p.Default.Args), p.Name)
	} else {
		fmt.Fprintf(w, "usage: %s COMMAND [flags] [ARGS]\n", p.Name)
	}
	if p.Summary != "" {
		fmt.Fprintf(w, "\n%s\n", p.Summary)
	}
	fmt.Fprintf(w, "\ncommands:\n")
	writeCommands(w, "", p.Commands)
	if p.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(p.Help, "\n"))
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's arguments and flags; '%s --version' prints the toolkit version.\n", p.Name, p.Name)
	if p.Default != nil {
		fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
		p.Default.Setup(fs)
		if p.Default.Help != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimRight(p.Default.Help, "\n"))
		}
		writeFlags(w, fs)
	}
}

// groupUsage writes the help of a command group.
func (p *Program) groupUsage(w io.Writer, name string, c *Command) {
	fmt.Fprintf(w, "usage: %s COMMAND [flags] [ARGS]\n\n%s\n\ncommands:\n", name, c.Summary)
	writeCommands(w, "", c.Commands)
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's arguments and flags.\n", name)
}

// commandUsage writes a command's help: the usage line with its positional arguments, its
// summary and Help, and its flags.
func (p *Program) commandUsage(w io.Writer, name string, c *Command, fs *flag.FlagSet) {
	line := "usage: " + name + " [flags]"
	if c.Args != "" {
		line += " " + c.Args
	}
	fmt.Fprintf(w, "%s\n\n%s\n", line, c.Summary)
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.Help, "\n"))
	}
	writeFlags(w, fs)
}

// writeCommands lists cmds, those of groups under their group's name.
func writeCommands(w io.Writer, prefix string, cmds []*Command) {
	for _, c := range cmds {
		if len(c.Commands) > 0 {
			writeCommands(w, prefix+c.Name+" ", c.Commands)
			continue
		}
		fmt.Fprintf(w, "  %-12s %s\n", prefix+c.Name, c.Summary)
	}
}

// commandNames is "a, b or c".
func commandNames(cmds []*Command) string {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Name)
	}
	return joinLast(names, " or ")
}

// writeFlags lists the flags of fs as flag.PrintDefaults does, with two dashes.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintf(w, "\nflags:\n")
			first = false
		}
		typ, text := flag.UnquoteUsage(f)
		if v, ok := f.Value.(interface{ placeholder() string }); ok {
			typ = v.placeholder()
		}
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		fmt.Fprintf(w, "%s\n    \t%s", head, strings.ReplaceAll(text, "\n", "\n    \t"))
		if !zeroDefault(f) {
			if typ == "string" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
}

// zeroDefault reports whether f's default is its type's zero value, which help leaves out.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}
