package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/student"
)

// chatInput is what chat reads; tests replace it.
var chatInput io.Reader = os.Stdin

func init() {
	register("chat", "a conversation with the model on the terminal (one user turn per line)", runChat)
}

func runChat(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, mf := newModelFlagSet("chat", stderr)
	system := fs.String("system", "", "system message (default the chat template's)")
	maxTokens := fs.Int("max-tokens", 1024, "most tokens per reply")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass")
	seed := fs.Int64("seed", 0, "sampling seed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: student chat --model DIR [flags]\n\nEach line on stdin is a user turn; the reply streams to stdout.")
		fmt.Fprintln(stderr, "/reset starts a new conversation, /exit (or end of input) quits.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if err := mf.check("chat"); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	st, err := student.Open(mf.dir, mf.options())
	if err != nil {
		fmt.Fprintf(stderr, "student chat: %v\n", err)
		return 1
	}
	defer st.Close()
	opts := chat.Options{MaxTokens: *maxTokens, Temperature: temperature, TopP: topP, Seed: seed}
	var history []chat.Message
	if *system != "" {
		history = append(history, chat.Message{Role: chat.RoleSystem, Content: *system})
	}
	base := len(history)
	fmt.Fprintf(stderr, "student chat: model %s; /reset, /exit\n", st.ModelID())
	in := bufio.NewScanner(chatInput)
	in.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for {
		fmt.Fprint(stderr, "> ")
		if !in.Scan() {
			break
		}
		line := strings.TrimSpace(in.Text())
		switch line {
		case "":
			continue
		case "/exit", "/quit":
			return 0
		case "/reset":
			history = history[:base]
			fmt.Fprintln(stderr, "(new conversation)")
			continue
		}
		history = append(history, chat.Message{Role: chat.RoleUser, Content: line})
		rep, err := st.Stream(ctx, history, opts, func(d string) error {
			_, err := io.WriteString(stdout, d)
			return err
		})
		if err != nil {
			fmt.Fprintf(stderr, "\nstudent chat: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "[%d+%d tokens, %d from cache, %s, %v]\n", rep.Usage.PromptTokens, rep.Usage.CompletionTokens, rep.Usage.CachedTokens, rep.FinishReason, rep.Latency.Round(1e6))
		history = append(history, chat.Message{Role: chat.RoleAssistant, Content: rep.Content})
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(stderr, "student chat: reading stdin: %v\n", err)
		return 1
	}
	return 0
}
