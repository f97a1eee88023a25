// Runs SQL statements in an in-memory DuckDB, one per argument, and prints
// the last one's result as JSON: {"columns": [{"name", "type"}], "rows": [...]}
// with each value as DuckDB's JSON form of it. jetpool's tests use it to
// write Parquet files with an implementation other than jetpool's, and to
// read jetpool's own back.
import { DuckDBInstance } from '@duckdb/node-api';

const stmts = process.argv.slice(2);
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
for (const s of stmts.slice(0, -1)) await c.run(s);
const r = await c.runAndReadAll(stmts[stmts.length - 1]);
const columns = r.columnNames().map((name, i) => ({ name, type: r.columnTypes()[i].toString() }));
process.stdout.write(JSON.stringify({ columns, rows: r.getRowObjectsJson() }) + '\n');
