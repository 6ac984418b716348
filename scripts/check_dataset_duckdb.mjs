// Independent reader for a curated dataset: DuckDB (through the npm package @duckdb/node-api)
// reads data/*.parquet, checks the column types the card declares and compares row and token
// totals with stats.json. Not part of CI (it needs the npm package):
//
//   npm install @duckdb/node-api    # in any folder on NODE_PATH, e.g. /tmp/duck
//   NODE_PATH=/tmp/duck/node_modules node scripts/check_dataset_duckdb.mjs DATASET_DIR
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const { DuckDBInstance } = require("@duckdb/node-api");

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node scripts/check_dataset_duckdb.mjs DATASET_DIR");
  process.exit(2);
}
const stats = JSON.parse(readFileSync(join(dir, "stats.json"), "utf8"));
const glob = join(dir, "data", "train-*.parquet").replaceAll("'", "''");
const db = await DuckDBInstance.create(":memory:");
const con = await db.connect();
const rows = async (sql) => (await con.runAndReadAll(sql)).getRowObjects();

const want = {
  messages: "STRUCT(role VARCHAR, content VARCHAR)[]",
  reasoning: "VARCHAR[]",
  teacher: "VARCHAR", dialect: "VARCHAR", key: "VARCHAR", difficulty: "VARCHAR",
  turns: "BIGINT", num_tokens: "BIGINT", num_trainable_tokens: "BIGINT", format_violations: "BIGINT",
  converged: "BOOLEAN", exec_ok: "BOOLEAN", correct: "BOOLEAN",
};
let bad = 0;
const types = Object.fromEntries((await rows(`DESCRIBE SELECT * FROM read_parquet('${glob}')`)).map((r) => [r.column_name, r.column_type]));
for (const [col, type] of Object.entries(want)) {
  if (types[col]?.replaceAll('"', "") !== type) {
    console.error(`column ${col}: DuckDB reads ${types[col]}, want ${type}`);
    bad++;
  }
}
const [t] = await rows(`SELECT count(*)::BIGINT AS n, sum(num_tokens)::BIGINT AS tok, sum(num_trainable_tokens)::BIGINT AS tr,
  count(DISTINCT key)::BIGINT AS keys, sum(len(messages))::BIGINT AS msgs,
  sum(CASE WHEN messages[len(messages)].role = 'assistant' THEN 1 ELSE 0 END)::BIGINT AS ends_assistant
  FROM read_parquet('${glob}')`);
const check = (name, got, exp) => {
  if (BigInt(got) !== BigInt(exp)) {
    console.error(`${name}: DuckDB ${got}, stats.json ${exp}`);
    bad++;
  }
};
check("rows", t.n, stats.rows);
check("num_tokens sum", t.tok ?? 0, stats.tokens.sum);
check("num_trainable_tokens sum", t.tr ?? 0, stats.trainable_tokens);
check("distinct keys", t.keys, stats.rows);
console.log(`${dir}: ${t.n} rows, ${t.msgs} messages, ${t.tok} tokens, ${t.tr} trainable, ${t.ends_assistant} rows ending with an assistant turn`);
if (bad) {
  console.error(`${bad} problems`);
  process.exit(1);
}
console.log("DuckDB agrees with stats.json and the declared column types");
