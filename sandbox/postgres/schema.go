package postgres

import "github.com/chainedsql/chainedsql/sandbox"

// pgCatalog reads a PostgreSQL task schema (current_schema()) from pg_catalog; the screen lets
// these two statements read the system catalogs (pgOwnCatalog).
var pgCatalog = sandbox.Catalog{
	Columns: `SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attnum`,
	Keys: `SELECT c.relname::text, con.conname::text, con.contype::text, a.attname::text,
		COALESCE(rc.relname::text, ''), COALESCE(ra.attname::text, '')
		FROM pg_catalog.pg_constraint con
		JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(attnum, refnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
		LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
		LEFT JOIN pg_catalog.pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refnum
		WHERE n.nspname = current_schema() AND con.contype IN ('p', 'f')
		ORDER BY c.relname, con.contype DESC, con.conname, k.ord`,
}
