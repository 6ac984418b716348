package mysql

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// myParserNatives are native functions of MariaDB 10.11 that its help tables lack (found by
// calling each upper-case word of the mariadbd binary with no arguments: "Incorrect parameter
// count in the call to native function"), and the parser's own functions the brief named.
const myParserNatives = `aes_decrypt aes_encrypt column_add column_check column_create column_delete column_exists
	column_get column_json column_list concat_operator_oracle decode des_decrypt des_encrypt encode json_array
	json_array_append json_array_insert json_arrayagg json_compact json_contains json_contains_path json_detailed
	json_equals json_exists json_extract json_insert json_keys json_length json_loose json_merge json_merge_patch
	json_merge_preserve json_normalize json_object json_objectagg json_overlaps json_pretty json_query json_quote
	json_remove json_replace json_search json_set json_type json_unquote json_valid json_value lpad_oracle
	ltrim_oracle md5 old_password random_bytes replace_oracle rpad_oracle rtrim_oracle sha sha1 sha2 substr_oracle
	trim_oracle uncompressed_length weight_string sformat natural_sort_key export_set make_set regexp_replace
	insert convert cast char format compress uncompress hex quote to_base64 concat concat_ws group_concat`

// myJudgedCalls are the native functions the MariaDB screen lets through, each judged no builder
// on MariaDB 10.11 (a doubling attack, nested 8 to 25 times, as root and as the reader): their
// value is bounded (numbers, dates, hashes, names), no longer than their arguments, or longer by
// a bounded factor once (JSON_DETAILED and JSON_PRETTY indent at most 32 levels, about 64 times a
// flat array; DATE_FORMAT, TIME_FORMAT and TO_CHAR 4.5 times the format; JSON_NORMALIZE and
// JSON_LOOSE 3 times; FORMAT stops at 38 decimals; AES/DES add a block); myCappedDoublers double
// in each nested call but return NULL past max_allowed_packet or group_concat_max_len. Some names
// are operators (`like`(x) is a column's name before a parenthesis) or 11.x functions from the help tables (kdf, vec_fromtext): the server here does
// not know them.
const myJudgedCalls = `abs acos add_months adddate addtime aes_decrypt aes_encrypt ascii asin atan atan2 avg bin
	binlog_gtid_pos bit_and bit_count bit_length bit_or bit_xor cast ceil ceiling char char_length
	character_length charset chr coalesce coercibility collation column_add column_check column_create
	column_delete column_exists column_get column_list compress concat concat_operator_oracle concat_ws
	connection_id conv convert convert_tz cos cot count crc32 crc32c curdate current_date current_role
	current_time current_timestamp current_user curtime database date_add date_sub datediff day dayname
	dayofmonth dayofweek dayofyear decode decode_histogram decode_oracle default degrees des_decrypt
	des_encrypt div elt encode exp extract field find_in_set floor format_bytes format_pico_time
	found_rows from_base64 from_days from_unixtime get_format greatest group_concat hour ifnull in
	inet6_aton inet6_ntoa inet_aton inet_ntoa insert instr interval is is_ipv4 is_ipv4_compat
	is_ipv4_mapped is_ipv6 isnull json_array json_array_intersect json_arrayagg json_compact json_contains
	json_contains_path json_equals json_exists json_extract json_key_value json_keys json_length json_merge
	json_merge_patch json_merge_preserve json_object json_object_filter_keys json_object_to_array
	json_overlaps json_query json_remove json_schema_valid json_search json_table json_type json_unquote
	json_valid json_value kdf last_day last_insert_id last_value lcase least left length lengthb ln
	localtime localtimestamp log log10 log2 lower ltrim ltrim_oracle make_set makedate maketime max md5
	microsecond mid min minute mod month monthname months_between name_const now nullif nvl nvl2 oct
	octet_length old_password old_value ord parentheses period_add period_diff pi pow power quarter
	radians rand random_bytes regexp regexp_instr regexp_substr reverse right rlike round row_count
	rownum rtrim rtrim_oracle schema sec_to_time second session_user sha sha1 sha2 sign sin sleep
	soundex sqrt std stddev stddev_pop stddev_samp str_to_date strcmp subdate substr substr_oracle
	substring substring_index subtime sum sys_guid sysdate system_user tan time_to_sec timediff
	timestampadd timestampdiff to_date to_days to_number to_seconds trim trim_oracle trunc truncate
	ucase uncompressed_length unhex unix_timestamp upper user utc_date utc_time utc_timestamp uuid
	uuid_short uuid_v4 uuid_v7 var_pop var_samp variance vec_fromtext version week weekday weekofyear
	wsrep_last_seen_gtid wsrep_last_written_gtid wsrep_sync_wait_upto_gtid x xor y year yearweek
	json_detailed json_pretty json_loose json_normalize date_format time_format to_char natural_sort_key format
	hex quote to_base64 like case date if`

// myBuilders are the native functions that build a value of megabytes from a few bytes, in one
// call or doubling in nested calls past max_allowed_packet: the screen must refuse each.
const myBuilders = `repeat lpad rpad space binary uncompress sformat weight_string export_set lpad_oracle rpad_oracle
	replace replace_oracle regexp_replace json_quote json_set json_insert json_replace json_array_append
	json_array_insert json_objectagg column_json`

// TestMySQLNativeCatalog: every native function name MariaDB knows (its help tables' function
// topics, and myParserNatives, each checked known to the server) that the screen lets through
// as a call is one judged no builder (myJudgedCalls), and every builder (myBuilders) is refused,
// so that a name a new MariaDB adds, or a rule that stops refusing one, fails here until judged.
func TestMySQLNativeCatalog(t *testing.T) {
	admin := sandboxtest.MyAdmin(t)
	ctx := context.Background()
	help, err := sandbox.QueryStrings(ctx, admin, `SELECT DISTINCT replace(lower(t.name), '\\_', '_') FROM mysql.help_topic t
		JOIN mysql.help_category c USING (help_category_id)
		WHERE c.name LIKE '%Function%' OR c.name = 'Geographic Features'`)
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	names := map[string]bool{}
	for _, n := range help {
		n = strings.TrimSuffix(strings.TrimSuffix(n, " function"), " operator") // REPEAT Function, BINARY Operator
		if word.MatchString(n) {
			names[n] = true
		}
	}
	if len(names) < 300 {
		t.Fatalf("the help tables list %d function names, want over 300", len(names))
	}
	for _, n := range strings.Fields(myParserNatives) {
		var one any
		if err := admin.QueryRowContext(ctx, "SELECT "+n+"()").Scan(&one); err != nil && strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%s: %v; want it known to the server", n, err)
		}
		names[n] = true
	}
	judged := map[string]bool{}
	for _, n := range strings.Fields(myJudgedCalls) {
		judged[n] = true
	}
	for _, n := range strings.Fields(myBuilders) {
		if !names[n] {
			t.Errorf("builder %s is not in the catalog", n)
		}
		if judged[n] {
			t.Errorf("builder %s is judged no builder", n)
		}
		names[n] = true
	}
	for n := range names {
		for _, q := range []string{"SELECT " + n + "(x) FROM t", "SELECT `" + n + "` (x) FROM t"} {
			if _, why := sandbox.Screen(q, datasets.MySQL); why == "" && !judged[n] {
				t.Errorf("%s passed the screen, and %s is not judged (myJudgedCalls)", q, n)
			}
		}
	}
}
