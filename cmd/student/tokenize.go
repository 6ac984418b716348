package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
)

// tokenizerEnv names the environment variable holding the default tokenizer path.
const tokenizerEnv = "CHAINEDSQL_TOKENIZER"

// stdin is what tokenize reads; tests replace it.
var stdin io.Reader = os.Stdin

func init() {
	register("tokenize", `encode JSONL {"text": ...} from stdin to {"ids": [...]} on stdout`, runTokenize)
}

// defaultTokenizerPath is $CHAINEDSQL_TOKENIZER, else ../shared/tokenizer/qwen2.5 when it
// exists, else "".
func defaultTokenizerPath() string {
	if p := os.Getenv(tokenizerEnv); p != "" {
		return p
	}
	if p := filepath.Join("..", "shared", "tokenizer", "qwen2.5"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func runTokenize(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("student tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "tokenizer.json or its directory (default $"+tokenizerEnv+", else ../shared/tokenizer/qwen2.5 when present)")
	offsets := fs.Bool("offsets", false, `also write "offsets": [[start, end], ...], byte ranges of each token in the text`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: student tokenize [--tokenizer PATH] [--offsets] < in.jsonl > out.jsonl")
		fmt.Fprintln(stderr, "\nEach input line is a JSON object with a string field \"text\"; each output line is")
		fmt.Fprintln(stderr, "{\"ids\": [...]}, the ids Hugging Face's tokenizers give for encode(text, add_special_tokens=False).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "student tokenize: unexpected argument %q (input comes from stdin)\n", fs.Arg(0))
		return 2
	}
	p := *path
	if p == "" {
		p = defaultTokenizerPath()
	}
	if p == "" {
		fmt.Fprintf(stderr, "student tokenize: no tokenizer: pass --tokenizer PATH (a tokenizer.json or its directory) or set %s\n", tokenizerEnv)
		return 2
	}
	tok, err := tokenizer.Load(p)
	if err != nil {
		fmt.Fprintf(stderr, "student tokenize: %v\n", err)
		return 1
	}
	if err := tokenizeLines(ctx, tok, stdin, stdout, *offsets); err != nil {
		fmt.Fprintf(stderr, "student tokenize: %v\n", err)
		return 1
	}
	return 0
}

// tokenizeLines reads JSONL {"text": ...} from in and writes one {"ids": [...]} line per input
// line to out. Output is flushed whenever no more input is buffered, so it works interactively.
func tokenizeLines(ctx context.Context, tok *tokenizer.Tokenizer, in io.Reader, out io.Writer, offsets bool) error {
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriterSize(out, 1<<20)
	var buf []byte
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("stdin: %w", rerr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var rec struct {
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				return fmt.Errorf("stdin line %d: want a JSON object with a string field \"text\": %w", n, err)
			}
			if rec.Text == nil {
				return fmt.Errorf("stdin line %d: no \"text\" field", n)
			}
			buf = appendIDs(buf[:0], tok, *rec.Text, offsets)
			if _, err := w.Write(buf); err != nil {
				return fmt.Errorf("stdout: %w", err)
			}
		} else if rerr == nil {
			return fmt.Errorf("stdin line %d: empty line (want a JSON object with a string field \"text\")", n)
		}
		if rerr != nil || r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return fmt.Errorf("stdout: %w", err)
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// appendIDs appends the output line for text to dst.
func appendIDs(dst []byte, tok *tokenizer.Tokenizer, text string, offsets bool) []byte {
	var ids []int
	var offs []tokenizer.Offset
	if offsets {
		ids, offs = tok.EncodeOffsets(text)
	} else {
		ids = tok.Encode(text)
	}
	dst = append(dst, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	dst = append(dst, ']')
	if offsets {
		dst = append(dst, `,"offsets":[`...)
		for i, o := range offs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			dst = strconv.AppendInt(dst, int64(o.Start), 10)
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, int64(o.End), 10)
			dst = append(dst, ']')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}\n"...)
}
