//go:build cgo

package sqlite

/*
#define _GNU_SOURCE // O_TMPFILE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

// SQLite's VFS interfaces, declared rather than included (as in guard.go): resolved at link time
// against the SQLite that github.com/mattn/go-sqlite3 compiles in. The layouts are SQLite's
// stable ABI (sqlite3_vfs version 2, sqlite3_io_methods version 3).
typedef struct sqlite3_io_methods cs_io_methods;
typedef struct cs_file { const cs_io_methods *pMethods; } cs_file; // sqlite3_file
struct sqlite3_io_methods {
	int iVersion;
	int (*xClose)(cs_file*);
	int (*xRead)(cs_file*, void*, int, long long);
	int (*xWrite)(cs_file*, const void*, int, long long);
	int (*xTruncate)(cs_file*, long long);
	int (*xSync)(cs_file*, int);
	int (*xFileSize)(cs_file*, long long*);
	int (*xLock)(cs_file*, int);
	int (*xUnlock)(cs_file*, int);
	int (*xCheckReservedLock)(cs_file*, int*);
	int (*xFileControl)(cs_file*, int, void*);
	int (*xSectorSize)(cs_file*);
	int (*xDeviceCharacteristics)(cs_file*);
	int (*xShmMap)(cs_file*, int, int, int, void volatile**);
	int (*xShmLock)(cs_file*, int, int, int);
	void (*xShmBarrier)(cs_file*);
	int (*xShmUnmap)(cs_file*, int);
	int (*xFetch)(cs_file*, long long, int, void**);
	int (*xUnfetch)(cs_file*, long long, void*);
};
typedef struct cs_vfs cs_vfs; // sqlite3_vfs
struct cs_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	cs_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(cs_vfs*, const char*, cs_file*, int, int*);
	int (*xDelete)(cs_vfs*, const char*, int);
	int (*xAccess)(cs_vfs*, const char*, int, int*);
	int (*xFullPathname)(cs_vfs*, const char*, int, char*);
	void *(*xDlOpen)(cs_vfs*, const char*);
	void (*xDlError)(cs_vfs*, int, char*);
	void (*(*xDlSym)(cs_vfs*, void*, const char*))(void);
	void (*xDlClose)(cs_vfs*, void*);
	int (*xRandomness)(cs_vfs*, int, char*);
	int (*xSleep)(cs_vfs*, int);
	int (*xCurrentTime)(cs_vfs*, double*);
	int (*xGetLastError)(cs_vfs*, int, char*);
	int (*xCurrentTimeInt64)(cs_vfs*, long long*);
	// Version 3 (the default VFS's; cs_tmp_vfs is version 2 and leaves them out): its system
	// calls, which a test replaces (cs_tmp_fault).
	int (*xSetSystemCall)(cs_vfs*, const char*, void (*)(void));
	void (*(*xGetSystemCall)(cs_vfs*, const char*))(void);
	const char *(*xNextSystemCall)(cs_vfs*, const char*);
};
cs_vfs *sqlite3_vfs_find(const char*);
int sqlite3_vfs_register(cs_vfs*, int);

#define CS_FULL 13
// CS_FULL_DISK is SQLITE_FULL with a sub-code of this VFS's own (SQLite defines none for
// SQLITE_FULL): a temporary file's write that the default VFS refused, the disk having no space
// left (ENOSPC) or the disk quota reached (EDQUOT), or its open (no block or inode left, or the
// quota's, cs_tmp_dir_full), told apart from the cap's refusal (plain SQLITE_FULL). SQLite keeps
// a VFS's code as the statement's extended error code (sqlite3_extended_errcode).
#define CS_FULL_DISK (CS_FULL | (64 << 8))
// CS_CANTOPEN_FDS is SQLITE_CANTOPEN with a sub-code of this VFS's own (SQLite's go up to 6 <<
// 8): a temporary file's open that failed for want of a file descriptor of the process (EMFILE:
// its RLIMIT_NOFILE), cs_tmp_open, told apart from other failures to open it; CS_CANTOPEN_NFILE
// the same for want of one of the system (ENFILE), which no statement's own files tell.
#define CS_CANTOPEN_FDS (14 | (64 << 8))
#define CS_CANTOPEN_NFILE (14 | (65 << 8))
#define CS_ERROR 1
#define CS_IOERR 10
#define CS_CANTOPEN 14
#define CS_FCNTL_LAST_ERRNO 4
// The xOpen flags of SQLite's temporary files: SQLITE_OPEN_TEMP_DB, SQLITE_OPEN_TRANSIENT_DB,
// SQLITE_OPEN_TEMP_JOURNAL, SQLITE_OPEN_SUBJOURNAL.
#define CS_TMP_FLAGS (0x200 | 0x400 | 0x1000 | 0x2000)
#define CS_TMP_VFS "chainedsql-tmp"

// The process's temporary-file bytes: in use (each open temporary file's size, the highest
// offset its writes and truncations reached), the cap on them, the most in use at once since
// cs_tmp_reset_peak, how many writes the cap refused, and how many writes and opens the disk did
// (no space).
static int64_t cs_tmp_used, cs_tmp_cap, cs_tmp_peak, cs_tmp_refused, cs_tmp_nospace;

// cs_tmp_take counts n more bytes of temporary files, unless that passes the cap: 0 then.
static int cs_tmp_take(int64_t n) {
	int64_t used = __atomic_load_n(&cs_tmp_used, __ATOMIC_RELAXED);
	do {
		if (used + n > __atomic_load_n(&cs_tmp_cap, __ATOMIC_RELAXED)) {
			__atomic_add_fetch(&cs_tmp_refused, 1, __ATOMIC_RELAXED);
			return 0;
		}
	} while (!__atomic_compare_exchange_n(&cs_tmp_used, &used, used + n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	int64_t peak = __atomic_load_n(&cs_tmp_peak, __ATOMIC_RELAXED);
	while (used + n > peak && !__atomic_compare_exchange_n(&cs_tmp_peak, &peak, used + n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
	return 1;
}

static void cs_tmp_give(int64_t n) { __atomic_sub_fetch(&cs_tmp_used, n, __ATOMIC_RELAXED); }

// cs_tmp_file is a temporary file opened through cs_tmp_vfs: its size as counted, then the
// default VFS's file.
typedef struct { cs_file base; int64_t size; } cs_tmp_file;
#define CS_REAL(f) ((cs_file*)((cs_tmp_file*)(f) + 1))

static int cs_tmp_close(cs_file *f) {
	cs_tmp_file *t = (cs_tmp_file*)f;
	cs_tmp_give(t->size);
	t->size = 0;
	cs_file *r = CS_REAL(f);
	return r->pMethods->xClose(r);
}

// cs_tmp_disk_refused reports whether rc, the default VFS's failure of a write to r, is the
// disk's refusal for want of space: SQLITE_FULL (its code for ENOSPC or a short write), or
// SQLITE_IOERR_WRITE with EDQUOT as the file's errno (SQLITE_FCNTL_LAST_ERRNO; the default VFS
// makes only ENOSPC SQLITE_FULL, so a disk quota reached read as the statement's own "disk I/O
// error").
static int cs_tmp_disk_refused(cs_file *r, int rc) {
	if ((rc & 0xff) == CS_FULL) return 1;
	if ((rc & 0xff) != CS_IOERR) return 0;
	int e = 0;
	return r->pMethods->xFileControl(r, CS_FCNTL_LAST_ERRNO, &e) == 0 && e == EDQUOT;
}

// cs_tmp_write refuses, with SQLITE_FULL, a write that grows the file past what the cap leaves;
// one the default VFS refuses for want of space on the disk (cs_tmp_disk_refused: no space
// left, or the disk quota reached) fails with CS_FULL_DISK.
static int cs_tmp_write(cs_file *f, const void *buf, int n, long long off) {
	cs_tmp_file *t = (cs_tmp_file*)f;
	if (off + n > t->size) {
		if (!cs_tmp_take(off + n - t->size)) return CS_FULL;
		t->size = off + n;
	}
	cs_file *r = CS_REAL(f);
	int rc = r->pMethods->xWrite(r, buf, n, off);
	if (rc != 0 && cs_tmp_disk_refused(r, rc)) {
		__atomic_add_fetch(&cs_tmp_nospace, 1, __ATOMIC_RELAXED);
		return CS_FULL_DISK;
	}
	return rc;
}

static int cs_tmp_truncate(cs_file *f, long long size) {
	cs_tmp_file *t = (cs_tmp_file*)f;
	if (size > t->size) {
		if (!cs_tmp_take(size - t->size)) return CS_FULL;
	} else {
		cs_tmp_give(t->size - size);
	}
	t->size = size;
	cs_file *r = CS_REAL(f);
	return r->pMethods->xTruncate(r, size);
}

#define CS_PASS(name, decl, call) static int cs_tmp_##name decl { cs_file *r = CS_REAL(f); return r->pMethods->x##call; }
CS_PASS(read, (cs_file *f, void *b, int n, long long o), Read(r, b, n, o))
CS_PASS(sync, (cs_file *f, int fl), Sync(r, fl))
CS_PASS(filesize, (cs_file *f, long long *n), FileSize(r, n))
CS_PASS(lock, (cs_file *f, int l), Lock(r, l))
CS_PASS(unlock, (cs_file *f, int l), Unlock(r, l))
CS_PASS(reserved, (cs_file *f, int *out), CheckReservedLock(r, out))
CS_PASS(control, (cs_file *f, int op, void *arg), FileControl(r, op, arg))
CS_PASS(sector, (cs_file *f), SectorSize(r))
CS_PASS(device, (cs_file *f), DeviceCharacteristics(r))

// Version 1: a temporary file is never shared (no xShm*) nor memory-mapped (no xFetch, which
// SQLite's sorter would otherwise read through; it writes only through xWrite).
static const cs_io_methods cs_tmp_io = {
	1, cs_tmp_close, cs_tmp_read, cs_tmp_write, cs_tmp_truncate, cs_tmp_sync, cs_tmp_filesize,
	cs_tmp_lock, cs_tmp_unlock, cs_tmp_reserved, cs_tmp_control, cs_tmp_sector, cs_tmp_device,
};

// The default VFS's system calls that make and write files (open, and whichever of pwrite,
// pwrite64 and write it was built to use) are replaced, for tests (cs_tmp_fault), by ones that
// fail with cs_fault_write a write to a file no name links (a temporary file: SQLite unlinks it
// once open) and with cs_fault_open an open that creates a file (O_CREAT, O_TMPFILE), when they
// are not 0; the others pass through.
typedef ssize_t (*cs_pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*cs_write_fn)(int, const void*, size_t);
typedef int (*cs_open_fn)(const char*, int, int);
static cs_pwrite_fn cs_real_pwrite, cs_real_pwrite64;
static cs_write_fn cs_real_write;
static cs_open_fn cs_real_open;
static int cs_fault_write, cs_fault_open;
static int64_t cs_faults;
static int cs_faulted(int e) {
	__atomic_add_fetch(&cs_faults, 1, __ATOMIC_RELAXED);
	errno = e;
	return -1;
}
static int cs_fault_written(int fd) {
	int e = __atomic_load_n(&cs_fault_write, __ATOMIC_RELAXED);
	struct stat st;
	return e != 0 && fstat(fd, &st) == 0 && st.st_nlink == 0 ? e : 0;
}
static ssize_t cs_fault_pwrite(int fd, const void *b, size_t n, off_t o) { int e = cs_fault_written(fd); return e ? cs_faulted(e) : cs_real_pwrite(fd, b, n, o); }
static ssize_t cs_fault_pwrite64(int fd, const void *b, size_t n, off_t o) { int e = cs_fault_written(fd); return e ? cs_faulted(e) : cs_real_pwrite64(fd, b, n, o); }
static ssize_t cs_fault_write_call(int fd, const void *b, size_t n) { int e = cs_fault_written(fd); return e ? cs_faulted(e) : cs_real_write(fd, b, n); }
static int cs_fault_open_call(const char *name, int flags, int mode) {
	int e = __atomic_load_n(&cs_fault_open, __ATOMIC_RELAXED);
	if (e != 0 && ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)) return cs_faulted(e);
	return cs_real_open(name, flags, mode);
}

// cs_sys_open is the default VFS's open system call (base's, replaced in tests), else open.
static int cs_sys_open(cs_vfs *base, const char *name, int flags, int mode) {
	cs_open_fn f = 0;
	if (base->iVersion >= 3 && base->xGetSystemCall != 0) f = (cs_open_fn)base->xGetSystemCall(base, "open");
	return f != 0 ? f(name, flags, mode) : open(name, flags, mode);
}

// cs_tmp_fault makes the default VFS (base) fail its writes to temporary files with errno
// write and its opens that create a file with errno open (0: none fail), replacing its system
// calls the first time, and returns how many calls it has failed so far; -1 when base has no
// system calls to replace.
static int64_t cs_tmp_fault(cs_vfs *base, int write, int open) {
	if (base == 0 || base->iVersion < 3 || base->xGetSystemCall == 0 || base->xSetSystemCall == 0) return -1;
	if (cs_real_open == 0) {
		cs_real_open = (cs_open_fn)base->xGetSystemCall(base, "open");
		if (cs_real_open == 0) return -1;
		cs_real_pwrite = (cs_pwrite_fn)base->xGetSystemCall(base, "pwrite");
		cs_real_pwrite64 = (cs_pwrite_fn)base->xGetSystemCall(base, "pwrite64");
		cs_real_write = (cs_write_fn)base->xGetSystemCall(base, "write");
		base->xSetSystemCall(base, "open", (void (*)(void))cs_fault_open_call);
		if (cs_real_pwrite != 0) base->xSetSystemCall(base, "pwrite", (void (*)(void))cs_fault_pwrite);
		if (cs_real_pwrite64 != 0) base->xSetSystemCall(base, "pwrite64", (void (*)(void))cs_fault_pwrite64);
		if (cs_real_write != 0) base->xSetSystemCall(base, "write", (void (*)(void))cs_fault_write_call);
	}
	__atomic_store_n(&cs_fault_write, write, __ATOMIC_RELAXED);
	__atomic_store_n(&cs_fault_open, open, __ATOMIC_RELAXED);
	return __atomic_load_n(&cs_faults, __ATOMIC_RELAXED);
}

// cs_tmp_dir_full reports, for a temporary file's open that failed (SQLITE_CANTOPEN: the default
// VFS retries the open read-only and keeps that errno, ENOENT, not the create's ENOSPC or EDQUOT),
// what refused it, from the directory where the default VFS (base) creates temporary files (its
// order: sqlite3_temp_directory, SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp, the first that
// is a directory it may write in): CS_FULL_DISK where its file system has no block or no inode
// left to give, or refuses a new file there for want of space or of quota (a file made there with
// O_TMPFILE, through base's open, fails with ENOSPC or EDQUOT: statvfs sees no user's quota);
// CS_CANTOPEN_FDS or CS_CANTOPEN_NFILE where that file finds no file descriptor (EMFILE, ENFILE:
// cs_fds_out); 0 for anything else.
// The probe's file has no name and goes when closed; a file system without O_TMPFILE
// (EOPNOTSUPP) is judged by statvfs alone.
extern char *sqlite3_temp_directory;
// cs_fds_out is the code of an open whose errno is e, where it found no file descriptor:
// CS_CANTOPEN_FDS for EMFILE, CS_CANTOPEN_NFILE for ENFILE; 0 for any other.
static int cs_fds_out(int e) { return e == EMFILE ? CS_CANTOPEN_FDS : e == ENFILE ? CS_CANTOPEN_NFILE : 0; }
static int cs_tmp_dir_full(cs_vfs *base) {
	const char *dirs[] = {sqlite3_temp_directory, getenv("SQLITE_TMPDIR"), getenv("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp", "."};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		struct stat st;
		if (dirs[i] == 0 || stat(dirs[i], &st) != 0 || !S_ISDIR(st.st_mode) || access(dirs[i], W_OK | X_OK) != 0) continue;
		int fd = cs_sys_open(base, dirs[i], O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0) close(fd);
		else if (errno == ENOSPC || errno == EDQUOT) return CS_FULL_DISK;
		else if (cs_fds_out(errno)) return cs_fds_out(errno);
		struct statvfs fs;
		if (statvfs(dirs[i], &fs) != 0) return 0;
		// A file system that counts no inodes (f_files 0) never runs out of them.
		return fs.f_bavail == 0 || (fs.f_files > 0 && fs.f_favail == 0) ? CS_FULL_DISK : 0;
	}
	return 0;
}

static cs_vfs cs_tmp_vfs;
#define CS_BASE ((cs_vfs*)cs_tmp_vfs.pAppData)

// cs_tmp_open opens a file through the default VFS: a temporary one (a temporary-file flag or
// no name) wrapped in cs_tmp_io, any other as the default VFS opens it.
static int cs_tmp_open(cs_vfs *v, const char *name, cs_file *f, int flags, int *out) {
	(void)v;
	if (name != 0 && !(flags & CS_TMP_FLAGS)) return CS_BASE->xOpen(CS_BASE, name, f, flags, out);
	cs_tmp_file *t = (cs_tmp_file*)f;
	cs_file *r = CS_REAL(f);
	t->size = 0;
	r->pMethods = 0;
	int rc = CS_BASE->xOpen(CS_BASE, name, r, flags, out);
	// The errno of the default VFS's last open (its read-only retry's), read before anything
	// else can change it: EMFILE or ENFILE there is the create's too.
	int e = errno;
	// A file whose open failed but left methods is closed by SQLite (through cs_tmp_close).
	t->base.pMethods = r->pMethods != 0 ? &cs_tmp_io : 0;
	if ((rc & 0xff) != CS_CANTOPEN) return rc;
	if (cs_fds_out(e)) return cs_fds_out(e);
	int why = cs_tmp_dir_full(CS_BASE);
	if (why == CS_FULL_DISK) __atomic_add_fetch(&cs_tmp_nospace, 1, __ATOMIC_RELAXED);
	return why != 0 ? why : rc;
}

static int cs_tmp_delete(cs_vfs *v, const char *n, int s) { (void)v; return CS_BASE->xDelete(CS_BASE, n, s); }
static int cs_tmp_access(cs_vfs *v, const char *n, int fl, int *out) { (void)v; return CS_BASE->xAccess(CS_BASE, n, fl, out); }
static int cs_tmp_fullpath(cs_vfs *v, const char *n, int sz, char *out) { (void)v; return CS_BASE->xFullPathname(CS_BASE, n, sz, out); }
static void *cs_tmp_dlopen(cs_vfs *v, const char *n) { (void)v; return CS_BASE->xDlOpen(CS_BASE, n); }
static void cs_tmp_dlerror(cs_vfs *v, int n, char *m) { (void)v; CS_BASE->xDlError(CS_BASE, n, m); }
static void (*cs_tmp_dlsym(cs_vfs *v, void *h, const char *s))(void) { (void)v; return CS_BASE->xDlSym(CS_BASE, h, s); }
static void cs_tmp_dlclose(cs_vfs *v, void *h) { (void)v; CS_BASE->xDlClose(CS_BASE, h); }
static int cs_tmp_random(cs_vfs *v, int n, char *out) { (void)v; return CS_BASE->xRandomness(CS_BASE, n, out); }
static int cs_tmp_sleep(cs_vfs *v, int us) { (void)v; return CS_BASE->xSleep(CS_BASE, us); }
static int cs_tmp_time(cs_vfs *v, double *t) { (void)v; return CS_BASE->xCurrentTime(CS_BASE, t); }
static int cs_tmp_lasterror(cs_vfs *v, int n, char *m) { (void)v; return CS_BASE->xGetLastError(CS_BASE, n, m); }
static int cs_tmp_time64(cs_vfs *v, long long *t) { (void)v; return CS_BASE->xCurrentTimeInt64(CS_BASE, t); }

// cs_tmp_register registers cs_tmp_vfs (not as the default) over the default VFS, with cap
// bytes of temporary files for the process. It initialises SQLite: after cs_install_alloc.
static int cs_tmp_register(int64_t cap) {
	cs_vfs *base = sqlite3_vfs_find(0);
	if (base == 0) return CS_ERROR;
	if (base->iVersion < 2 || base->xCurrentTimeInt64 == 0) return CS_ERROR;
	__atomic_store_n(&cs_tmp_cap, cap, __ATOMIC_RELAXED);
	cs_vfs v = {
		2, base->szOsFile + (int)sizeof(cs_tmp_file), base->mxPathname, 0, CS_TMP_VFS, base,
		cs_tmp_open, cs_tmp_delete, cs_tmp_access, cs_tmp_fullpath,
		cs_tmp_dlopen, cs_tmp_dlerror, cs_tmp_dlsym, cs_tmp_dlclose,
		cs_tmp_random, cs_tmp_sleep, cs_tmp_time, cs_tmp_lasterror, cs_tmp_time64,
	};
	// What the default VFS leaves out (loading extensions, compiled out) is left out here too.
	if (base->xDlOpen == 0) v.xDlOpen = 0;
	if (base->xDlError == 0) v.xDlError = 0;
	if (base->xDlSym == 0) v.xDlSym = 0;
	if (base->xDlClose == 0) v.xDlClose = 0;
	if (base->xGetLastError == 0) v.xGetLastError = 0;
	cs_tmp_vfs = v;
	return sqlite3_vfs_register(&cs_tmp_vfs, 0);
}

static int64_t cs_tmp_get(int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static int64_t cs_tmp_used_now(void) { return cs_tmp_get(&cs_tmp_used); }
static int64_t cs_tmp_cap_now(void) { return cs_tmp_get(&cs_tmp_cap); }
static int64_t cs_tmp_refused_now(void) { return cs_tmp_get(&cs_tmp_refused); }
static int64_t cs_tmp_set_cap(int64_t n) { return __atomic_exchange_n(&cs_tmp_cap, n, __ATOMIC_RELAXED); }
static int64_t cs_tmp_nospace_now(void) { return cs_tmp_get(&cs_tmp_nospace); }

// cs_tmp_set_dir makes SQLite create its temporary files in dir (0: where it chooses), through
// the deprecated global sqlite3_temp_directory, which SQLite reads at each temporary file's
// open; it returns the value before, for cs_tmp_set_dir to put back. For tests: SQLite allows no
// other thread to use it meanwhile.
static char *cs_tmp_set_dir(char *dir) {
	char *prior = sqlite3_temp_directory;
	sqlite3_temp_directory = dir;
	return prior;
}
static int64_t cs_tmp_fault_base(int write, int open) { return cs_tmp_fault(CS_BASE, write, open); }
static int64_t cs_tmp_reset_peak(void) { return __atomic_exchange_n(&cs_tmp_peak, cs_tmp_get(&cs_tmp_used), __ATOMIC_RELAXED); }
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// sqliteTempVFS is the name of the VFS every connection of sqliteReadDriver opens its database
// through (sqliteDSN): the default VFS, with SQLite's temporary files (a sort, DISTINCT, GROUP
// BY or materialised subquery past the page cache; xOpen with a temporary-file flag or no name)
// counted against sqliteTempCap for the process.
const sqliteTempVFS = "chainedsql-tmp" // C's CS_TMP_VFS

// sqliteTempVFSErr is cs_tmp_register's failure, nil once sqliteTempVFS is registered. It runs
// after the allocator guard is installed (registering initialises SQLite, after which the
// allocator can no longer be wrapped).
var sqliteTempVFSErr = registerTempVFS()

func registerTempVFS() error {
	_ = sqliteAllocGuard // initialised first: registering the VFS initialises SQLite
	if rc := C.cs_tmp_register(C.int64_t(sqliteTempLimit)); rc != 0 {
		return fmt.Errorf("sqlite: register the temporary-file VFS %s: %w", sqliteTempVFS, sqlite3.Error{Code: sqlite3.ErrNo(rc)})
	}
	return nil
}

// sqliteTempUsed is how many bytes SQLite's temporary files of the process's read connections
// take now (each open one's size: the highest offset its writes reached): what sqliteTempCap
// bounds.
func sqliteTempUsed() int64 { return int64(C.cs_tmp_used_now()) }

// sqliteTempCap is the cap in force on sqliteTempUsed: sqliteTempLimit unless a test set
// another (sqliteSetTempCap).
func sqliteTempCap() int64 { return int64(C.cs_tmp_cap_now()) }

// sqliteSetTempCap sets the cap on SQLite's temporary files for the process and returns the one
// before: for tests, which lower it to fill it without a gigabyte of disk.
func sqliteSetTempCap(n int64) int64 { return int64(C.cs_tmp_set_cap(C.int64_t(n))) }

// sqliteTempRefused is how many writes to temporary files the cap has refused (SQLITE_FULL) in
// the process.
func sqliteTempRefused() int64 { return int64(C.cs_tmp_refused_now()) }

// sqliteTempPeakReset starts a new high-water mark of sqliteTempUsed, at what is in use now,
// and returns the one it ends: the most bytes of temporary files in use at once since the last
// reset.
func sqliteTempPeakReset() int64 { return int64(C.cs_tmp_reset_peak()) }

// sqliteTempNoSpace is the extended error code (sqlite3.Error.ExtendedCode) of a statement whose
// temporary file's write (or open) the disk refused for want of space or quota (C's CS_FULL_DISK): SQLITE_FULL, as
// the cap's refusal (sqliteTempCap) is, with a sub-code of sqliteTempVFS's own.
const sqliteTempNoSpace = sqlite3.ErrNoExtended(C.CS_FULL_DISK)

// sqliteTempNoFds is the extended error code (sqlite3.Error.ExtendedCode) of a statement whose
// temporary file's open found no file descriptor of the process (EMFILE, its RLIMIT_NOFILE; C's
// CS_CANTOPEN_FDS), sqliteTempNoFile of the system (ENFILE; CS_CANTOPEN_NFILE): SQLITE_CANTOPEN
// with sub-codes of sqliteTempVFS's own.
const (
	sqliteTempNoFds  = sqlite3.ErrNoExtended(C.CS_CANTOPEN_FDS)
	sqliteTempNoFile = sqlite3.ErrNoExtended(C.CS_CANTOPEN_NFILE)
)

// sqliteTempNoSpaceCount is how many writes to temporary files, and opens of them, the disk
// refused for want of space (or of inodes) in the process.
func sqliteTempNoSpaceCount() int64 { return int64(C.cs_tmp_nospace_now()) }

// sqliteTempFault makes the default VFS's writes to temporary files fail with the errno write,
// and its opens that create a file with the errno open (0: none fail), and returns how many
// calls it has failed so far, for tests: a disk quota (EDQUOT) cannot be reached for real where
// the kernel has no quota format (CONFIG_QFMT_V2, CONFIG_TMPFS_QUOTA), so the system calls that
// SQLite's default VFS makes are replaced (sqlite3_vfs's xSetSystemCall, the VFS's own
// fault-injection point), and everything above them (the default VFS's errno handling,
// sqliteTempVFS, run) runs as for a real one. No statement may open or write a temporary file
// meanwhile.
func sqliteTempFault(write, open syscall.Errno) (int64, error) {
	n := int64(C.cs_tmp_fault_base(C.int(write), C.int(open)))
	if n < 0 {
		return 0, errors.New("sqlite: the default VFS has no system calls to replace")
	}
	return n, nil
}

// sqliteSetTempDir makes SQLite create its temporary files in dir ("": where it chooses:
// SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp) and returns a function that puts back the
// directory before: for tests, which fill a small file system's disk. No statement may open a
// temporary file meanwhile.
func sqliteSetTempDir(dir string) (restore func()) {
	var c *C.char
	if dir != "" {
		c = C.CString(dir)
	}
	prior := C.cs_tmp_set_dir(c)
	return func() {
		C.cs_tmp_set_dir(prior)
		if c != nil {
			C.free(unsafe.Pointer(c))
		}
	}
}
