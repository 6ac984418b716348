package rundir

// What a run dir's lines and manifest hold: the manifest (what the run is, and the check that a
// resume is the same run), the key shard (--shard), and the trajectory decoding of both line
// formats.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/protocol"
)

// Shard selects part I of N of a run's keys (by a stable hash of the key). The zero value is the
// whole run.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// ParseShard parses "I/N" (0 ≤ I < N).
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("shard %q: want I/N with 0 <= I < N, e.g. 0/4", s)
	}
	return Shard{Index: i, Count: n}, nil
}

// String renders the shard as I/N ("" for the whole run).
func (s Shard) String() string {
	if s.Count <= 1 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Has reports whether key belongs to the shard (FNV-1a 64 of the key, modulo N).
func (s Shard) Has(key string) bool {
	if s.Count <= 1 {
		return true
	}
	// FNV-1a inline: hash/fnv would allocate a hasher per key.
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int(h%uint64(s.Count)) == s.Index
}

// ManifestTeacher is one policy of a run, as the manifest records it (never a key).
type ManifestTeacher struct {
	Name  string `json:"name"`
	Spec  string `json:"spec"`
	Model string `json:"model,omitempty"`
}

// ManifestTasks describes the tasks of a run.
type ManifestTasks struct {
	Spec  string `json:"spec"`
	Limit int    `json:"limit,omitempty"`
	Count int    `json:"count"`
	// Digest is a hash of the set of task ids (TasksDigest), so a changed task set is noticed.
	// Run dirs made before it sorted the ids hold a hash of the ids in task order; resume
	// accepts that too.
	Digest string `json:"digest"`
}

// Run-dir format versions (Manifest.Format). A manifest without the field is RunFormatV1.
const (
	// RunFormatV1 is the first format: every trajectory line has the whole conversation in
	// "messages" and each turn again in "turns" (raw content, reasoning that may be a copy of
	// the inline <think>).
	RunFormatV1 = "chainedsql-run/v1"
	// RunFormat is the format this package writes: each turn stored once, exactly as received
	// (content, reasoning text and the field it came from, finish reason as the provider sent
	// it, truncation), the system prompt and question in "system" and "prompt".
	RunFormat = "chainedsql-run/v2"
)

// Manifest is manifest.json.
type Manifest struct {
	// Format is the run-dir format version (RunFormat; "" in run dirs of format v1).
	Format      string             `json:"format,omitempty"`
	Protocol    string             `json:"protocol"`
	Toolkit     string             `json:"toolkit_version"`
	Created     time.Time          `json:"created"`
	Tasks       ManifestTasks      `json:"tasks"`
	Teachers    []ManifestTeacher  `json:"teachers"`
	Dialects    []datasets.Dialect `json:"dialects"`
	Samples     int                `json:"samples"`
	MaxTurns    int                `json:"max_turns"`
	Shard       Shard              `json:"shard"`
	Caps        protocol.ObsCaps   `json:"observation_caps"`
	ExecTimeout time.Duration      `json:"exec_timeout_ns"`
	Ordered     bool               `json:"ordered,omitempty"`
	Chat        chat.Options       `json:"chat_options"`
}

// Disagreement names the first field where m (the run dir's) and o (this invocation's) differ,
// "" when they agree. Created and Toolkit are not compared.
func (m *Manifest) Disagreement(o *Manifest) string {
	fields := []struct {
		name string
		a, b any
	}{
		{"protocol", m.Protocol, o.Protocol},
		{"tasks.spec", m.Tasks.Spec, o.Tasks.Spec},
		{"tasks.limit", m.Tasks.Limit, o.Tasks.Limit},
		{"tasks.count", m.Tasks.Count, o.Tasks.Count},
		{"tasks.digest", m.Tasks.Digest, o.Tasks.Digest},
		{"teachers", m.Teachers, o.Teachers},
		{"dialects", m.Dialects, o.Dialects},
		{"samples", m.Samples, o.Samples},
		{"max_turns", m.MaxTurns, o.MaxTurns},
		{"shard", m.Shard, o.Shard},
		{"observation_caps", m.Caps, o.Caps},
		{"exec_timeout_ns", m.ExecTimeout, o.ExecTimeout},
		{"ordered", m.Ordered, o.Ordered},
		{"chat_options", m.Chat, o.Chat},
	}
	for _, f := range fields {
		ja, _ := json.Marshal(f.a)
		jb, _ := json.Marshal(f.b)
		if !bytes.Equal(ja, jb) {
			return fmt.Sprintf("%s: run dir has %s, this run has %s", f.name, ja, jb)
		}
	}
	return ""
}

// FormatVersion is the manifest's format version, RunFormatV1 when the field is absent.
func (m *Manifest) FormatVersion() string {
	if m.Format == "" {
		return RunFormatV1
	}
	return m.Format
}

// ReadManifest reads dir's manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	var m Manifest
	if err := readManifest(dir, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Trajectories streams the committed trajectories of a run dir (Lines: every shard up to
// the end of its last journaled line, in shard order), decoding each line by the manifest's
// format, one trajectory in memory at a time. A line that does not decode, or is over
// MaxLine, is yielded as a *BadLine error (naming the shard, the line and the key
// the journal records for it) and the sequence goes on when the consumer's loop does: a reader
// of damaged run dirs skips it (SkipBad), one that must not lose a line stops there. Any other
// error ends the sequence.
func Trajectories(dir string) iter.Seq2[*Trajectory, error] {
	return func(yield func(*Trajectory, error) bool) {
		if err := Check(dir); err != nil {
			yield(nil, err)
			return
		}
		man, err := ReadManifest(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		var decode func([]byte, *Trajectory) error
		switch f := man.FormatVersion(); f {
		case RunFormat:
			decode = func(line []byte, tr *Trajectory) error { return json.Unmarshal(line, tr) }
		case RunFormatV1:
			decode = decodeV1
		default:
			yield(nil, fmt.Errorf("run dir %s has format %s; this build reads %s and %s: update chainedsql", dir, f, RunFormatV1, RunFormat))
			return
		}
		for l, err := range Lines(dir) {
			if err != nil {
				if _, bad := SkipBad(err); bad {
					if !yield(nil, err) {
						return
					}
					continue
				}
				yield(nil, err)
				return
			}
			tr := new(Trajectory)
			if err := decode(l.Data, tr); err != nil {
				err = &BadLine{File: l.Shard, Path: l.Path, N: l.N, Bytes: int64(len(l.Data)) + 1, Key: l.Key, Err: fmt.Errorf("not a trajectory: %w", err)}
				if !yield(nil, err) {
					return
				}
				continue
			}
			if !yield(tr, nil) {
				return
			}
		}
	}
}

// SkipBad reports whether err, an error of Trajectories, is a damaged line that a reader may
// skip, and returns it.
func SkipBad(err error) (*BadLine, bool) {
	var b *BadLine
	ok := errors.As(err, &b)
	return b, ok
}

// ReadRun calls fn for every committed trajectory of the run dir (see Trajectories), stopping at
// the first error, a damaged line included.
func ReadRun(dir string, fn func(*Trajectory) error) error {
	for tr, err := range Trajectories(dir) {
		if err != nil {
			return err
		}
		if err := fn(tr); err != nil {
			return err
		}
	}
	return nil
}
