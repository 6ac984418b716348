package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
	"github.com/go-sql-driver/mysql"
)

// myLimitReader sets limit (ALTER USER ... WITH limit, e.g. MAX_QUERIES_PER_HOUR 2) on every
// account of reader.
func myLimitReader(t *testing.T, admin *sql.DB, reader, limit string) {
	t.Helper()
	accounts, err := sandbox.QueryStrings(context.Background(), admin, "SELECT CONCAT('''', User, '''@''', Host, '''') FROM mysql.user WHERE User = ?", reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range accounts {
		if _, err := admin.Exec("ALTER USER " + a + " WITH " + limit); err != nil {
			t.Fatal(err)
		}
	}
}

// myRefusedAtOnce runs 10 statements of 0.3 s at once, spread over dbs, and returns how many
// were refused as refused says (given the error and the time the statement took); every other
// must be ok, else the test fails saying want.
func myRefusedAtOnce(t *testing.T, dbs []sandbox.DB, want string, refused func(error, time.Duration) bool) int {
	t.Helper()
	var wg sync.WaitGroup
	var n atomic.Int64
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			r, err := dbs[i%len(dbs)].Exec(context.Background(), "SELECT SLEEP(0.3)", sandbox.ExecOptions{Timeout: 2 * time.Second})
			took := time.Since(began)
			switch {
			case err == nil && r.OK():
			case refused(err, took):
				n.Add(1)
			default:
				t.Errorf("statement %d: %+v, %v after %v; want ok, or %s", i, r, err, took.Round(time.Millisecond), want)
			}
		}()
	}
	wg.Wait()
	return int(n.Load())
}

// TestMySQLHourlyLimits: error 1226 naming an hourly resource (an administrator's
// MAX_QUERIES_PER_HOUR or MAX_CONNECTIONS_PER_HOUR on the reader) is ErrHourlyLimit, a
// configuration error given at once: not sandbox.ErrBusy, which sandbox.Patient tried again
// until its patience ran out (and then, a pooled connection free, ran the statement as if the
// limit were not there), and which the env answers with Retry-After. Statements on new
// connections (10 at once, the limit set after the engine opened) are ok or refused so, within
// a second through a Patient of 5 s; an engine connecting past the limit is refused so too, and
// so is each query of a connection, an Open and an Exec as the limit runs out there.
// max_user_connections, 1226's other resource, stays ErrBusy (TestMySQLServerFullBusy).
func TestMySQLHourlyLimits(t *testing.T) {
	for _, limit := range []string{"MAX_QUERIES_PER_HOUR 2", "MAX_CONNECTIONS_PER_HOUR 1"} {
		t.Run(strings.Fields(limit)[0], func(t *testing.T) {
			admin, reader, _, dbs := myHostileSetup(t, 1, 0)
			myLimitReader(t, admin, reader, limit)
			db := sandbox.Patient(dbs[0], 5*time.Second)
			want := "ErrHourlyLimit naming " + limit + " at once"
			refused := myRefusedAtOnce(t, []sandbox.DB{db}, want, func(err error, took time.Duration) bool {
				return errors.Is(err, ErrHourlyLimit) && !errors.Is(err, sandbox.ErrBusy) && took < time.Second &&
					strings.Contains(err.Error(), strings.Fields(limit)[0]) && strings.Contains(err.Error(), "not tried again")
			})
			if refused == 0 {
				t.Errorf("no statement was refused for the reader's %s (10 at once)", limit)
			}
		})
	}
	t.Run("connect", func(t *testing.T) {
		_, eng, err := myLimitedEngine(t, 2)
		if err == nil {
			eng.Close()
		}
		if !errors.Is(err, ErrHourlyLimit) || errors.Is(err, sandbox.ErrReader) || !strings.Contains(err.Error(), "MAX_QUERIES_PER_HOUR") {
			t.Fatalf("connecting as a reader past its MAX_QUERIES_PER_HOUR 2: %v; want ErrHourlyLimit naming it", err)
		}
	})
	// Each limit from 18 to 30 queries runs out at another of the queries a connection, an Open
	// and an Exec send: every one is refused so, the statement's own included (there, before,
	// an error Result: the statement's SQL error, judged as the model's answer).
	t.Run("every query", func(t *testing.T) {
		atStatement := 0
		for q := 18; q <= 30; q++ {
			name, eng, err := myLimitedEngine(t, q)
			if err == nil {
				var db sandbox.DB
				if db, err = eng.Open(context.Background(), datasets.Task{ID: "x", DBID: name}); err == nil {
					for err == nil {
						var r *sandbox.Result
						if r, err = db.Exec(context.Background(), "SELECT 1", sandbox.ExecOptions{Timeout: 2 * time.Second}); err == nil && !r.OK() {
							t.Errorf("MAX_QUERIES_PER_HOUR %d: %s %q, want ok or ErrHourlyLimit", q, r.Outcome, r.Error)
							break
						}
					}
					if strings.Contains(fmt.Sprint(err), "database "+name+": Error 1226") {
						atStatement++
					}
					db.Close()
				}
				eng.Close()
			}
			if err != nil && !errors.Is(err, ErrHourlyLimit) {
				t.Errorf("MAX_QUERIES_PER_HOUR %d: %v; want ErrHourlyLimit", q, err)
			}
		}
		if atStatement == 0 {
			t.Errorf("no limit ran out at the statement itself")
		}
	})
}

// myLimitedEngine connects as a new reader of a new database (its name returned), limited to
// queries an hour.
func myLimitedEngine(t *testing.T, queries int) (string, sandbox.Engine, error) {
	t.Helper()
	admin := sandboxtest.MyAdmin(t)
	name := myHostileName("db")
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	reader := myHostileName("rd")
	sandboxtest.GrantReader(t, datasets.MySQL, reader, name)
	myLimitReader(t, admin, reader, fmt.Sprintf("MAX_QUERIES_PER_HOUR %d", queries))
	eng, err := Dialect{}.Connect(context.Background(), &sandbox.Connector{DSN: map[datasets.Dialect]string{datasets.MySQL: shared.MySQLDSN()}, Access: sandbox.Access{Reader: reader}})
	return name, eng, err
}

// TestMySQLHourlyLimitNames: the resources MariaDB and MySQL name in error 1226 map to their
// limits; max_user_connections (connections at once) and other errors are no hourly limit.
func TestMySQLHourlyLimitNames(t *testing.T) {
	for msg, want := range map[string]string{
		"User 'r' has exceeded the 'max_queries_per_hour' resource (current value: 2)":     "MAX_QUERIES_PER_HOUR",
		"User 'r' has exceeded the 'max_questions' resource (current value: 2)":            "MAX_QUERIES_PER_HOUR",
		"User 'r' has exceeded the 'max_updates_per_hour' resource (current value: 2)":     "MAX_UPDATES_PER_HOUR",
		"User 'r' has exceeded the 'max_updates' resource (current value: 2)":              "MAX_UPDATES_PER_HOUR",
		"User 'r' has exceeded the 'max_connections_per_hour' resource (current value: 1)": "MAX_CONNECTIONS_PER_HOUR",
		"User 'r' has exceeded the 'max_user_connections' resource (current value: 2)":     "",
		// Other languages (lc_messages): the resource stays quoted, and quoted last.
		"Benutzer 'r' hat die Ressourcenbeschränkung 'max_queries_per_hour' überschritten (aktueller Wert: 2)": "MAX_QUERIES_PER_HOUR",
		"ユーザー 'r' はリソースの上限 'max_connections_per_hour' に達しました。(現在値: 1)":                                         "MAX_CONNECTIONS_PER_HOUR",
		"用户'r'已超过'max_updates_per_hour'资源（当前值：2）":                                                              "MAX_UPDATES_PER_HOUR",
		"Пользователь 'r' превысил использование ресурса 'max_user_connections' (текущее значение: 2)":         "",
		// A reader whose name holds a resource's quoted name: the resource is the one quoted last.
		"User 'r'max_questions'' has exceeded the 'max_user_connections' resource (current value: 2)":         "",
		"User 'r'max_user_connections'' has exceeded the 'max_updates' resource (current value: 2)":           "MAX_UPDATES_PER_HOUR",
		"User 'max_connections_per_hour' has exceeded the 'max_user_connections' resource (current value: 2)": "",
	} {
		err := fmt.Errorf("connect: %w", &mysql.MySQLError{Number: 1226, Message: msg})
		if got := mysqlHourlyLimit(err); got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
		if h := mysqlHourly(err); errors.Is(h, ErrHourlyLimit) != (want != "") || !errors.Is(h, err) {
			t.Errorf("%q: %v", msg, h)
		}
	}
	if got := mysqlHourlyLimit(&mysql.MySQLError{Number: 1040, Message: "'max_questions'"}); got != "" {
		t.Errorf("error 1040: %q", got)
	}
}
