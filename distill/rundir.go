package distill

import (
	"fmt"
	"slices"

	"github.com/chainedsql/chainedsql/rundir"
)

// openRun creates or resumes the run dir for manifest m: a run dir of another format, or whose
// manifest disagrees with m, is refused; one whose manifest holds one of olderDigests for the
// same tasks resumes as if it held m's.
func openRun(dir string, m *rundir.Manifest, olderDigests []string, maxBytes int64, maxLines int) (*rundir.Writer, error) {
	return rundir.Open(dir, rundir.Options{
		Manifest:      m,
		MaxShardBytes: maxBytes,
		MaxShardLines: maxLines,
		Resume: func() error {
			old, err := rundir.ReadManifest(dir)
			if err != nil {
				return err
			}
			if f := old.FormatVersion(); f != rundir.RunFormat {
				return fmt.Errorf("run dir %s has format %s, and this distill writes %s: it cannot add to it; use another --out (curate reads both formats)", dir, f, rundir.RunFormat)
			}
			want := m
			if old.Tasks.Digest != m.Tasks.Digest && slices.Contains(olderDigests, old.Tasks.Digest) {
				same := *m
				same.Tasks.Digest = old.Tasks.Digest
				want = &same
			}
			if d := old.Disagreement(want); d != "" {
				return fmt.Errorf("run dir %s was made by a different run (%s); use another --out, or repeat the original command to resume", dir, d)
			}
			return nil
		},
	})
}
