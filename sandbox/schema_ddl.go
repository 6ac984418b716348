package sandbox

import (
	"regexp"
	"strings"

	"github.com/chainedsql/chainedsql/datasets"
)

// DDL renders the schema as CREATE TABLE statements of dialect d: identifiers quoted only where
// needed (QuoteIdent), declared types, NOT NULL, the primary key and foreign keys as table
// constraints, and each column's samples as a trailing comment ("-- examples: 'Rock', 'Jazz'";
// numbers bare unless the column's type is textual). The output is deterministic.
func (s *Schema) DDL(d datasets.Dialect) string {
	var b strings.Builder
	for ti, t := range s.Tables {
		if ti > 0 {
			b.WriteString("\n")
		}
		b.WriteString("CREATE TABLE " + QuoteIdent(d, t.Name) + " (\n")
		type line struct{ def, comment string }
		var lines []line
		for _, c := range t.Columns {
			def := "  " + QuoteIdent(d, c.Name)
			if c.Type != "" {
				def += " " + c.Type
			}
			if c.NotNull {
				def += " NOT NULL"
			}
			comment := ""
			if len(c.Samples) > 0 {
				lits := make([]string, len(c.Samples))
				for i, v := range c.Samples {
					lits[i] = sampleLiteral(c.Type, v)
				}
				comment = " -- examples: " + strings.Join(lits, ", ")
			}
			lines = append(lines, line{def, comment})
		}
		if len(t.PrimaryKey) > 0 {
			lines = append(lines, line{"  PRIMARY KEY (" + quoteList(d, t.PrimaryKey) + ")", ""})
		}
		for _, fk := range t.ForeignKeys {
			ref := "  FOREIGN KEY (" + quoteList(d, fk.Columns) + ") REFERENCES " + QuoteIdent(d, fk.RefTable)
			if strings.Join(fk.RefColumns, "") != "" {
				ref += " (" + quoteList(d, fk.RefColumns) + ")"
			}
			lines = append(lines, line{ref, ""})
		}
		for i, l := range lines {
			b.WriteString(l.def)
			if i < len(lines)-1 {
				b.WriteString(",")
			}
			b.WriteString(l.comment + "\n")
		}
		b.WriteString(");\n")
	}
	return b.String()
}

func quoteList(d datasets.Dialect, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = QuoteIdent(d, n)
	}
	return strings.Join(q, ", ")
}

// plainNumber matches sample text that reads as a number literal as it stands.
var plainNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?(e[-+][0-9]+)?$`)

// sampleLiteral renders a sample as a SQL literal: bare when it reads as a number and the column
// type is not textual (SQLite's affinity rule: CHAR, CLOB or TEXT in the name), else quoted.
func sampleLiteral(typ, v string) string {
	t := strings.ToUpper(typ)
	textual := strings.Contains(t, "CHAR") || strings.Contains(t, "CLOB") || strings.Contains(t, "TEXT")
	if !textual && plainNumber.MatchString(v) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// QuoteWith returns name as an identifier, quoted in q (its own q doubled) only when needed:
// characters other than letters, digits and '_', a leading digit, a reserved word, or, when
// foldsUpper (PostgreSQL), upper-case letters the engine would fold.
func QuoteWith(name string, foldsUpper bool, q string) string {
	plain := name != ""
	for i, r := range name {
		ok := r == '_' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9' || !foldsUpper && r >= 'A' && r <= 'Z'
		if !ok {
			plain = false
			break
		}
	}
	if plain && !reservedWords[strings.ToLower(name)] {
		return name
	}
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// reservedWords are words reserved as identifiers in at least one of SQLite, PostgreSQL and
// MySQL/MariaDB; quoting one of them needlessly in another engine is harmless.
var reservedWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		add all alter analyse analyze and any array as asc asymmetric between bigint binary blob both by
		call cascade case cast change char character check collate column condition constraint
		continue convert create cross current_date current_role current_time current_timestamp
		current_user cursor database databases day_hour day_minute day_second dec decimal declare
		default deferrable delete desc describe distinct div do double drop else elseif enclosed end
		escape escaped except exists exit explain false fetch float for force foreign freeze from
		full fulltext glob grant group having high_priority hour_minute hour_second if ignore ilike in
		index indexed infile initially inner insert int integer intersect interval into is isnull
		iterate join key keys kill lateral leading leave left like limit lines load localtime
		localtimestamp lock long loop match mod modifies natural not notnull null numeric of offset on
		only optimize option or order out outer over partition placing precision primary procedure
		purge range rank read real recursive references regexp release rename repeat replace require
		restrict return returning revoke right rlike row rows schema schemas select separator set show
		similar smallint some spatial sql ssl starting symmetric table terminated then tinyint to
		trailing trigger true undo union unique unlock unsigned update usage use user using values
		varchar varying verbose when where while window with write xor year_month zerofill
		authorization collation concurrently current_catalog current_schema overlaps session_user
		tablesample variadic groups system member cume_dist dense_rank first_value lag last_value
		lead nth_value ntile percent_rank row_number`) {
		reservedWords[w] = true
	}
}
