package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/cli"
)

// chatInput is what chat reads; tests replace it.
var chatInput io.Reader = os.Stdin

var chatCmd = &cli.Command{
	Name:    "chat",
	Summary: "a conversation with the model on the terminal (one user turn per line)",
	Help: `Each line on stdin is a user turn; the reply streams to stdout.
/reset starts a new conversation, /exit (or end of input) quits.`,
	Setup: setupChat,
}

func setupChat(fs *flag.FlagSet) cli.Func {
	mf := addModelFlags(fs)
	system := fs.String("system", "", "system message (default the chat template's)")
	maxTokens := fs.Int("max-tokens", 1024, "most tokens per reply")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass")
	seed := fs.Int64("seed", 0, "sampling seed")
	return func(ctx context.Context, c *cli.Call) error {
		if err := mf.check(); err != nil {
			return err
		}
		st, err := mf.open(mf.options())
		if err != nil {
			return err
		}
		defer st.Close()
		return converse(ctx, c, st, *system, chat.Options{MaxTokens: *maxTokens, Temperature: temperature, TopP: topP, Seed: seed})
	}
}

// converse runs the conversation on chatInput with st.
func converse(ctx context.Context, c *cli.Call, st *student.Student, system string, opts chat.Options) error {
	stdout, stderr := c.Stdout, c.Stderr
	var history []chat.Message
	if system != "" {
		history = append(history, chat.Message{Role: chat.RoleSystem, Content: system})
	}
	base := len(history)
	fmt.Fprintf(stderr, "%s: model %s; /reset, /exit\n", c.Name, st.ModelID())
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
			return nil
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
			fmt.Fprintln(stderr)
			return err
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stderr, "[%d+%d tokens, %d from cache, %s, %v]\n", rep.Usage.PromptTokens, rep.Usage.CompletionTokens, rep.Usage.CachedTokens, rep.FinishReason, rep.Latency.Round(1e6))
		history = append(history, chat.Message{Role: chat.RoleAssistant, Content: rep.Content})
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	return nil
}
