//go:build cgo

package sqlite

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The few SQLite interfaces used here, declared rather than included: they are resolved at link
// time against the SQLite that github.com/mattn/go-sqlite3 compiles in (one copy per binary).
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;
typedef void (*cs_xfunc)(sqlite3_context*, int, sqlite3_value**);
int sqlite3_create_function_v2(sqlite3*, const char*, int, int, void*, cs_xfunc, cs_xfunc, void (*)(sqlite3_context*), void (*)(void*));
int sqlite3_value_type(sqlite3_value*);
const unsigned char *sqlite3_value_text(sqlite3_value*);
const void *sqlite3_value_blob(sqlite3_value*);
int sqlite3_value_bytes(sqlite3_value*);
sqlite3_value *sqlite3_value_dup(const sqlite3_value*);
void sqlite3_value_free(sqlite3_value*);
void sqlite3_result_int(sqlite3_context*, int);
void sqlite3_result_text(sqlite3_context*, const char*, int, void (*)(void*));
void sqlite3_result_error(sqlite3_context*, const char*, int);
void sqlite3_result_error_code(sqlite3_context*, int);
void sqlite3_result_error_toobig(sqlite3_context*);
void sqlite3_result_error_nomem(sqlite3_context*);
sqlite3 *sqlite3_context_db_handle(sqlite3_context*);
void *sqlite3_user_data(sqlite3_context*);
int sqlite3_is_interrupted(sqlite3*);
int sqlite3_limit(sqlite3*, int, int);
void *sqlite3_malloc64(unsigned long long);
void *sqlite3_realloc64(void*, unsigned long long);
void sqlite3_free(void*);
void sqlite3_progress_handler(sqlite3*, int, int (*)(void*), void*);
int sqlite3_set_clientdata(sqlite3*, const char*, void*, void (*)(void*));
void *sqlite3_get_clientdata(sqlite3*, const char*);
int sqlite3_strlike(const char*, const char*, unsigned int);
int sqlite3_strglob(const char*, const char*);
long long sqlite3_memory_used(void);
int sqlite3_db_release_memory(sqlite3*);
int sqlite3_errcode(sqlite3*);
long long sqlite3_hard_heap_limit64(long long);
long long sqlite3_soft_heap_limit64(long long);
typedef struct sqlite3_stmt sqlite3_stmt;
sqlite3_stmt *sqlite3_next_stmt(sqlite3*, sqlite3_stmt*);
int sqlite3_stmt_busy(sqlite3_stmt*);
int sqlite3_column_count(sqlite3_stmt*);
int sqlite3_column_type(sqlite3_stmt*, int);
long long sqlite3_column_int64(sqlite3_stmt*, int);
const unsigned char *sqlite3_column_text(sqlite3_stmt*, int);
int sqlite3_column_bytes(sqlite3_stmt*, int);
int sqlite3_config(int, ...);
typedef struct {
	void *(*xMalloc)(int);
	void (*xFree)(void*);
	void *(*xRealloc)(void*, int);
	int (*xSize)(void*);
	int (*xRoundup)(int);
	int (*xInit)(void*);
	void (*xShutdown)(void*);
	void *pAppData;
} cs_mem_methods; // sqlite3_mem_methods

#define CS_UTF8 1
#define CS_DETERMINISTIC 0x000000800
#define CS_INNOCUOUS 0x000200000
#define CS_BLOB 4
#define CS_NULL 5
#define CS_NOMEM 7
#define CS_INTERRUPT 9
#define CS_LIMIT_LENGTH 0
#define CS_LIMIT_LIKE_PATTERN_LENGTH 8
#define CS_TRANSIENT ((void (*)(void*))-1)
#define CS_KEY "chainedsql-guard"
#define CS_INTEGER 1
#define CS_TEXT 3
#define CS_CONFIG_MALLOC 4
#define CS_CONFIG_GETMALLOC 5

// cs_guard is one connection's deadline (CLOCK_MONOTONIC nanoseconds, 0 for none) and whether
// its prepare was cancelled (cs_prep_cancel).
typedef struct { int64_t deadline; int cancel; } cs_guard;

// cs_work is how many bytes a function compares between two looks at the deadline.
#define CS_WORK (1 << 22)

static int64_t cs_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cs_past(cs_guard *g) {
	int64_t d = __atomic_load_n(&g->deadline, __ATOMIC_RELAXED);
	return d != 0 && cs_now() >= d;
}

// cs_progress is the connection's progress handler: non-zero stops the statement (SQLITE_INTERRUPT).
static int cs_progress(void *p) { return cs_past((cs_guard*)p); }

// cs_stop reports whether the statement calling ctx must stop, and if so makes its result the
// interrupt.
static int cs_stop(sqlite3_context *ctx) {
	sqlite3 *db = sqlite3_context_db_handle(ctx);
	if (sqlite3_is_interrupted(db) || cs_past((cs_guard*)sqlite3_user_data(ctx))) {
		sqlite3_result_error_code(ctx, CS_INTERRUPT);
		return 1;
	}
	return 0;
}

// cs_instr is instr(X, Y): the 1-based position of Y in X (characters for text, bytes when both
// are blobs), 0 if absent, 1 for an empty Y, NULL if either is NULL.
static void cs_instr(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	if (cs_stop(ctx)) return;
	int th = sqlite3_value_type(argv[0]), tn = sqlite3_value_type(argv[1]);
	if (th == CS_NULL || tn == CS_NULL) return;
	int nh = sqlite3_value_bytes(argv[0]), nn = sqlite3_value_bytes(argv[1]);
	if (nn <= 0) {
		sqlite3_result_int(ctx, 1);
		return;
	}
	sqlite3_value *ch = 0, *cn = 0;
	const unsigned char *h, *n;
	int text = 1;
	if (th == CS_BLOB && tn == CS_BLOB) {
		h = sqlite3_value_blob(argv[0]);
		n = sqlite3_value_blob(argv[1]);
		text = 0;
	} else if (th != CS_BLOB && tn != CS_BLOB) {
		h = sqlite3_value_text(argv[0]);
		n = sqlite3_value_text(argv[1]);
	} else { // one blob: both compared as text, on copies
		ch = sqlite3_value_dup(argv[0]);
		cn = sqlite3_value_dup(argv[1]);
		h = ch ? sqlite3_value_text(ch) : 0;
		n = cn ? sqlite3_value_text(cn) : 0;
		nh = ch ? sqlite3_value_bytes(ch) : 0;
		nn = cn ? sqlite3_value_bytes(cn) : 0;
		if (h == 0) n = 0;
	}
	if (n == 0 || (nh > 0 && h == 0)) {
		sqlite3_result_error_nomem(ctx);
		goto done;
	}
	int pos = 1;
	int64_t work = 0;
	while (nn <= nh && (h[0] != n[0] || memcmp(h, n, nn) != 0)) {
		if ((work += nn) > CS_WORK) {
			work = 0;
			if (cs_stop(ctx)) goto done;
		}
		pos++;
		do {
			h++;
			nh--;
		} while (text && nh > 0 && (h[0] & 0xc0) == 0x80);
	}
	sqlite3_result_int(ctx, nn <= nh ? pos : 0);
done:
	sqlite3_value_free(ch);
	sqlite3_value_free(cn);
}

// cs_replace is replace(X, Y, Z): X as text with every Y replaced by Z, left to right; X if Y is
// empty; NULL if X or Y is NULL, or Z is (and Y is not empty).
static void cs_replace(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
	(void)argc;
	if (cs_stop(ctx)) return;
	if (sqlite3_value_type(argv[0]) == CS_NULL || sqlite3_value_type(argv[1]) == CS_NULL) return;
	const unsigned char *s = sqlite3_value_text(argv[0]);
	if (s == 0) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	int64_t ns = sqlite3_value_bytes(argv[0]);
	const unsigned char *p = sqlite3_value_text(argv[1]);
	if (p == 0) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	if (p[0] == 0) {
		sqlite3_result_text(ctx, (const char*)s, (int)ns, CS_TRANSIENT);
		return;
	}
	int64_t np = sqlite3_value_bytes(argv[1]);
	if (sqlite3_value_type(argv[2]) == CS_NULL) return;
	const unsigned char *r = sqlite3_value_text(argv[2]);
	if (r == 0) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	int64_t nr = sqlite3_value_bytes(argv[2]);
	int64_t limit = sqlite3_limit(sqlite3_context_db_handle(ctx), CS_LIMIT_LENGTH, -1);
	int64_t size = ns; // the output's length so far, projected to the end of s
	int64_t cap = ns + 1, j = 0, i = 0, work = 0;
	unsigned char *out = sqlite3_malloc64(cap);
	if (out == 0) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	for (; i + np <= ns; i++) {
		if ((work += np) > CS_WORK) {
			work = 0;
			if (cs_stop(ctx)) {
				sqlite3_free(out);
				return;
			}
		}
		if (s[i] != p[0] || memcmp(s + i, p, np) != 0) {
			out[j++] = s[i];
			continue;
		}
		if (nr > np) {
			size += nr - np;
			if (size > limit) {
				sqlite3_free(out);
				sqlite3_result_error_toobig(ctx);
				return;
			}
			if (size + 1 > cap) {
				int64_t c = cap * 2 > size + 1 ? cap * 2 : size + 1;
				if (c > limit + 1) c = limit + 1;
				unsigned char *o = sqlite3_realloc64(out, c);
				if (o == 0) {
					sqlite3_free(out);
					sqlite3_result_error_nomem(ctx);
					return;
				}
				out = o;
				cap = c;
			}
		}
		memcpy(out + j, r, nr);
		j += nr;
		i += np - 1;
	}
	memcpy(out + j, s + i, ns - i);
	j += ns - i;
	out[j] = 0;
	sqlite3_result_text(ctx, (const char*)out, (int)j, sqlite3_free);
}

// cs_utf8_next returns the end of the character at z: a lead byte of 0xc0 or more takes the
// continuation bytes after it.
static const unsigned char *cs_utf8_next(const unsigned char *z) {
	if (*z++ >= 0xc0) {
		while ((*z & 0xc0) == 0x80) z++;
	}
	return z;
}

// cs_trim is trim, ltrim and rtrim with a set: X as text without the characters of Y at its
// start (flags 1), end (flags 2) or both; NULL if X or Y is NULL.
static void cs_trim(sqlite3_context *ctx, sqlite3_value **argv, int flags) {
	if (cs_stop(ctx)) return;
	if (sqlite3_value_type(argv[0]) == CS_NULL) return;
	const unsigned char *in = sqlite3_value_text(argv[0]);
	if (in == 0) return;
	int64_t n = sqlite3_value_bytes(argv[0]);
	const unsigned char *set = sqlite3_value_text(argv[1]);
	if (set == 0) return;
	int64_t nchar = 0;
	for (const unsigned char *z = set; *z; z = cs_utf8_next(z)) nchar++;
	if (nchar > 0) {
		const unsigned char **chars = sqlite3_malloc64(nchar * (sizeof(char*) + sizeof(int64_t)));
		if (chars == 0) {
			sqlite3_result_error_nomem(ctx);
			return;
		}
		int64_t *lens = (int64_t*)(chars + nchar), k = 0, work = 0;
		for (const unsigned char *z = set; *z; k++) {
			chars[k] = z;
			z = cs_utf8_next(z);
			lens[k] = z - chars[k];
		}
		for (int side = 1; side <= 2; side++) {
			if (!(flags & side)) continue;
			while (n > 0) {
				int64_t c = 0, len = 0;
				for (; c < nchar; c++) {
					len = lens[c];
					const unsigned char *at = side == 1 ? in : in + n - len;
					if (len <= n && memcmp(at, chars[c], len) == 0) break;
				}
				if ((work += c + 1) > CS_WORK / 8) {
					work = 0;
					if (cs_stop(ctx)) {
						sqlite3_free(chars);
						return;
					}
				}
				if (c >= nchar) break;
				if (side == 1) in += len;
				n -= len;
			}
		}
		sqlite3_free(chars);
	}
	sqlite3_result_text(ctx, (const char*)in, (int)n, CS_TRANSIENT);
}

static void cs_trim_both(sqlite3_context *ctx, int argc, sqlite3_value **argv) { (void)argc; cs_trim(ctx, argv, 3); }
static void cs_trim_left(sqlite3_context *ctx, int argc, sqlite3_value **argv) { (void)argc; cs_trim(ctx, argv, 1); }
static void cs_trim_right(sqlite3_context *ctx, int argc, sqlite3_value **argv) { (void)argc; cs_trim(ctx, argv, 2); }

// CS_MATCH_WORK bounds one LIKE or GLOB call: SQLite's matcher takes up to pattern x subject
// steps and cannot be interrupted, so a call over more is an error instead.
#define CS_MATCH_WORK (1LL << 27)

// cs_match is like(P, X[, E]) and glob(P, X) ("X LIKE P ESCAPE E", "X GLOB P") through SQLite's
// own matcher (sqlite3_strlike, sqlite3_strglob), after a look at the deadline and at the cost.
static void cs_match(sqlite3_context *ctx, int argc, sqlite3_value **argv, int glob) {
	if (cs_stop(ctx)) return;
	sqlite3 *db = sqlite3_context_db_handle(ctx);
	int64_t np = sqlite3_value_bytes(argv[0]);
	if (np > sqlite3_limit(db, CS_LIMIT_LIKE_PATTERN_LENGTH, -1)) {
		sqlite3_result_error(ctx, "LIKE or GLOB pattern too complex", -1);
		return;
	}
	unsigned int esc = 0;
	if (argc == 3) {
		const unsigned char *e = sqlite3_value_text(argv[2]);
		if (e == 0) return;
		if (e[0] == 0 || *cs_utf8_next(e) != 0) {
			sqlite3_result_error(ctx, "ESCAPE expression must be a single character", -1);
			return;
		}
		if (e[0] == '%' || e[0] == '_') {
			sqlite3_result_error(ctx, "ESCAPE '%' and ESCAPE '_' are not supported here; use another escape character", -1);
			return;
		}
		// The escape as one code point (the check above made it one character).
		esc = e[0];
		if (esc >= 0xc0) {
			esc &= esc >= 0xf0 ? 0x07 : esc >= 0xe0 ? 0x0f : 0x1f;
			for (const unsigned char *z = e + 1; (*z & 0xc0) == 0x80; z++) esc = (esc << 6) | (*z & 0x3f);
			if (esc < 0x80 || (esc & 0xfffff800) == 0xd800 || (esc & 0xfffffffe) == 0xfffe) esc = 0xfffd;
		}
	}
	const unsigned char *p = sqlite3_value_text(argv[0]);
	const unsigned char *x = sqlite3_value_text(argv[1]);
	if (p == 0 || x == 0) return;
	int64_t nx = sqlite3_value_bytes(argv[1]);
	if ((np + 1) * (nx + 1) > CS_MATCH_WORK) {
		sqlite3_result_error(ctx, "LIKE or GLOB over this much text with this long a pattern could outrun the deadline (pattern bytes x text bytes over 2^27)", -1);
		return;
	}
	int r = glob ? sqlite3_strglob((const char*)p, (const char*)x) : sqlite3_strlike((const char*)p, (const char*)x, esc);
	sqlite3_result_int(ctx, r == 0);
}

static void cs_like(sqlite3_context *ctx, int argc, sqlite3_value **argv) { cs_match(ctx, argc, argv, 0); }
static void cs_glob(sqlite3_context *ctx, int argc, sqlite3_value **argv) { cs_match(ctx, argc, argv, 1); }

// cs_bind gives db a guard (freed with db), the progress handler and the bounded functions.
static int cs_bind(sqlite3 *db, int ops) {
	cs_guard *g = sqlite3_malloc64(sizeof(cs_guard));
	if (g == 0) return 7; // SQLITE_NOMEM
	g->deadline = 0;
	g->cancel = 0;
	// On failure (out of memory) SQLite has already called the destructor on g.
	int rc = sqlite3_set_clientdata(db, CS_KEY, g, sqlite3_free);
	if (rc != 0) return rc;
	sqlite3_progress_handler(db, ops, cs_progress, g);
	static const struct { const char *name; int n; cs_xfunc f; } fns[] = {
		{"instr", 2, cs_instr}, {"replace", 3, cs_replace},
		{"trim", 2, cs_trim_both}, {"ltrim", 2, cs_trim_left}, {"rtrim", 2, cs_trim_right},
		{"like", 2, cs_like}, {"like", 3, cs_like}, {"glob", 2, cs_glob},
	};
	for (unsigned i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].n, CS_UTF8 | CS_DETERMINISTIC | CS_INNOCUOUS, g, fns[i].f, 0, 0, 0);
		if (rc != 0) return rc;
	}
	return 0;
}

// SQLite prepares a statement (parse, name resolution, query flattening, code generation) in one
// call that looks at neither the interrupt nor the progress handler, and it copies expressions
// there: a result alias once per reference in WHERE, GROUP BY, HAVING and ORDER BY, a flattened
// subquery's column once per reference in the outer query, so nested subqueries double a column
// at each level. Between cs_prep_begin and cs_prep_end, on their thread, every allocation
// (cs_malloc, cs_realloc, installed for the process by cs_install_alloc) fails once the
// connection's deadline has passed or its prepare was cancelled (cs_prep_cancel): the copying
// allocates all the time, so it stops there. cs_prep_guard is set only between the two, on
// their thread, so no other allocation of the process is ever refused.
static cs_mem_methods cs_mem; // SQLite's own allocator, which the wrappers call
static __thread cs_guard *cs_prep_guard; // the preparing connection's guard; 0 outside a prepare
static __thread int cs_prep_stopped;     // an allocation was refused since cs_prep_begin

static int cs_prep_past(void) {
	cs_guard *g = cs_prep_guard;
	if (g == 0) return 0;
	if (!__atomic_load_n(&g->cancel, __ATOMIC_RELAXED) && !cs_past(g)) return 0;
	cs_prep_stopped = 1;
	return 1;
}
static void *cs_malloc(int n) { return cs_prep_past() ? 0 : cs_mem.xMalloc(n); }
static void *cs_realloc(void *p, int n) { return cs_prep_past() ? 0 : cs_mem.xRealloc(p, n); }
static void cs_free(void *p) { cs_mem.xFree(p); }
static int cs_size(void *p) { return cs_mem.xSize(p); }
static int cs_roundup(int n) { return cs_mem.xRoundup(n); }
static int cs_mem_init(void *p) { (void)p; return cs_mem.xInit(cs_mem.pAppData); }
static void cs_mem_shutdown(void *p) { (void)p; cs_mem.xShutdown(cs_mem.pAppData); }

// cs_install_alloc wraps SQLite's allocator in cs_malloc and cs_realloc; it must run before
// SQLite initialises (the process's first connection), else it fails (SQLITE_MISUSE).
static int cs_install_alloc(void) {
	int rc = sqlite3_config(CS_CONFIG_GETMALLOC, &cs_mem);
	if (rc != 0) return rc;
	static cs_mem_methods m = {cs_malloc, cs_free, cs_realloc, cs_size, cs_roundup, cs_mem_init, cs_mem_shutdown, 0};
	return sqlite3_config(CS_CONFIG_MALLOC, &m);
}

// cs_guard_of is db's guard, 0 if it has none. It takes db's mutex, which a running statement
// holds: it is read before the statement, and the guard used through the pointer (it lives as
// long as db).
static cs_guard *cs_guard_of(sqlite3 *db) { return sqlite3_get_clientdata(db, CS_KEY); }

// cs_prep_begin makes every SQLite allocation of the calling thread fail, until cs_prep_end,
// once g's deadline has passed or cs_prep_cancel was called on g.
static void cs_prep_begin(cs_guard *g) {
	__atomic_store_n(&g->cancel, 0, __ATOMIC_RELAXED);
	cs_prep_stopped = 0;
	cs_prep_guard = g;
}

// cs_prep_cancel makes the allocations of g's prepare running between cs_prep_begin and
// cs_prep_end fail from now on; any thread may call it (it takes no mutex).
static void cs_prep_cancel(cs_guard *g) { __atomic_store_n(&g->cancel, 1, __ATOMIC_RELAXED); }

// cs_prep_end ends what cs_prep_begin started on the calling thread: 1 if an allocation was
// refused since.
static int cs_prep_end(void) {
	cs_prep_guard = 0;
	return cs_prep_stopped;
}

// cs_stored reads column i of the row that db's running statement (the one busy: stepped to a
// row, not reset) stands on, as SQLite stores it: its type (CS_INTEGER, CS_TEXT, ...; 0 when no
// statement is running or i is past its columns), the integer in *n, the text in *text and
// *len (NULL when SQLite ran out of its heap).
static int cs_stored(sqlite3 *db, int i, long long *n, const unsigned char **text, int *len) {
	sqlite3_stmt *st = 0;
	while ((st = sqlite3_next_stmt(db, st)) != 0 && !sqlite3_stmt_busy(st)) {}
	if (st == 0 || i >= sqlite3_column_count(st)) return 0;
	int type = sqlite3_column_type(st, i);
	if (type == CS_INTEGER) *n = sqlite3_column_int64(st, i);
	if (type == CS_TEXT) {
		*text = sqlite3_column_text(st, i);
		*len = sqlite3_column_bytes(st, i);
	}
	return type;
}

// cs_set_deadline makes db's statements stop timeout_ns from now (0: never).
static int cs_set_deadline(sqlite3 *db, int64_t timeout_ns) {
	cs_guard *g = sqlite3_get_clientdata(db, CS_KEY);
	if (g == 0) return 1;
	__atomic_store_n(&g->deadline, timeout_ns > 0 ? cs_now() + timeout_ns : 0, __ATOMIC_RELAXED);
	return 0;
}
*/
import "C"

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"runtime"
	"time"
	"unsafe"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/chainedsql/chainedsql/sandbox"
)

// sqliteProgressOps is how many virtual-machine steps SQLite runs between calls of the progress
// handler that compares the clock with the statement's deadline.
const sqliteProgressOps = 1000

// rawSQLite is c's sqlite3 handle. go-sqlite3 keeps it unexported and offers no progress
// handler, so it is read by reflection; the handle lives as long as c.
func rawSQLite(c *sqlite3.SQLiteConn) (*C.sqlite3, error) {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() {
		return nil, fmt.Errorf("sqlite connection: no database handle in %T (go-sqlite3 changed)", c)
	}
	return (*C.sqlite3)(f.UnsafePointer()), nil
}

// guardSQLite gives the connection c a deadline (sqliteDeadline), enforced by a progress
// handler and by bounded versions of the built-in functions whose one call can outrun it
// (instr, replace, trim/ltrim/rtrim with a set, like, glob): they look at the deadline as they
// work, or refuse a call too costly to start.
func guardSQLite(c *sqlite3.SQLiteConn) error {
	db, err := rawSQLite(c)
	if err != nil {
		return err
	}
	if rc := C.cs_bind(db, sqliteProgressOps); rc != 0 {
		// SQLite's code, so that running out of its heap here reads as it does anywhere else
		// (heapShort).
		return fmt.Errorf("sqlite connection: install the statement guard: %w", sqlite3.Error{Code: sqlite3.ErrNo(rc)})
	}
	return nil
}

// sqliteRowShort returns, for the connection c, a check of whether SQLite ran out of its heap
// converting the values of the row the connection's statement last stepped to for the driver
// (sqlite3_errcode is SQLITE_NOMEM after the row was read): go-sqlite3 then reads the value
// as empty (a zeroblob's expansion, a text's conversion) and only the next step fails. The
// check is for the statement's own goroutine, between its rows.
func sqliteRowShort(c *sqlite3.SQLiteConn) (func() bool, error) {
	db, err := rawSQLite(c)
	if err != nil {
		return nil, err
	}
	return func() bool { return C.sqlite3_errcode(db) == C.CS_NOMEM }, nil
}

// sqliteHeapUsed is how many bytes of SQLite's heap are in use in the process, by every
// connection (sqlite3_memory_used): what sqliteHeapLimit bounds.
func sqliteHeapUsed() int64 { return int64(C.sqlite3_memory_used()) }

// sqliteReleaseCache frees what c's page cache holds of SQLite's heap
// (sqlite3_db_release_memory: every page no statement uses). A connection given back to its
// pool does (releaseSQLite): an idle connection's cache, up to SQLite's default 2000 KiB, is
// SQLite's heap in use (sqliteHeapUsed), which a statement that runs out of the heap reads as
// other statements holding it (heapHeld), and idle connections never give it back.
func sqliteReleaseCache(c *sqlite3.SQLiteConn) error {
	db, err := rawSQLite(c)
	if err != nil {
		return err
	}
	if rc := C.sqlite3_db_release_memory(db); rc != 0 {
		return fmt.Errorf("sqlite connection: release its page cache: %w", sqlite3.Error{Code: sqlite3.ErrNo(rc)})
	}
	return nil
}

// sqliteHeapCap is SQLite's hard heap limit in force for the process
// (sqlite3_hard_heap_limit64): sqliteHeapLimit, which every connection sets, or a lower one set
// before (PRAGMA hard_heap_limit only lowers it); sqliteHeapLimit before any connection set one.
func sqliteHeapCap() int64 {
	if n := int64(C.sqlite3_hard_heap_limit64(-1)); n > 0 {
		return n
	}
	return sqliteHeapLimit
}

// sqliteSetHeapCap sets SQLite's hard heap limit for the process, raising it too, and the soft
// limit to the same, as a connection's PRAGMA hard_heap_limit leaves them (lowering the hard
// limit lowers the soft one; raising it does not raise the soft one back), and returns the hard
// limit before: for tests, which lower it to hold the heap without a gigabyte of memory.
func sqliteSetHeapCap(n int64) int64 {
	prior := int64(C.sqlite3_hard_heap_limit64(C.longlong(n)))
	C.sqlite3_soft_heap_limit64(C.longlong(n))
	return prior
}

// sqliteSoftHeapLimit is SQLite's soft heap limit for the process (sqlite3_soft_heap_limit64),
// past which its page caches recycle pages rather than grow.
func sqliteSoftHeapLimit() int64 { return int64(C.sqlite3_soft_heap_limit64(-1)) }

// sqliteDeadline makes c's statements stop after timeout from now; zero removes the deadline.
func sqliteDeadline(c *sqlite3.SQLiteConn, timeout time.Duration) error {
	db, err := rawSQLite(c)
	if err != nil {
		return err
	}
	if C.cs_set_deadline(db, C.int64_t(timeout)) != 0 {
		return fmt.Errorf("sqlite connection: no statement guard")
	}
	return nil
}

// sqliteAllocGuard is cs_install_alloc's failure, nil when the allocator that lets the deadline
// stop a statement's prepare (sqliteGuardPrepare) is installed: it must be installed before
// SQLite initialises, which no connection of the process does before this package's init.
var sqliteAllocGuard = installAllocGuard()

func installAllocGuard() error {
	if rc := C.cs_install_alloc(); rc != 0 {
		return fmt.Errorf("sqlite: wrap SQLite's allocator for the prepare deadline: %w (SQLite was initialised before package sqlite's init)", sqlite3.Error{Code: sqlite3.ErrNo(rc)})
	}
	return nil
}

// sqliteGuardPrepare returns, for the connection c, a function that runs prepare (the
// driver's prepare of a statement on c, which makes its cgo call on the calling goroutine) with
// every allocation SQLite makes on that goroutine's thread failing once c's deadline
// (sqliteDeadline) has passed or ctx is done, and reports whether either stopped it (prepare
// then returned SQLite's "out of memory", or a statement built without an allocation refused),
// and whether prepare made a statement on c (SQLite makes none for text that is only comments,
// whitespace and semicolons, and go-sqlite3's statement then holds no handle: running it passes
// NULL to sqlite3_clear_bindings, a SIGSEGV that ends the process).
// SQLite's prepare looks at neither the interrupt nor the progress handler, and copies
// expressions: an alias once per reference (SELECT <45 KB expression> AS a ... ORDER BY a+1,
// a+1, ..., 40 KB) or a flattened subquery's column at each level (24 nested SELECT x*x AS x
// FROM (...), 600 bytes: 2^24 copies), which ran 20 to 35 s past a 1 s deadline, holding up to
// the whole heap. The statement is prepared once, by the driver, under the guard: the thread is
// locked for the call (runtime.LockOSThread), where the guard's mark is kept.
func sqliteGuardPrepare(c *sqlite3.SQLiteConn) (func(ctx context.Context, prepare func()) (stopped, made bool), error) {
	db, err := rawSQLite(c)
	if err != nil {
		return nil, err
	}
	g := C.cs_guard_of(db)
	if g == nil {
		return nil, fmt.Errorf("sqlite connection: no statement guard")
	}
	return func(ctx context.Context, prepare func()) (bool, bool) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// SQLite links each statement it makes at the head of db's list (sqlite3VdbeCreate),
		// and nothing else on c finalizes the head meanwhile: a new head is the new statement.
		head := C.sqlite3_next_stmt(db, nil)
		C.cs_prep_begin(g)
		cancelled := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			C.cs_prep_cancel(g)
			close(cancelled)
		})
		var stopped bool
		func() {
			// Ended even if prepare panics: the guard must not stay on for this thread.
			defer func() { stopped = C.cs_prep_end() != 0 }()
			prepare()
		}()
		if !stop() {
			// The cancel has begun: it ends before c can serve another statement, whose
			// cs_prep_begin clears it.
			<-cancelled
		}
		return stopped, C.sqlite3_next_stmt(db, nil) != head
	}, nil
}

// sqliteStoredValues returns, for the connection c, the sandbox.ColumnNormaliser of its
// statements that gives each value as SQLite stores it, as Python's sqlite3 (without
// detect_types) returns it, where go-sqlite3 converts by the column's declared type: in a DATE,
// DATETIME or TIMESTAMP column a text into a time.Time (text it cannot parse, '0000-00-00' or
// 'N/A', into the zero time 0001-01-01) and an integer into a Unix time, in a BOOLEAN column an
// integer into a bool. Such a value is read again, as stored, from the row the connection's
// statement stands on: the conversion runs in Collect's goroutine right after the row's Scan,
// before the next step. Other values are sandbox.Normalise's.
func sqliteStoredValues(c *sqlite3.SQLiteConn) (sandbox.ColumnNormaliser, error) {
	db, err := rawSQLite(c)
	if err != nil {
		return nil, err
	}
	return func(cols []*sql.ColumnType) []func(any) any {
		conv := make([]func(any) any, len(cols))
		for i := range conv {
			conv[i] = func(v any) any {
				switch v.(type) {
				case time.Time, bool:
					return sqliteStored(db, i, v)
				}
				return sandbox.Normalise(v)
			}
		}
		return conv
	}, nil
}

// sqliteStored is column i of the row db's running statement stands on, as stored: an int64 or
// a string; v, the driver's value, where it is neither (SQLite ran out of its heap reading the
// text, which the next step reports: sqliteRowShort).
func sqliteStored(db *C.sqlite3, i int, v any) any {
	var n C.longlong
	var text *C.uchar
	var size C.int
	switch C.cs_stored(db, C.int(i), &n, &text, &size) {
	case C.CS_INTEGER:
		return int64(n)
	case C.CS_TEXT:
		if text != nil {
			return C.GoStringN((*C.char)(unsafe.Pointer(text)), size)
		}
	}
	return v
}
