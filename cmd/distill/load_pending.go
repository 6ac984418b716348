//go:build !copysqlite

package main

import (
	"fmt"
	"io"
)

// runLoad would copy the task databases into PostgreSQL or MySQL through datasets.CopySQLite,
// which the datasets package does not declare yet; load.go holds the real command behind the
// copysqlite build tag until it does.
func runLoad(args []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "distill load: needs datasets.CopySQLite, which is not built yet in this version of the toolkit")
	return 1
}
