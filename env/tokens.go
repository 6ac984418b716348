package env

import (
	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/turns"
)

// promptTokens is an episode's prompt as the student's chat template renders it, up to and
// including the first generation prompt; with ids and mask when the server has a tokenizer.
func (s *Server) promptTokens(msgs []chat.Message) turns.Piece {
	return s.encode(turns.Prompt(msgs))
}

// stepTokens is what a trainer appends after the reply just stepped: the wrapped observation
// and the next generation prompt, or at done the reply's closing <|im_end|> and newline.
func (s *Server) stepTokens(observation string, done bool) turns.Piece {
	if done {
		return s.encode(turns.Closing())
	}
	return s.encode(turns.Observation(observation))
}

func (s *Server) encode(p turns.Piece) turns.Piece {
	if s.cfg.Tokenizer == nil {
		return p
	}
	return p.Encode(s.cfg.Tokenizer)
}
