// Writes the Parquet fixtures of dispatcher/testdata/parquet with DuckDB, an
// implementation other than jetpool's (parquet-go). Run it again only to
// change them (it is not run by the tests):
//
//   npm ci && node fixtures.mjs ../../../dispatcher/testdata/parquet
import { DuckDBInstance } from '@duckdb/node-api';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node fixtures.mjs DIR');
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();

// Every type DuckDB writes, nested ones and nulls included.
await c.run(`COPY (SELECT
    i::BIGINT AS id,
    'text ' || i || CASE WHEN i = 1 THEN e' "quoted"\\\\ \\n tab\\t é ✓' ELSE '' END AS text,
    CASE WHEN i % 3 = 0 THEN NULL ELSE i::INTEGER END AS maybe,
    {'a': i, 'b': [i, i + 1], 'c': {'d': 'x'}} AS s,
    CASE WHEN i = 2 THEN NULL ELSE {'n': CASE WHEN i = 3 THEN NULL ELSE i END} END AS ns,
    CASE i WHEN 4 THEN [] WHEN 5 THEN NULL ELSE [i, NULL, 3] END AS l,
    MAP {'k': i, 'j': -i} AS m,
    DATE '2024-01-02' + i::INTEGER AS d,
    TIMESTAMP '2024-01-02 03:04:05.123456' + INTERVAL (i) SECOND AS ts,
    TIMESTAMP_MS '2024-01-02 03:04:05.120' AS ts_ms,
    TIMESTAMP_NS '2024-01-02 03:04:05.123456789' AS ts_ns,
    TIMESTAMPTZ '2024-01-02 03:04:05.5+00' AS tstz,
    (-12.34 + i)::DECIMAL(10,2) AS dec,
    123456789012345678.5::DECIMAL(38,1) AS bigdec,
    (-0.05)::DECIMAL(4,3) AS smalldec,
    i % 2 = 0 AS flag,
    1.5::FLOAT AS f,
    CASE WHEN i = 6 THEN 'NaN'::DOUBLE WHEN i = 7 THEN 1e300 ELSE 2.25 END AS dbl,
    '\\x00\\xff'::BLOB AS blob,
    TIME '12:34:56.789' AS t,
    '8c2b5c0e-2a3d-4e1f-9b1a-0c6a1c7d9e11'::UUID AS u,
    ''::VARCHAR AS empty,
    (-5)::TINYINT AS tiny,
    40000::USMALLINT AS us,
    18446744073709551615::UBIGINT AS ub,
    [{'x': 1}, {'x': NULL}] AS lst,
    [[1, 2], [], [3]] AS ll,
    INTERVAL 1 DAY AS iv,
    '{"k": [1, 2]}'::JSON AS js
  FROM range(10) t(i)) TO '${dir}/types.parquet' (FORMAT parquet)`);

// Records for a run: an id, a text and a nested field.
await c.run(`COPY (SELECT 'r' || i AS id, 'record number ' || i AS text,
    {'lang': 'en', 'tags': ['a', 'b']} AS meta
  FROM range(1, 21) t(i)) TO '${dir}/records.parquet' (FORMAT parquet)`);

// Many records in three row groups (DuckDB's groups hold multiples of
// 2,048 rows).
await c.run(`COPY (SELECT 'g' || i AS id, 'row ' || i AS text
  FROM range(1, 5001) t(i)) TO '${dir}/groups.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048)`);
