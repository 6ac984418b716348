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
	"strconv"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// stdin is what tokenize reads; tests replace it.
var stdin io.Reader = os.Stdin

var tokenizeCmd = &cli.Command{
	Name:    "tokenize",
	Summary: `encode JSONL {"text": ...} from stdin to {"ids": [...]} on stdout`,
	Help: `Reads stdin and writes stdout: student tokenize < in.jsonl > out.jsonl. Each input line is a
JSON object with a string field "text"; each output line is {"ids": [...]}, the ids Hugging
Face's tokenizers give for encode(text, add_special_tokens=False): the text of an added token
(e.g. <|im_end|>) is that token's id. With --split-special-tokens (HF's split_special_tokens=True)
the text of a token marked special is encoded as plain text (the ids of a message's content in
the student's prompts); added tokens not marked special (Qwen2.5's <tool_call>) stay one id.
--offsets does not combine with it.`,
	Setup: setupTokenize,
}

func setupTokenize(fs *flag.FlagSet) cli.Func {
	path := cli.AddTokenizer(fs, "")
	offsets := fs.Bool("offsets", false, `also write "offsets": [[start, end], ...], byte ranges of each token in the text`)
	split := fs.Bool("split-special-tokens", false, "encode the text of special tokens (<|im_end|>, <|endoftext|>) as plain text, as HF's split_special_tokens=True")
	return func(ctx context.Context, c *cli.Call) error {
		if *offsets && *split {
			return cli.Usagef("--offsets: not with --split-special-tokens")
		}
		p, err := cli.TokenizerPath(*path)
		if err != nil {
			return err
		}
		tok, err := tokenizer.Load(p)
		if err != nil {
			return err
		}
		return tokenizeLines(ctx, encoder(tok, *offsets, *split), stdin, c.Stdout, *offsets)
	}
}

// encoder is how tokenize encodes a text: tok's Encode, with offsets its EncodeOffsets, with
// split its EncodeSplitSpecial (no offsets).
func encoder(tok *tokenizer.Tokenizer, offsets, split bool) func(string) ([]int, []tokenizer.Offset) {
	switch {
	case offsets:
		return tok.EncodeOffsets
	case split:
		return func(s string) ([]int, []tokenizer.Offset) { return tok.EncodeSplitSpecial(s), nil }
	default:
		return func(s string) ([]int, []tokenizer.Offset) { return tok.Encode(s), nil }
	}
}

// tokenizeLines reads JSONL {"text": ...} from in and writes one {"ids": [...]} line per input
// line to out, the ids (and with offsets the offsets) from encode. Output is flushed whenever
// no more input is buffered, so it works interactively.
func tokenizeLines(ctx context.Context, encode func(string) ([]int, []tokenizer.Offset), in io.Reader, out io.Writer, offsets bool) error {
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
			buf = appendIDs(buf[:0], encode, *rec.Text, offsets)
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

// appendIDs appends the output line for text to dst: its ids from encode and, with offsets,
// its offsets.
func appendIDs(dst []byte, encode func(string) ([]int, []tokenizer.Offset), text string, offsets bool) []byte {
	ids, offs := encode(text)
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
