package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// tempTestCap is the cap on SQLite's temporary files while a test of them runs (lowerTempCap),
// so that filling it takes no gigabyte of disk.
const tempTestCap = 16 << 20

// lowerTempCap lowers the cap on SQLite's temporary files to tempTestCap for the test and starts
// a new high-water mark of them; the test's end sets it back to sqliteTempLimit.
func lowerTempCap(t *testing.T) {
	t.Helper()
	if used := sqliteTempUsed(); used != 0 {
		t.Fatalf("%d bytes of SQLite's temporary files already in use", used)
	}
	sqliteSetTempCap(tempTestCap)
	t.Cleanup(func() { sqliteSetTempCap(sqliteTempLimit) })
	sqliteTempPeakReset()
}

// tempSort is a statement that sorts rows of n 4000-byte random keys: past SQLite's page cache
// (2 MB) the sort spills to temporary files, about 4 KB a row.
func tempSort(n int) string {
	return fmt.Sprintf("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < %d) SELECT n FROM c ORDER BY randomblob(4000)", n)
}

// TestSQLiteTempCap: a sort, DISTINCT or GROUP BY past SQLite's page cache spills to temporary
// files that, before, only the deadline bounded (ORDER BY randomblob(4000) over a recursive CTE
// wrote 445 MiB in a 5 s deadline). Through sqliteTempVFS they count against sqliteTempCap: each
// over 30,000 rows of 4000-byte random values (about 120 MB) over a cap of 16 MiB ends with its
// own error, saying so, having had at most the cap on disk at once; its files' bytes are given
// back when it ends, and the next statement on the same connection runs (a sort that fits in the
// cap included).
func TestSQLiteTempCap(t *testing.T) {
	db := openChinookSQLite(t)
	db.db.SetMaxOpenConns(1) // the next statement runs on the same connection
	lowerTempCap(t)
	const rows = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 30000) "
	for name, q := range map[string]string{
		"ORDER BY": tempSort(30_000),
		"DISTINCT": rows + "SELECT count(*) FROM (SELECT DISTINCT randomblob(4000) FROM c)",
		"GROUP BY": rows + "SELECT count(*) FROM (SELECT randomblob(4000) AS k FROM c GROUP BY k)",
	} {
		t.Run(name, func(t *testing.T) {
			refused := sqliteTempRefused()
			r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{Timeout: 30 * time.Second})
			peak := sqliteTempPeakReset()
			t.Logf("%s %q after %s; temporary files: %d bytes at most at once, %d refused writes", r.Outcome, r.Error, r.Duration.Round(time.Millisecond), peak, sqliteTempRefused()-refused)
			if r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "database or disk is full") || !strings.Contains(r.Error, "temporary files") || !strings.Contains(r.Error, "16 MiB") {
				t.Errorf("past the cap: %s %q; want its error naming the cap on temporary files", r.Outcome, r.Error)
			}
			if peak > tempTestCap || peak < tempTestCap/2 {
				t.Errorf("%d bytes of temporary files at once: want at most the cap, %d, and more than half of it", peak, tempTestCap)
			}
			if sqliteTempRefused() == refused {
				t.Error("no write refused")
			}
			if used := sqliteTempUsed(); used != 0 {
				t.Errorf("%d bytes of temporary files still counted after the statement", used)
			}
			if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Track", sandbox.ExecOptions{}); !r.OK() || r.Rows[0][0] != int64(3503) {
				t.Errorf("the next statement: %s %q %v", r.Outcome, r.Error, r.Rows)
			}
		})
	}
	r := sandboxtest.MustExec(t, db, tempSort(2_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
	peak := sqliteTempPeakReset()
	if !r.OK() || len(r.Rows) != 2_000 {
		t.Errorf("a sort within the cap: %s %q, %d rows", r.Outcome, r.Error, len(r.Rows))
	}
	if peak == 0 || peak > tempTestCap {
		t.Errorf("a sort of 2,000 4 KB keys: %d bytes of temporary files at once; want some, within the cap", peak)
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statement", used)
	}
	if st := db.db.Stats(); st.OpenConnections != 1 {
		t.Errorf("%d connections open: the statements did not share one", st.OpenConnections)
	}
}

// tempHolder returns hold, which starts a sort of 3,000 4 KB keys on a plain connection through
// sqliteTempVFS (to Northwind, closed at the test's end) and returns its rows at the first row:
// about 12 MB of temporary files, more than half of tempTestCap, held until they close.
func tempHolder(t *testing.T) (hold func() *sql.Rows) {
	t.Helper()
	hogDB, err := sql.Open("sqlite3", sqliteDSN(shared.Path(t, "data/multi/northwind/northwind.sqlite")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hogDB.Close() })
	return func() *sql.Rows {
		t.Helper()
		rows, err := hogDB.Query(tempSort(3_000))
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("the holder: no row: %v", rows.Err())
		}
		if used := sqliteTempUsed(); used <= tempTestCap/2 {
			rows.Close()
			t.Fatalf("the holder holds %d bytes of temporary files: want more than half of %d", used, tempTestCap)
		}
		t.Logf("the holder holds %d bytes of temporary files", sqliteTempUsed())
		return rows
	}
}

// TestSQLiteTempHeldByAnother: the cap on temporary files is the process's, shared by every
// task's statements, like the heap's. A statement that passes it while another holds more
// than half (a sort of 3,000 4 KB keys held open at its first row, on a plain connection through
// sqliteTempVFS) waits for its turn and for room, within its time limit: if the holder keeps
// them it fails with sandbox.ErrBusy, the database's failure, not its own; if the holder lets
// go meanwhile it runs again and succeeds. The holder's bytes are given back when its rows close.
func TestSQLiteTempHeldByAnother(t *testing.T) {
	db := openChinookSQLite(t)
	lowerTempCap(t)
	hold := tempHolder(t)
	victim := tempSort(2_000) // alone about 8 MB: more than the holder leaves

	rows := hold()
	var waited []bool
	r, err := db.Exec(context.Background(), victim, sandbox.ExecOptions{Timeout: time.Second, Waiting: func(w bool) { waited = append(waited, w) }})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "temporary files") {
		t.Errorf("a statement past the cap while another holds most of it: %+v, %v; want sandbox.ErrBusy naming the temporary files", r, err)
	}
	if fmt.Sprint(waited) != "[true false]" {
		t.Errorf("Waiting told %v; want [true false]", waited)
	}
	rows.Close()
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files counted once the holder's rows closed", used)
	}

	rows = hold()
	time.AfterFunc(300*time.Millisecond, func() { rows.Close() })
	r, err = db.Exec(context.Background(), victim, sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil || !r.OK() || len(r.Rows) != 2_000 {
		t.Errorf("a statement past the cap while another held most of it, which let go: %+v, %v; want it run again, ok", r, err)
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted", used)
	}
}

// TestSQLiteTempOddPaths: the DSN names sqliteTempVFS after the path's query; a Spider database
// copied to a path holding a space, '?', '#', '%', '&', '=' and non-ASCII letters opens through
// Open, reads (Exec) its rows, and its statements' temporary files count against the cap (a sort
// past it is refused with the cap's error), so the vfs= parameter is not read as part of the
// path, nor the path's characters as parameters.
func TestSQLiteTempOddPaths(t *testing.T) {
	src := shared.Path(t, "data/spider/database/concert_singer/concert_singer.sqlite")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	lowerTempCap(t)
	dir := t.TempDir()
	for _, name := range []string{
		"a b.sqlite", "q?mode=rw&vfs=unix.sqlite", "h#frag.sqlite", "p%20c%3F.sqlite", "ünï cødé ☃.sqlite",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o444); err != nil {
				t.Fatal(err)
			}
			opened, err := Open(p)
			if err != nil {
				t.Fatalf("Open(%q): %v", p, err)
			}
			defer opened.Close()
			r := sandboxtest.MustExec(t, opened, "SELECT count(*) FROM singer", sandbox.ExecOptions{})
			if !r.OK() || len(r.Rows) != 1 || r.Rows[0][0] != int64(6) {
				t.Errorf("count(*) FROM singer: %s %q %v; want 6", r.Outcome, r.Error, r.Rows)
			}
			r = sandboxtest.MustExec(t, opened, tempSort(30_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
			if r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "16 MiB") {
				t.Errorf("a sort past the cap: %s %q; want the cap's error (the database opened through %s)", r.Outcome, r.Error, sqliteTempVFS)
			}
			if used := sqliteTempUsed(); used != 0 {
				t.Errorf("%d bytes of temporary files still counted", used)
			}
		})
	}
}

// TestSQLiteTempConcurrent: the counters are shared by every connection of the process, each
// sorting on its own goroutine (and SQLite's own mutexes per connection only): eight sorts
// within the cap together, run at once, all succeed or pass the cap, and once they end nothing
// is counted (a lost update would leave bytes counted for good, shrinking the cap for every
// later task).
func TestSQLiteTempConcurrent(t *testing.T) {
	db := openChinookSQLite(t)
	lowerTempCap(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := db.Exec(context.Background(), tempSort(1_500), sandbox.ExecOptions{Timeout: 30 * time.Second})
			switch {
			case errors.Is(err, sandbox.ErrBusy):
			case err != nil:
				errs <- err.Error()
			case !r.OK() && !strings.Contains(r.Error, "16 MiB"):
				errs <- fmt.Sprintf("%s %q", r.Outcome, r.Error)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if peak := sqliteTempPeakReset(); peak == 0 || peak > tempTestCap {
		t.Errorf("%d bytes at most at once: want some, within the cap %d", peak, tempTestCap)
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after every statement ended", used)
	}
}

// TestSQLiteTempRefilledInTurn: a statement that passed the cap on temporary files while
// another held most of it runs again in its turn (awaitTurn) once there is room; the turn keeps
// out only other statements waiting for one, so a statement that starts meanwhile may take most
// of the cap again. A statement that then passes it in its turn, others holding more than half
// once its own files are closed, did not pass it by its own need: it is sandbox.ErrBusy, as in
// its first run, not its own "would pass their cap" (before, a task's sound SQL was scored as
// failing because another's sort took the cap at the wrong moment).
func TestSQLiteTempRefilledInTurn(t *testing.T) {
	db := openChinookSQLite(t)
	lowerTempCap(t)
	hold := tempHolder(t)
	first := hold()
	var second *sql.Rows
	waiting := func(w bool) {
		if w { // the first holder lets go while the statement waits for room ...
			time.AfterFunc(100*time.Millisecond, func() { first.Close() })
			return
		}
		second = hold() // ... and another takes most of the cap as its turn comes
	}
	r, err := db.Exec(context.Background(), tempSort(2_000), sandbox.ExecOptions{Timeout: 10 * time.Second, Waiting: waiting})
	if second == nil {
		t.Fatal("the statement did not wait for its turn")
	}
	second.Close()
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "temporary files") {
		t.Errorf("a statement past the cap in its turn while another took most of it: %+v, %v; want sandbox.ErrBusy naming the temporary files", r, err)
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted", used)
	}
	r = sandboxtest.MustExec(t, db, tempSort(2_000), sandbox.ExecOptions{Timeout: 10 * time.Second})
	if !r.OK() || len(r.Rows) != 2_000 {
		t.Errorf("the same statement alone: %s %q, %d rows; want ok", r.Outcome, r.Error, len(r.Rows))
	}
}

// TestSQLiteTempDiskFull: a statement whose temporary files the disk has no room for (ENOSPC:
// here an 8 MiB tmpfs, SQLite's temporary directory for the test) read as passing the cap on
// them ("would pass their cap of 1024 MiB", or sandbox.ErrBusy naming others' files while they
// held half of it), though the cap was far off: the disk's refusal is told apart from the cap's
// (sqliteTempNoSpace) and is sandbox.ErrBusy saying the disk is full, the database's failure,
// not the statement's. A sort that fits on that disk runs. Mounting needs root: skipped without.
func TestSQLiteTempDiskFull(t *testing.T) {
	db := openChinookSQLite(t)
	if used := sqliteTempUsed(); used != 0 {
		t.Fatalf("%d bytes of SQLite's temporary files already in use", used)
	}
	tempTmpfs(t, "size=8m")
	if r := sandboxtest.MustExec(t, db, tempSort(1_000), sandbox.ExecOptions{Timeout: 30 * time.Second}); !r.OK() || len(r.Rows) != 1_000 {
		t.Fatalf("a sort of 1,000 4 KB keys on an 8 MiB disk: %s %q, %d rows; want ok", r.Outcome, r.Error, len(r.Rows))
	}
	nospace := sqliteTempNoSpaceCount()
	r, err := db.Exec(context.Background(), tempSort(4_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "no space left on the temporary files' disk") {
		t.Errorf("a sort of 4,000 4 KB keys on an 8 MiB disk, its cap %d MiB: %+v, %v; want sandbox.ErrBusy saying the disk is full", sqliteTempCap()>>20, r, err)
	}
	if sqliteTempNoSpaceCount() == nospace {
		t.Error("no write counted as refused by the disk")
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statement", used)
	}
}

// tempTmpfs mounts a tmpfs with the mount options opts and makes it SQLite's temporary directory
// for the test (sqliteSetTempDir), put back and unmounted when the test ends, failed or not.
// Mounting needs root: the test is skipped without.
func tempTmpfs(t *testing.T, opts string) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%s) at %s: %v %s", opts, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			// A file still open (a statement abandoned, still running) keeps it busy: detach
			// it, so that it goes once that file is closed, and fail.
			lazy, lerr := exec.Command("umount", "-l", dir).CombinedOutput()
			t.Errorf("umount %s: %v %s (umount -l: %v %s)", dir, err, out, lerr, lazy)
		}
	})
	t.Cleanup(sqliteSetTempDir(dir)) // before the umount
}

// TestSQLiteTempDiskNoInodes: a disk with no inode left refuses to create a file (ENOSPC at
// open, not at a write): SQLite's default VFS makes that SQLITE_CANTOPEN, "unable to open
// database file", which read as the statement's own error though it never ran out of anything of
// its own. A temporary file's open that fails so is the disk's refusal, as a write's
// (sqliteTempNoSpace): sandbox.ErrBusy saying no space is left on the temporary files' disk.
// Here a tmpfs of one inode (its root directory's) is SQLite's temporary directory.
func TestSQLiteTempDiskNoInodes(t *testing.T) {
	db := openChinookSQLite(t)
	if used := sqliteTempUsed(); used != 0 {
		t.Fatalf("%d bytes of SQLite's temporary files already in use", used)
	}
	tempTmpfs(t, "size=8m,nr_inodes=1")
	nospace := sqliteTempNoSpaceCount()
	r, err := db.Exec(context.Background(), tempSort(1_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "no space left on the temporary files' disk") {
		t.Errorf("a sort of 1,000 4 KB keys on a disk with no inode left: %+v, %v; want sandbox.ErrBusy saying the disk is full", r, err)
	}
	if sqliteTempNoSpaceCount() == nospace {
		t.Error("no open counted as refused by the disk")
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statement", used)
	}
}

// TestSQLiteTempDiskQuota: a disk quota reached (EDQUOT) read as the statement's own error,
// though the statement never ran out of anything of its own: a write to a temporary file that
// the quota refuses is, to SQLite's default VFS, SQLITE_IOERR_WRITE ("disk I/O error"; it makes
// only ENOSPC SQLITE_FULL), and a temporary file's create that the inode quota refuses is
// SQLITE_CANTOPEN ("unable to open database file"), which statvfs, looking for no inode left, did
// not explain. Both are the disk's refusal, as ENOSPC is (sqliteTempNoSpace): sandbox.ErrBusy
// saying no space is left on the temporary files' disk. Other failures (EIO) stay the statement's
// own errors, and the sort runs once the calls succeed. This kernel has no quota format
// (CONFIG_QFMT_V2, CONFIG_TMPFS_QUOTA), so the system calls of SQLite's default VFS fail with the
// errno instead (sqliteTempFault, through the VFS's own xSetSystemCall); the VFS's handling of
// it and ours run as for a real quota.
func TestSQLiteTempDiskQuota(t *testing.T) {
	db := openChinookSQLite(t)
	if used := sqliteTempUsed(); used != 0 {
		t.Fatalf("%d bytes of SQLite's temporary files already in use", used)
	}
	t.Cleanup(func() { sqliteTempFault(0, 0) })
	for _, c := range []struct {
		name        string
		write, open syscall.Errno
		own         string // the statement's own error; "" for sandbox.ErrBusy, the disk full
	}{
		{"write EDQUOT", syscall.EDQUOT, 0, ""},
		{"open EDQUOT", 0, syscall.EDQUOT, ""},
		{"write EIO", syscall.EIO, 0, "disk I/O error"},
		{"open EIO", 0, syscall.EIO, "unable to open database file"},
	} {
		faults, err := sqliteTempFault(c.write, c.open)
		if err != nil {
			t.Fatal(err)
		}
		nospace := sqliteTempNoSpaceCount()
		r, err := db.Exec(context.Background(), tempSort(1_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
		switch {
		case c.own == "" && (!errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "no space left on the temporary files' disk")):
			t.Errorf("%s: a sort of 1,000 4 KB keys, the disk quota reached: %+v, %v; want sandbox.ErrBusy saying the disk is full", c.name, r, err)
		case c.own == "" && sqliteTempNoSpaceCount() == nospace:
			t.Errorf("%s: nothing counted as refused by the disk", c.name)
		case c.own != "" && (err != nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, c.own)):
			t.Errorf("%s: a sort of 1,000 4 KB keys: %+v, %v; want its own %s", c.name, r, err, c.own)
		}
		if n, _ := sqliteTempFault(0, 0); n == faults {
			t.Fatalf("%s: no call failed: the default VFS made no system call that sqliteTempFault replaces", c.name)
		}
	}
	r := sandboxtest.MustExec(t, db, tempSort(1_000), sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !r.OK() || len(r.Rows) != 1_000 {
		t.Errorf("the sort, its calls succeeding: %s %q, %d rows; want ok", r.Outcome, r.Error, len(r.Rows))
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statements", used)
	}
}

// TestSQLiteTempNoFileDescriptor: a temporary file's open that fails for want of a file
// descriptor (EMFILE: the process's limit, RLIMIT_NOFILE; ENFILE: the system's) is
// SQLITE_CANTOPEN to SQLite's default VFS, which read as the statement's own "unable to open
// database file" (or, were the disk full meanwhile, as the disk full): the statement asked for
// nothing of its own, the process's other files hold the descriptors, and they come back as
// those close. It is sandbox.ErrBusy saying no file descriptor is left, not the statement's error
// nor the disk's. EMFILE is real here (the soft limit lowered to the descriptors open, the holes
// under it filled with /dev/null); ENFILE, which needs the system's table full, fails the
// default VFS's create instead (sqliteTempFault: its read-only retry then fails with ENOENT, and
// the O_TMPFILE probe tells).
func TestSQLiteTempNoFileDescriptor(t *testing.T) {
	db := openChinookSQLite(t)
	if used := sqliteTempUsed(); used != 0 {
		t.Fatalf("%d bytes of SQLite's temporary files already in use", used)
	}
	sort := tempSort(1_000)
	want := func(t *testing.T, name string, r *sandbox.Result, err error) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "no file descriptor left") {
			t.Errorf("%s: a sort of 1,000 4 KB keys, no file descriptor left: %+v, %v; want sandbox.ErrBusy saying no file descriptor is left", name, r, err)
		}
	}
	t.Run("EMFILE", func(t *testing.T) {
		r, err := withNoFileDescriptor(t, func() (*sandbox.Result, error) {
			return db.Exec(context.Background(), sort, sandbox.ExecOptions{Timeout: 30 * time.Second})
		})
		want(t, "EMFILE", r, err)
	})
	t.Run("ENFILE", func(t *testing.T) {
		t.Cleanup(func() { sqliteTempFault(0, 0) })
		if _, err := sqliteTempFault(0, syscall.ENFILE); err != nil {
			t.Fatal(err)
		}
		r, err := db.Exec(context.Background(), sort, sandbox.ExecOptions{Timeout: 30 * time.Second})
		want(t, "ENFILE", r, err)
	})
	r := sandboxtest.MustExec(t, db, sort, sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !r.OK() || len(r.Rows) != 1_000 {
		t.Errorf("the sort, descriptors free again: %s %q, %d rows; want ok", r.Outcome, r.Error, len(r.Rows))
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statements", used)
	}
}

// withNoFileDescriptor runs f with the process out of file descriptors: the soft RLIMIT_NOFILE
// lowered to one past the highest descriptor open, every free one under it taken by /dev/null;
// both put back after f (and when t ends, should f fail it).
func withNoFileDescriptor(t *testing.T, f func() (*sandbox.Result, error)) (*sandbox.Result, error) {
	t.Helper()
	return withFileDescriptors(t, 0, f)
}

// withFileDescriptors runs f with spare file descriptors left to the process: with spare 0,
// withNoFileDescriptor's; otherwise the soft RLIMIT_NOFILE lowered to spare past how many are
// open (none filled: at least spare free under it, more where some open one is above it). The
// limit is put back after f (and when t ends, should f fail it).
func withFileDescriptors(t *testing.T, spare int, f func() (*sandbox.Result, error)) (*sandbox.Result, error) {
	t.Helper()
	var prior syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &prior); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	limit := len(fds) - 1 + spare // less the one that read the directory
	if spare == 0 {
		for _, e := range fds {
			if n, err := strconv.Atoi(e.Name()); err == nil && n+1 > limit {
				limit = n + 1
			}
		}
	}
	var fill []*os.File
	restore := func() {
		for _, f := range fill {
			f.Close()
		}
		fill = nil
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &prior); err != nil {
			t.Errorf("putting back RLIMIT_NOFILE: %v", err)
		}
	}
	t.Cleanup(restore)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: uint64(limit), Max: prior.Max}); err != nil {
		t.Fatal(err)
	}
	for spare == 0 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("filling the descriptors: %v", err)
			}
			break
		}
		fill = append(fill, f)
	}
	defer restore()
	return f()
}

// TestSQLiteTempOwnFileDescriptors: a statement whose own temporary files (one a materialised
// CTE past the page cache, all open until it ends) need more file descriptors than the
// process's limit leaves runs itself out: with its files closed the process holds at most half
// of its limit, and trying it again fails the same way, so it is the statement's own error
// saying so, not sandbox.ErrBusy (which Patient tried again for two minutes, and the env's
// clients for as long as they would, each try taking every descriptor of the process from the
// other statements). The process holding the descriptors (TestSQLiteTempNoFileDescriptor) is
// still sandbox.ErrBusy.
func TestSQLiteTempOwnFileDescriptors(t *testing.T) {
	db := openChinookSQLite(t)
	const ctes = 40
	var b strings.Builder
	b.WriteString("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 700)")
	for i := range ctes {
		fmt.Fprintf(&b, ", m%d AS MATERIALIZED (SELECT n, randomblob(4000) || %d AS b FROM c)", i, i)
	}
	b.WriteString(" SELECT 0")
	for i := range ctes {
		fmt.Fprintf(&b, " + (SELECT count(*) FROM m%d)", i)
	}
	stmt := b.String()
	r, err := withFileDescriptors(t, ctes*3/4, func() (*sandbox.Result, error) {
		return db.Exec(context.Background(), stmt, sandbox.ExecOptions{Timeout: 30 * time.Second})
	})
	if err != nil || r == nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "file descriptors") {
		t.Errorf("%d materialised CTEs past the page cache, %d descriptors spare: %+v, %v; want the statement's own error saying its temporary files need more file descriptors than the process leaves", ctes, ctes*3/4, r, err)
	}
	if used := sqliteTempUsed(); used != 0 {
		t.Errorf("%d bytes of temporary files still counted after the statement", used)
	}
	r = sandboxtest.MustExec(t, db, stmt, sandbox.ExecOptions{Timeout: 30 * time.Second})
	if !r.OK() || len(r.Rows) != 1 || fmt.Sprint(r.Rows[0][0]) != fmt.Sprint(ctes*700) {
		t.Errorf("the statement, descriptors free again: %s %q %v; want ok, %d", r.Outcome, r.Error, r.Rows, ctes*700)
	}
}

// TestSQLiteConnNoFileDescriptor: a statement whose connection must be made (none idle in the
// pool) while the process has no file descriptor left (EMFILE) got a plain error, "unable to open
// database file: too many open files", which callers take for the database lost (not tried
// again): it is sandbox.ErrBusy, as for a temporary file's open, and the statement runs once
// descriptors are free.
func TestSQLiteConnNoFileDescriptor(t *testing.T) {
	db := openChinookSQLite(t)
	db.db.SetMaxIdleConns(0) // every statement makes its connection
	r, err := withNoFileDescriptor(t, func() (*sandbox.Result, error) {
		return db.Exec(context.Background(), "SELECT count(*) FROM Track", sandbox.ExecOptions{Timeout: 30 * time.Second})
	})
	if !errors.Is(err, sandbox.ErrBusy) || r != nil || !strings.Contains(fmt.Sprint(err), "no file descriptor left") {
		t.Errorf("a statement whose connection finds no file descriptor: %+v, %v; want sandbox.ErrBusy saying no file descriptor is left", r, err)
	}
	if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Track", sandbox.ExecOptions{Timeout: 30 * time.Second}); !r.OK() {
		t.Errorf("the statement, descriptors free again: %s %q; want ok", r.Outcome, r.Error)
	}
}

// TestSQLiteOpenNoFileDescriptor: Open, whose first connection finds the process with no file
// descriptor left (a real EMFILE), failed with a plain "unable to open database file: too many
// open files", which openers take for the database lost (the task fails): it is
// sandbox.ErrBusy, as a statement's connection is, and Open succeeds once descriptors are free.
func TestSQLiteOpenNoFileDescriptor(t *testing.T) {
	path := shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite")
	var db sandbox.DB
	_, err := withNoFileDescriptor(t, func() (*sandbox.Result, error) {
		var err error
		db, err = Open(path)
		return nil, err
	})
	if db != nil {
		db.Close()
	}
	if !errors.Is(err, sandbox.ErrBusy) || db != nil || !strings.Contains(fmt.Sprint(err), "no file descriptor left") {
		t.Errorf("Open with no file descriptor left: %v, %v; want sandbox.ErrBusy saying no file descriptor is left", db, err)
	}
	db, err = Open(path)
	if err != nil {
		t.Fatalf("Open, descriptors free again: %v", err)
	}
	defer db.Close()
	if r := sandboxtest.MustExec(t, db, "SELECT count(*) FROM Track", sandbox.ExecOptions{Timeout: 30 * time.Second}); !r.OK() {
		t.Errorf("a statement on it: %s %q; want ok", r.Outcome, r.Error)
	}
}
