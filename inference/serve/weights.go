package serve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/student"
	"github.com/chainedsql/chainedsql/internal/regular"
)

// Model is a Backend holding memory that Close releases (*student.Student is one).
type Model interface {
	Backend
	// Close releases the backend; requests still running in it fail.
	Close() error
}

// Loader loads the weights in dir as a model to replace cur, or says why they cannot replace it
// (*student.Student's Successor is one, wrapped, with open as its Options.Opener). It opens
// every file it reads through open: confined to the Swap's root (regular.Confine) after
// Confine, plain before (nil).
type Loader[M Model] func(ctx context.Context, dir string, cur M, open *regular.Opener) (M, error)

// Errors of Swap.Reload besides the loader's.
var (
	// ErrReloading is returned while another reload is loading.
	ErrReloading = errors.New("serve: a weights reload is already running; retry when it ends")
	// ErrClosed is returned by a Swap that was closed.
	ErrClosed = errors.New("serve: the server is closing")
	// ErrOutsideRoot is returned for a directory outside the root a Swap was confined to.
	ErrOutsideRoot = regular.ErrOutsideRoot
)

// WeightsInfo describes the weights a Swap serves.
type WeightsInfo struct {
	// Object is "weights".
	Object string `json:"object"`
	// Model is the model id.
	Model string `json:"model"`
	// Path is the absolute weights directory with every symbolic link resolved: the directory
	// the weights were read from, so that a checkpoint named through a link (a trainer's
	// "latest") is told apart from the next one named through the same link.
	Path string `json:"path"`
	// RequestedPath is the directory as it was named (absolute, links not resolved); it equals
	// Path when no link was followed.
	RequestedPath string `json:"requested_path"`
	// Version counts the weights served, from 1 (the ones the server started with).
	Version int64 `json:"version"`
	// LoadedAt is when the weights started serving (Unix seconds).
	LoadedAt int64 `json:"loaded_at"`
	// LoadSeconds is how long loading them took (0 for the first weights).
	LoadSeconds float64 `json:"load_seconds"`
	// Draining counts earlier weights still finishing requests that started on them.
	Draining int `json:"draining"`
}

// Fingerprint is the system_fingerprint of replies computed with weights version v.
func Fingerprint(v int64) string { return fmt.Sprintf("weights-v%d", v) }

// Swap is a Backend whose weights can be replaced while it serves (POST /v1/weights): Reload
// loads the new weights fully before it swaps them in; requests that started on the old ones
// finish on them, and the old ones are closed when the last of those ends. Swap is safe for
// concurrent use.
type Swap[M Model] struct {
	load    Loader[M]
	loading sync.Mutex // held by the one reload allowed at a time
	root    string     // Confine's directory, links resolved; "" for none (held under loading)

	mu       sync.Mutex
	cur      *weights[M]
	draining map[*weights[M]]bool
	closed   bool
}

// weights is one version of the served weights and the requests running on it.
type weights[M Model] struct {
	m       M
	info    WeightsInfo
	refs    int
	retired bool
	done    bool // m was closed
}

// NewSwap serves m, loaded from dir, until a Reload replaces it through load.
func NewSwap[M Model](m M, dir string, load Loader[M]) *Swap[M] {
	abs, resolved, err := resolveDir(dir)
	if err != nil {
		abs, resolved = dir, dir
	}
	w := &weights[M]{m: m, info: WeightsInfo{Object: "weights", Model: m.ModelID(), Path: resolved, RequestedPath: abs, Version: 1, LoadedAt: time.Now().Unix()}}
	return &Swap[M]{load: load, cur: w, draining: map[*weights[M]]bool{}}
}

// acquire returns the current weights, counted as in use until release.
func (s *Swap[M]) acquire() (*weights[M], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.cur.refs++
	return s.cur, nil
}

// release ends a use of w; the last use of retired weights closes them.
func (s *Swap[M]) release(w *weights[M]) {
	s.mu.Lock()
	w.refs--
	last := w.retired && w.refs == 0 && !w.done
	if last {
		w.done = true
		delete(s.draining, w)
	}
	s.mu.Unlock()
	if last {
		w.m.Close()
	}
}

// ModelID is the model's name.
func (s *Swap[M]) ModelID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.info.Model
}

// Stream answers msgs with the current weights (see Backend).
func (s *Swap[M]) Stream(ctx context.Context, msgs []chat.Message, opts chat.Options, fn func(delta string) error) (chat.Reply, error) {
	b, _, release, err := s.use()
	if err != nil {
		return chat.Reply{}, err
	}
	defer release()
	return b.Stream(ctx, msgs, opts, fn)
}

// Complete answers msgs with the current weights (see Backend).
func (s *Swap[M]) Complete(ctx context.Context, msgs []chat.Message, opts chat.Options, x student.Sample, fn func(student.Delta) error) ([]student.Choice, error) {
	b, _, release, err := s.use()
	if err != nil {
		return nil, err
	}
	defer release()
	return b.Complete(ctx, msgs, opts, x, fn)
}

// use returns the current weights' backend and version, in use until release is called.
func (s *Swap[M]) use() (Backend, int64, func(), error) {
	m, info, release, err := s.Acquire()
	if err != nil {
		return nil, 0, nil, err
	}
	return m, info.Version, release, nil
}

// Acquire returns the weights serving now and their description, held open until release is
// called (once): a Reload meanwhile serves new requests with its weights, and these close
// after the last holder releases them. A rollout holds one version from start to end.
func (s *Swap[M]) Acquire() (m M, info WeightsInfo, release func(), err error) {
	w, err := s.acquire()
	if err != nil {
		return m, WeightsInfo{}, nil, err
	}
	return w.m, w.info, func() { s.release(w) }, nil
}

// Weights describes the weights serving new requests.
func (s *Swap[M]) Weights() WeightsInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.cur.info
	info.Draining = len(s.draining)
	return info
}

// Reload loads the weights in dir and, once they are loaded, serves new requests with them;
// requests running on the old weights finish on them. On any error (a bad or incompatible
// checkpoint, ErrReloading, ErrClosed, ctx done before the swap) the old weights keep serving.
func (s *Swap[M]) Reload(ctx context.Context, dir string) (WeightsInfo, error) {
	if !s.loading.TryLock() {
		return WeightsInfo{}, ErrReloading
	}
	defer s.loading.Unlock()
	var open *regular.Opener
	if s.root != "" { // what the loader opens is checked too: a link re-pointed since is refused
		open = regular.Confine(s.root)
	}
	abs, resolved, err := s.resolve(dir, open)
	if err != nil {
		return WeightsInfo{}, err
	}
	if err := s.inRoot(abs, resolved, open); err != nil {
		return WeightsInfo{}, err
	}
	cur, err := s.acquire() // held through the load, so that the weights compared against stay open
	if err != nil {
		return WeightsInfo{}, err
	}
	start := time.Now()
	m, err := s.load(ctx, resolved, cur.m, open) // the resolved directory: a link moved meanwhile changes nothing
	if err == nil && ctx.Err() != nil {
		m.Close()
		err = fmt.Errorf("serve: reload of %s abandoned: %w", resolved, ctx.Err())
	}
	if err != nil {
		s.release(cur)
		return WeightsInfo{}, err
	}
	took := time.Since(start)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(cur)
		m.Close()
		return WeightsInfo{}, ErrClosed
	}
	s.cur = &weights[M]{m: m, info: WeightsInfo{Object: "weights", Model: cur.info.Model, Path: resolved, RequestedPath: abs, Version: cur.info.Version + 1, LoadedAt: time.Now().Unix(), LoadSeconds: took.Seconds()}}
	cur.retired = true
	s.draining[cur] = true
	s.mu.Unlock()
	s.release(cur) // closes the old weights now when no request runs on them
	return s.Weights(), nil
}

// Confine makes every later Reload refuse (ErrOutsideRoot) a directory that is not root or
// below it once its symbolic links are resolved (named through "..", or a link leading out), or
// that holds a .json or .safetensors entry (what a loader reads) that is a link leading out of
// root: a client of POST /v1/weights can then have the server read weights only where it was
// told at start (`student serve --weights-root`). root must be an existing directory; its own
// links are resolved now. The paths are checked when the request arrives, and every file the
// loader opens is opened beneath root (the Opener it is handed, regular.Confine): a link
// re-pointed out of root in between (TestReloadConfinedRepointed), or a shard not named
// .safetensors that links out (TestReloadConfinedShardLink), is refused as well, unopened. Only
// this Swap's loads are confined: another load of the same directory meanwhile (another
// server's, one unconfined) opens through its own Opener (TestReloadConfinedUncoupled).
func (s *Swap[M]) Confine(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("weights root: %w", err)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return fmt.Errorf("weights root %s is not a directory", root)
	}
	s.loading.Lock()
	s.root = resolved
	s.loading.Unlock()
	return nil
}

// Root is the directory Confine confined reloads to, links resolved ("" for none).
func (s *Swap[M]) Root() string {
	s.loading.Lock()
	defer s.loading.Unlock()
	return s.root
}

// resolve returns dir made absolute, and that with its symbolic links resolved, or why it may
// not be loaded. Unconfined (open nil) it is resolveDir. Confined, it tells a client nothing of
// the files outside the root (an oracle of their existence or of where links there lead): a
// directory named below the root is resolved beneath it by open, without looking outside, and
// a link on its way that leads out is ErrOutsideRoot, by its own text, whether what it names
// exists or not, unless it leads back into the root (a link naming the root through a link to
// it); a directory named elsewhere is loaded only when its links lead into the root, and is
// otherwise refused with one message, naming it as given, whatever it is or leads to.
func (s *Swap[M]) resolve(dir string, open *regular.Opener) (abs, resolved string, err error) {
	if open == nil {
		abs, resolved, err = resolveDir(dir)
		if err != nil {
			return "", "", fmt.Errorf("serve: weights directory %q: %w", dir, err)
		}
		return abs, resolved, nil
	}
	if abs, err = filepath.Abs(dir); err != nil {
		return "", "", fmt.Errorf("serve: weights directory %q: %w", dir, err)
	}
	if within(s.root, abs) {
		resolved, err = open.Resolve(abs)
		if errors.Is(err, ErrOutsideRoot) {
			// A link naming the root by another path (a link to it) leads back in: loaded, as
			// before; any other is refused by its own text, whatever lies outside.
			if r, e := filepath.EvalSymlinks(abs); e == nil && within(s.root, r) {
				return abs, r, nil
			}
			return "", "", fmt.Errorf("serve: weights directory %s: %w", abs, err)
		}
		if err != nil {
			return abs, abs, nil // missing: the loader says why
		}
		return abs, resolved, nil
	}
	if resolved, err = filepath.EvalSymlinks(abs); err != nil || !within(s.root, resolved) {
		return "", "", fmt.Errorf("serve: weights directory %s is %w %s: this server loads weights only from there (its --weights-root)", abs, ErrOutsideRoot, s.root)
	}
	return abs, resolved, nil
}

// inRoot says whether resolved, the directory named abs with its links resolved (within the
// root), may be loaded: nil without a root, else ErrOutsideRoot (wrapped) when one of the
// .json and .safetensors entries it holds (what a loader reads) is a link that leads out of the
// root, whether what it names exists or not (open.Resolve looks at nothing outside the root),
// or when resolved itself now leads out (listed through open.ReadDir, beneath the root).
// An entry whose link does not resolve within the root is left to the loader, which refuses it
// with its reason.
func (s *Swap[M]) inRoot(abs, resolved string, open *regular.Opener) error {
	if open == nil {
		return nil
	}
	// Listed through open: resolved swapped for a link out since resolve is refused by its own
	// name, its entries outside the root never listed (os.ReadDir followed it, and the refusal
	// named a .json link found there).
	entries, err := open.ReadDir(resolved)
	if errors.Is(err, ErrOutsideRoot) {
		return fmt.Errorf("serve: weights directory %s: %w", abs, err)
	}
	if err != nil {
		return nil // missing or unreadable: the loader says why
	}
	for _, e := range entries {
		name := e.Name()
		if e.Type()&os.ModeSymlink == 0 || !(strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".safetensors")) {
			continue
		}
		if _, err := open.Resolve(filepath.Join(resolved, name)); errors.Is(err, ErrOutsideRoot) {
			return fmt.Errorf("serve: weights directory %s: %w", abs, err)
		}
	}
	return nil
}

// within says whether path is root or below it (both clean and absolute).
func within(root, path string) bool { return regular.Within(root, path) }

// resolveDir returns dir made absolute, and that with its symbolic links resolved; a directory
// that does not resolve (missing, a dangling link) is returned unresolved, for the loader to
// refuse with its reason.
func resolveDir(dir string) (abs, resolved string, err error) {
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	resolved, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return abs, abs, nil
	}
	return abs, resolved, nil
}

// Close refuses new requests and reloads and closes every version of the weights at once:
// requests still running fail.
func (s *Swap[M]) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var ms []M
	for _, w := range append([]*weights[M]{s.cur}, slices.Collect(maps.Keys(s.draining))...) {
		if !w.done {
			w.done, w.retired = true, true
			ms = append(ms, w.m)
		}
	}
	clear(s.draining)
	s.mu.Unlock()
	var err error
	for _, m := range ms {
		err = errors.Join(err, m.Close())
	}
	return err
}
