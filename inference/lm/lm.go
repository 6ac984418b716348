// Package lm holds the interface between a causal language model backend (qwen2 on the CPU, cuda)
// and what drives it (the generate scheduler, bench, the student logits command): Model, its
// per-sequence KV Cache, the Step of a Forward batch, Forker for caches that share memory, and
// the Sampling of a step for backends that sample on the device.
package lm

import "context"

// Model is a causal language model: it appends tokens to KV caches and returns next-token logits.
// Implementations must be safe for concurrent use of distinct caches; a caller (generate's
// Generator) calls Forward from one goroutine at a time.
type Model interface {
	// VocabSize is the number of logits per position.
	VocabSize() int
	// ContextLength is the most tokens one sequence may hold.
	ContextLength() int
	// NewCache returns an empty KV cache for up to maxTokens tokens.
	NewCache(maxTokens int) (Cache, error)
	// Forward runs one batch: for each step it appends Tokens to Cache (at positions
	// Cache.Len()...) and fills Logits. It fails, changing no cache, on a step that would
	// exceed its cache's capacity, on an out-of-range token id or when ctx is done.
	Forward(ctx context.Context, steps []Step) error
}

// Cache is the KV cache of one sequence.
type Cache interface {
	// Len is the number of tokens held.
	Len() int
	// Truncate drops all tokens past the first n (n <= Len()).
	Truncate(n int)
	// Release frees the cache's memory; the cache must not be used afterwards.
	Release()
}

// Step is one sequence's part of a Forward batch.
type Step struct {
	// Cache is the sequence's KV cache; Tokens are appended to it.
	Cache Cache
	// Tokens are the new tokens (one for a decode step, many for a prefill chunk).
	Tokens []int
	// AllLogits asks for the logits of every token of Tokens, not only the last.
	AllLogits bool
	// Logits receives the output, row-major: len(Tokens)*VocabSize values when AllLogits,
	// else VocabSize values for the last token. Forward reuses its capacity when it is large
	// enough and allocates otherwise.
	Logits []float32
}

// Forker is implemented by caches whose memory can be shared between sequences (a paged KV cache
// whose blocks are reference counted). generate's Generator uses it to start a request from the KV
// of a cached or running prefix instead of computing that prefix again; a cache without it is
// reused only by taking it over when its own conversation continues.
type Forker interface {
	// Fork returns a new cache of capacity maxTokens holding the first n tokens of the receiver
	// (0 ≤ n ≤ Len(), n ≤ maxTokens ≤ ContextLength). Their memory is shared; writes to either
	// cache never change the other. The receiver is unchanged; both are released separately.
	// Fork is never called during a Forward that uses the receiver.
	Fork(n, maxTokens int) (Cache, error)
}

// Sampling is how a model that samples on the device (generate.SamplingModel) picks one step's
// next token, with the meaning generate's host sampler gives these settings.
type Sampling struct {
	// Temperature divides the logits; 0 is greedy decoding (the argmax, the lowest index on
	// ties, NaNs ignored).
	Temperature float64
	// TopP keeps the shortest run of most likely tokens whose probability reaches TopP of what
	// TopK left (0 or 1: off).
	TopP float64
	// TopK keeps the k most likely tokens, the lower id first on ties (0: off; 1: greedy).
	TopK int
	// U is the step's uniform draw in [0, 1), from the request's seeded source; unused when
	// the step decodes greedily.
	U float64
}
