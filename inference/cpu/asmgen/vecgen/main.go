//go:build ignore

// Command main writes vecgen's files into the current directory: run it as
// `go run asmgen/vecgen/main.go` from inference/cpu (go generate there does).
package main

import (
	"log"
	"os"

	"github.com/chainedsql/chainedsql/inference/cpu/asmgen/vecgen"
)

func main() {
	files, err := vecgen.Files()
	if err != nil {
		log.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
