package distill

// Run dir layout (docs/DESIGN.md):
//
//	manifest.json                      what the run is; a resume must agree with it
//	shards/TEACHER.DIALECT.NNNN.jsonl  one trajectory per line, append-only, rotated by size/lines
//	journal                            one JSON line per committed trajectory
//	failures.jsonl                     terminal failures with their reasons
//	usage.json                         per-teacher usage, written atomically
//
// Crash safety rests on the journal alone. A trajectory is committed when its journal line is on
// disk: the writer appends shard lines, fsyncs the shards, then appends the journal lines (which
// record the shard file and the byte offset where each line ends) and fsyncs the journal. On
// resume each shard is cut back to the end of its last journaled line. That removes a torn last
// line and also a complete line whose journal entry never made it (its key is simply redone), so
// a key is never in the shards twice and nothing journaled is lost. Readers (ReadRun) read only
// the journaled prefix of every shard, so they are correct even on a run dir that crashed and
// was not resumed yet, or one that is still being written.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// maxLine bounds one JSONL line when reading (a trajectory with five long reasoning turns is far
// below it).
const maxLine = 64 << 20

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
	Caps        ObsCaps            `json:"observation_caps"`
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

// format is the manifest's format version, RunFormatV1 when the field is absent.
func (m *Manifest) format() string {
	if m.Format == "" {
		return RunFormatV1
	}
	return m.Format
}

// ReadManifest reads dir's manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("run dir %s: %s: %w", dir, ManifestFile, err)
	}
	return &m, nil
}

// JournalEntry is one line of the journal: a committed trajectory and where its shard line ends.
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

// readJSONL reads path line by line into fn. It returns the byte length of the valid prefix: a
// last line without its newline, or a last line that does not decode, is torn and not passed on.
// A bad line elsewhere is an error naming the file and line. A missing file is empty.
func readJSONL(path string, limit int64, fn func(line []byte) error) (valid int64, torn bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var r io.Reader = f
	if limit >= 0 {
		r = io.LimitReader(f, limit)
	}
	br := bufio.NewReaderSize(r, 1<<16)
	var (
		pos     int64
		lineNo  int
		pending error // decode error of the previous line: fatal unless that line was the last
	)
	for {
		line, rerr := readLine(br)
		if len(line) == 0 && rerr == io.EOF {
			break
		}
		if pending != nil {
			return pos, false, pending
		}
		lineNo++
		if rerr == io.EOF { // no trailing newline: torn
			return pos, true, nil
		}
		if rerr != nil {
			return pos, false, fmt.Errorf("%s line %d: %w", path, lineNo, rerr)
		}
		body := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(body)) > 0 {
			if err := fn(body); err != nil {
				var de *decodeError
				if errors.As(err, &de) {
					pending = fmt.Errorf("%s line %d: %w", path, lineNo, de.err)
					continue
				}
				return pos, false, err
			}
		}
		pos += int64(len(line))
	}
	if pending != nil {
		// The last line does not decode: a torn write that happened to end in a newline.
		return pos, true, nil
	}
	return pos, false, nil
}

// decodeError marks a line that is not valid JSON (as opposed to an error of the callback).
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// readLine reads one line including its newline, up to maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			if len(buf) > maxLine {
				return nil, fmt.Errorf("line longer than %d bytes", maxLine)
			}
			continue
		}
		return buf, err
	}
}

func decodeInto(v any) func([]byte) error {
	return func(line []byte) error {
		if err := json.Unmarshal(line, v); err != nil {
			return &decodeError{err}
		}
		return nil
	}
}

// journalState is what the journal says about a run dir.
type journalState struct {
	done      map[string]struct{}
	shardEnds map[string]int64
	valid     int64
	torn      bool
}

func readJournal(dir string) (*journalState, error) {
	st := &journalState{done: map[string]struct{}{}, shardEnds: map[string]int64{}}
	var e JournalEntry
	valid, torn, err := readJSONL(filepath.Join(dir, JournalFile), -1, func(line []byte) error {
		e = JournalEntry{}
		if err := decodeInto(&e)(line); err != nil {
			return err
		}
		if e.Key == "" || e.Shard == "" || e.End <= 0 {
			return &decodeError{fmt.Errorf("journal entry without key, shard or end")}
		}
		st.done[e.Key] = struct{}{}
		if e.End > st.shardEnds[e.Shard] {
			st.shardEnds[e.Shard] = e.End
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run dir %s: journal: %w", dir, err)
	}
	st.valid, st.torn = valid, torn
	return st, nil
}

// shardFile is an open shard being appended to.
type shardFile struct {
	name  string
	f     *os.File
	size  int64
	lines int
	seq   int
	dirty bool
}

// runDir is an open run dir with a single writer.
type runDir struct {
	mu       sync.Mutex // guards done and failed against the producers' reads
	dir      string
	journal  *os.File
	failures *os.File
	done     map[string]struct{}
	failed   map[string]Failure
	shards   map[string]*shardFile // by TEACHER.DIALECT
	nextSeq  map[string]int        // next free sequence number by TEACHER.DIALECT
	maxBytes int64
	maxLines int
	// Repairs lists what resume cut or fixed, for the log.
	repairs []string
}

// openRunDir creates or resumes dir for manifest m; a run dir whose manifest holds one of
// olderDigests for the same tasks resumes as if it held m's.
func openRunDir(dir string, m *Manifest, olderDigests []string, maxBytes int64, maxLines int) (*runDir, error) {
	if err := os.MkdirAll(filepath.Join(dir, ShardsDir), 0o755); err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	mpath := filepath.Join(dir, ManifestFile)
	if _, err := os.Stat(mpath); err == nil {
		old, err := ReadManifest(dir)
		if err != nil {
			return nil, err
		}
		if f := old.format(); f != RunFormat {
			return nil, fmt.Errorf("run dir %s has format %s, and this distill writes %s: it cannot add to it; use another --out (curate reads both formats)", dir, f, RunFormat)
		}
		if old.Tasks.Digest != m.Tasks.Digest && slices.Contains(olderDigests, old.Tasks.Digest) {
			same := *m
			same.Tasks.Digest = old.Tasks.Digest
			m = &same
		}
		if d := old.Disagreement(m); d != "" {
			return nil, fmt.Errorf("run dir %s was made by a different run (%s); use another --out, or repeat the original command to resume", dir, d)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		data, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if err := writeFileAtomic(mpath, append(data, '\n')); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}

	rd := &runDir{dir: dir, failed: map[string]Failure{}, shards: map[string]*shardFile{}, nextSeq: map[string]int{}, maxBytes: maxBytes, maxLines: maxLines}
	js, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	rd.done = js.done
	jpath := filepath.Join(dir, JournalFile)
	rd.journal, err = os.OpenFile(jpath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run dir %s: journal: %w", dir, err)
	}
	if err := cutTo(rd.journal, js.valid, &rd.repairs, JournalFile); err != nil {
		rd.close()
		return nil, err
	}

	// Cut every shard back to its last journaled line.
	entries, err := os.ReadDir(filepath.Join(dir, ShardsDir))
	if err != nil {
		rd.close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	for _, de := range entries {
		teacher, d, seq, ok := parseShardName(de.Name())
		if !ok || de.IsDir() {
			continue
		}
		group := teacher + "." + string(d)
		if seq+1 > rd.nextSeq[group] {
			rd.nextSeq[group] = seq + 1
		}
		end := js.shardEnds[de.Name()]
		info, err := de.Info()
		if err != nil {
			rd.close()
			return nil, fmt.Errorf("run dir %s: %w", dir, err)
		}
		switch {
		case info.Size() < end:
			rd.close()
			return nil, fmt.Errorf("run dir %s: shard %s has %d bytes but the journal records %d: the run dir is damaged", dir, de.Name(), info.Size(), end)
		case info.Size() > end:
			f, err := os.OpenFile(filepath.Join(dir, ShardsDir, de.Name()), os.O_RDWR, 0o644)
			if err != nil {
				rd.close()
				return nil, fmt.Errorf("run dir %s: %w", dir, err)
			}
			err = cutTo(f, end, &rd.repairs, filepath.Join(ShardsDir, de.Name()))
			f.Close()
			if err != nil {
				rd.close()
				return nil, err
			}
		}
	}
	for name := range js.shardEnds {
		if _, err := os.Stat(filepath.Join(dir, ShardsDir, name)); err != nil {
			rd.close()
			return nil, fmt.Errorf("run dir %s: the journal records shard %s, which is missing: the run dir is damaged", dir, name)
		}
	}

	fpath := filepath.Join(dir, FailuresFile)
	var fl Failure
	fvalid, _, err := readJSONL(fpath, -1, func(line []byte) error {
		fl = Failure{}
		if err := decodeInto(&fl)(line); err != nil {
			return err
		}
		rd.failed[fl.Key] = fl
		return nil
	})
	if err != nil {
		rd.close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	rd.failures, err = os.OpenFile(fpath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		rd.close()
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	if err := cutTo(rd.failures, fvalid, &rd.repairs, FailuresFile); err != nil {
		rd.close()
		return nil, err
	}
	return rd, nil
}

// cutTo truncates f to n bytes when longer, fsyncs, and leaves the offset at the end.
func cutTo(f *os.File, n int64, repairs *[]string, name string) error {
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if info.Size() > n {
		if err := f.Truncate(n); err != nil {
			return fmt.Errorf("%s: cutting the torn tail: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*repairs = append(*repairs, fmt.Sprintf("cut %d uncommitted bytes from %s", info.Size()-n, name))
	}
	if _, err := f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// pending is one result waiting for the writer.
type pending struct {
	tr   *Trajectory
	line []byte // the trajectory's JSON, no newline
	fail *Failure
}

// commit writes a batch: shard lines, fsync shards, journal lines, fsync journal; failures,
// fsync failures. It skips trajectories whose key is already done. It returns the committed
// trajectories and failures.
func (rd *runDir) commit(batch []pending) (done []*Trajectory, failed []*Failure, err error) {
	var jbuf, fbuf bytes.Buffer
	enc := json.NewEncoder(&jbuf)
	for _, p := range batch {
		if p.fail != nil {
			if _, ok := rd.done[p.fail.Key]; ok {
				continue
			}
			line, err := json.Marshal(p.fail)
			if err != nil {
				return nil, nil, fmt.Errorf("failure record: %w", err)
			}
			fbuf.Write(line)
			fbuf.WriteByte('\n')
			failed = append(failed, p.fail)
			continue
		}
		if _, ok := rd.done[p.tr.Key]; ok {
			continue
		}
		sf, err := rd.shardFor(p.tr.Teacher, p.tr.Dialect, int64(len(p.line)+1))
		if err != nil {
			return nil, nil, err
		}
		buf := make([]byte, 0, len(p.line)+1)
		buf = append(append(buf, p.line...), '\n')
		if _, err := sf.f.Write(buf); err != nil {
			return nil, nil, fmt.Errorf("shard %s: %w", sf.name, err)
		}
		sf.size += int64(len(buf))
		sf.lines++
		sf.dirty = true
		if err := enc.Encode(JournalEntry{Key: p.tr.Key, Task: p.tr.TaskID, Teacher: p.tr.Teacher, Dialect: p.tr.Dialect, Sample: p.tr.Sample, Shard: sf.name, End: sf.size}); err != nil {
			return nil, nil, fmt.Errorf("journal entry: %w", err)
		}
		rd.done[p.tr.Key] = struct{}{}
		done = append(done, p.tr)
	}
	for _, sf := range rd.shards {
		if sf.dirty {
			if err := sf.f.Sync(); err != nil {
				return nil, nil, fmt.Errorf("shard %s: fsync: %w", sf.name, err)
			}
			sf.dirty = false
		}
	}
	if jbuf.Len() > 0 {
		if _, err := rd.journal.Write(jbuf.Bytes()); err != nil {
			return nil, nil, fmt.Errorf("journal: %w", err)
		}
		if err := rd.journal.Sync(); err != nil {
			return nil, nil, fmt.Errorf("journal: fsync: %w", err)
		}
	}
	if fbuf.Len() > 0 {
		if _, err := rd.failures.Write(fbuf.Bytes()); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", FailuresFile, err)
		}
		if err := rd.failures.Sync(); err != nil {
			return nil, nil, fmt.Errorf("%s: fsync: %w", FailuresFile, err)
		}
		for _, f := range failed {
			rd.failed[f.Key] = *f
		}
	}
	return done, failed, nil
}

// shardFor returns the shard to append n bytes of (teacher, dialect) to, rotating when the
// current one is full.
func (rd *runDir) shardFor(teacher string, d datasets.Dialect, n int64) (*shardFile, error) {
	group := teacher + "." + string(d)
	sf := rd.shards[group]
	if sf != nil && sf.lines > 0 && (sf.size+n > rd.maxBytes || sf.lines >= rd.maxLines) {
		if sf.dirty {
			if err := sf.f.Sync(); err != nil {
				return nil, fmt.Errorf("shard %s: fsync: %w", sf.name, err)
			}
		}
		if err := sf.f.Close(); err != nil {
			return nil, fmt.Errorf("shard %s: %w", sf.name, err)
		}
		delete(rd.shards, group)
		sf = nil
	}
	if sf != nil {
		return sf, nil
	}
	// Continue the newest existing shard of the group when it has room, else start a new one.
	seq := rd.nextSeq[group]
	if seq > 0 {
		name := ShardName(teacher, d, seq-1)
		path := filepath.Join(rd.dir, ShardsDir, name)
		if info, err := os.Stat(path); err == nil && info.Size()+n <= rd.maxBytes {
			lines, err := countLines(path)
			if err != nil {
				return nil, err
			}
			if lines < rd.maxLines {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return nil, fmt.Errorf("shard %s: %w", name, err)
				}
				sf = &shardFile{name: name, f: f, size: info.Size(), lines: lines, seq: seq - 1}
				rd.shards[group] = sf
				return sf, nil
			}
		}
	}
	name := ShardName(teacher, d, seq)
	f, err := os.OpenFile(filepath.Join(rd.dir, ShardsDir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", name, err)
	}
	if err := atomicfile.SyncDir(filepath.Join(rd.dir, ShardsDir)); err != nil {
		f.Close()
		return nil, err
	}
	rd.nextSeq[group] = seq + 1
	sf = &shardFile{name: name, f: f, seq: seq}
	rd.shards[group] = sf
	return sf, nil
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 1<<16)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
}

func (rd *runDir) close() error {
	var errs []error
	for _, sf := range rd.shards {
		errs = append(errs, sf.f.Close())
	}
	rd.shards = map[string]*shardFile{}
	if rd.journal != nil {
		errs = append(errs, rd.journal.Close())
		rd.journal = nil
	}
	if rd.failures != nil {
		errs = append(errs, rd.failures.Close())
		rd.failures = nil
	}
	return errors.Join(errs...)
}

// writeFileAtomic writes a run-dir file (manifest, usage) through atomicfile, mode 0644 less
// the umask like the shards and journals.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.WriteFile(path, data, 0o644)
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

// Trajectories streams the committed trajectories of a run dir: every shard up to the end of
// its last journaled line, in shard order, one trajectory in memory at a time. A line that does
// not decode inside the committed prefix is an error naming the shard and line.
func Trajectories(dir string) iter.Seq2[*Trajectory, error] {
	return func(yield func(*Trajectory, error) bool) {
		if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
			yield(nil, fmt.Errorf("%s is not a run dir: %w", dir, err))
			return
		}
		man, err := ReadManifest(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		var decode func([]byte, *Trajectory) error
		switch f := man.format(); f {
		case RunFormat:
			decode = func(line []byte, tr *Trajectory) error { return json.Unmarshal(line, tr) }
		case RunFormatV1:
			decode = decodeV1
		default:
			yield(nil, fmt.Errorf("run dir %s has format %s; this build reads %s and %s: update chainedsql", dir, f, RunFormatV1, RunFormat))
			return
		}
		js, err := readJournal(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		names, err := ShardFiles(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		stop := errors.New("stop")
		for _, name := range names {
			end, ok := js.shardEnds[name]
			if !ok {
				continue
			}
			path := filepath.Join(dir, ShardsDir, name)
			lineNo := 0
			_, torn, err := readJSONL(path, end, func(line []byte) error {
				lineNo++
				tr := new(Trajectory)
				if err := decode(line, tr); err != nil {
					return fmt.Errorf("%s line %d: %w", path, lineNo, err)
				}
				if !yield(tr, nil) {
					return stop
				}
				return nil
			})
			if errors.Is(err, stop) {
				return
			}
			if err == nil && torn {
				err = fmt.Errorf("%s: the journaled part ends inside a line: the run dir is damaged", path)
			}
			if err != nil {
				yield(nil, err)
				return
			}
		}
	}
}

// ReadRun calls fn for every committed trajectory of the run dir (see Trajectories), stopping at
// the first error.
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

// ReadFailures returns the failures of a run dir whose keys were not committed later (by a
// --retry-failed run), in file order, the latest record per key.
func ReadFailures(dir string) ([]Failure, error) {
	js, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	latest := map[string]int{}
	var out []Failure
	var fl Failure
	_, _, err = readJSONL(filepath.Join(dir, FailuresFile), -1, func(line []byte) error {
		fl = Failure{}
		if err := decodeInto(&fl)(line); err != nil {
			return err
		}
		if _, ok := js.done[fl.Key]; ok {
			return nil
		}
		if i, ok := latest[fl.Key]; ok {
			out[i] = fl
			return nil
		}
		latest[fl.Key] = len(out)
		out = append(out, fl)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run dir %s: %w", dir, err)
	}
	return out, nil
}

// DoneKeys returns the committed keys of a run dir.
func DoneKeys(dir string) (map[string]struct{}, error) {
	js, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	return js.done, nil
}
