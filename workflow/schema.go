package workflow

import "github.com/jetpool/jetpool/expect"

// The real JSON Schema check: `jetpool validate` (and every Parse or Decode)
// refuses a schema that does not compile, at the schema's line. expect
// imports neither workflow nor worker, so the dependency stays one-way.
func init() { SchemaCheck = expect.CheckSchema }
