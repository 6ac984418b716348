// Package rundir holds the run dir that distill writes and curate, evaluate and the viewer read:
// what a line holds (Trajectory, decoded in either format by Trajectories) and what it came to
// (Outcome), the manifest, and below them the layout: the file names, manifest.json created or
// checked once, the journal of committed lines, torn-tail JSONL reading, the shard writer
// (commit, rotation, resume repair) and the raw line readers.
//
// Layout (docs/DESIGN.md, "Files on disk"):
//
//	manifest.json                      what the run is; a resume must agree with it
//	shards/TEACHER.DIALECT.NNNN.jsonl  one line per committed result, append-only, rotated by size/lines
//	journal                            one JSON line per committed shard line
//	failures.jsonl                     terminal failures with their reasons
//	usage.json                         per-teacher usage, written atomically
//
// Crash safety rests on the journal alone. A line is committed when its journal line is on disk:
// the writer appends shard lines, fsyncs the shards, then appends the journal lines (which record
// the shard file and the byte offset where each line ends) and fsyncs the journal. On resume each
// shard is cut back to the end of its last journaled line. That removes a torn last line and also
// a complete line whose journal entry never made it (its key is simply redone), so a key is never
// in the shards twice and nothing journaled is lost. Readers (Lines) read only the journaled
// prefix of every shard, so they are correct even on a run dir that crashed and was not resumed
// yet, or one that is still being written.
//
// No line is longer than MaxLine: Commit refuses one. The readers skip a line over it (left by
// an earlier version) and a failures.jsonl line that does not decode, reporting each as a
// BadLine; a journal line that does not decode (before its last) stays an error, since the
// journal alone says what is committed (docs/DESIGN.md, "Bounded texts").
package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/atomicfile"
)

// File names inside a run dir.
const (
	ManifestFile = "manifest.json"
	JournalFile  = "journal"
	FailuresFile = "failures.jsonl"
	UsageFile    = "usage.json"
	ShardsDir    = "shards"
)

// JournalEntry is one line of the journal: a committed shard line and where it ends.
type JournalEntry struct {
	Key     string           `json:"key"`
	Task    string           `json:"task"`
	Teacher string           `json:"teacher"`
	Dialect datasets.Dialect `json:"dialect"`
	Sample  int              `json:"sample"`
	Shard   string           `json:"shard"`
	End     int64            `json:"end"`
}

// Failure is one line of failures.jsonl.
type Failure struct {
	Key     string           `json:"key"`
	Task    string           `json:"task"`
	Teacher string           `json:"teacher"`
	Dialect datasets.Dialect `json:"dialect"`
	Sample  int              `json:"sample"`
	// Reason is a short class ("policy:rate_limited", "database", "schema", ...); Error the text.
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	Turns  int       `json:"turns"`
	Time   time.Time `json:"time"`
}

// TeacherUsage is one teacher's entry of usage.json, summed over every invocation of the run.
type TeacherUsage struct {
	Model        string     `json:"model,omitempty"`
	Trajectories int        `json:"trajectories"`
	Failed       int        `json:"failed"`
	Turns        int        `json:"turns"`
	Requests     int        `json:"requests"`
	Retries      int        `json:"retries"`
	Usage        chat.Usage `json:"usage"`
	CostUSD      float64    `json:"cost_usd"`
	// Client is the policy's own counters in the latest invocation (teachers: requests, retries
	// and failures by reason), when it has them.
	Client any `json:"client,omitempty"`
}

// Usage is usage.json.
type Usage struct {
	Updated  time.Time                `json:"updated"`
	Teachers map[string]*TeacherUsage `json:"teachers"`
}

// ShardName is the file name of shard seq of (teacher, dialect).
func ShardName(teacher string, d datasets.Dialect, seq int) string {
	return fmt.Sprintf("%s.%s.%04d.jsonl", teacher, d, seq)
}

// parseShardName splits TEACHER.DIALECT.NNNN.jsonl.
func parseShardName(name string) (teacher string, d datasets.Dialect, seq int, ok bool) {
	base, found := strings.CutSuffix(name, ".jsonl")
	if !found {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(base, '.')
	if i < 0 {
		return "", "", 0, false
	}
	seq, err := strconv.Atoi(base[i+1:])
	if err != nil || seq < 0 {
		return "", "", 0, false
	}
	base = base[:i]
	j := strings.LastIndexByte(base, '.')
	if j <= 0 {
		return "", "", 0, false
	}
	return base[:j], datasets.Dialect(base[j+1:]), seq, true
}

// ShardFiles lists the shard files of dir in order (teacher, dialect, sequence).
func ShardFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, ShardsDir))
	if err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	type sh struct {
		name, group string
		seq         int
	}
	var out []sh
	for _, de := range entries {
		if t, d, seq, ok := parseShardName(de.Name()); ok && !de.IsDir() {
			out = append(out, sh{de.Name(), t + "." + string(d), seq})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].group != out[j].group {
			return out[i].group < out[j].group
		}
		return out[i].seq < out[j].seq
	})
	names := make([]string, len(out))
	for i, s := range out {
		names[i] = s.name
	}
	return names, nil
}

// Check returns an error naming dir unless it is a run dir (it holds a manifest.json).
func Check(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("%s is not a run dir: %w", dir, err)
	}
	return nil
}

// readManifest decodes dir's manifest.json into v.
func readManifest(dir string, v any) error {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return fmt.Errorf("run dir %s: %w", dir, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("run dir %s: %s: %w", dir, ManifestFile, err)
	}
	return nil
}

// ReadUsage reads dir's usage.json; a missing file is an empty Usage.
func ReadUsage(dir string) (*Usage, error) {
	u := &Usage{Teachers: map[string]*TeacherUsage{}}
	data, err := os.ReadFile(filepath.Join(dir, UsageFile))
	if errors.Is(err, os.ErrNotExist) {
		return u, nil
	}
	if err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	if err := json.Unmarshal(data, u); err != nil {
		return nil, fmt.Errorf("run dir %s: %s: %w", dir, UsageFile, err)
	}
	if u.Teachers == nil {
		u.Teachers = map[string]*TeacherUsage{}
	}
	return u, nil
}

// filePerm is the mode of the files a run dir holds, less the umask.
const filePerm = 0o644

// WriteUsage replaces dir's usage.json with u (indented JSON), atomically.
func WriteUsage(dir string, u *Usage) error {
	return atomicfile.WriteJSON(filepath.Join(dir, UsageFile), u, filePerm)
}
