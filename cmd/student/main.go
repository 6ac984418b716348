// Command student runs, serves and evaluates the bundled Qwen2 student runtime.
//
// Each subcommand is a cli.Command value in its own file; this file lists them. The exit status
// is 0 on success, 1 on a failure, 2 on a usage error and 130 after Ctrl-C (internal/cli).
package main

import "github.com/chainedsql/chainedsql/internal/cli"

// program is the student binary.
var program = &cli.Program{
	Name:     "student",
	Summary:  "Run, serve and evaluate the bundled Qwen2 student runtime.",
	Commands: []*cli.Command{benchCmd, chatCmd, compareCmd, evalCmd, logitsCmd, mergeCmd, rolloutCmd, scoreCmd, serveCmd, tokenizeCmd},
}

func main() { program.Main() }
