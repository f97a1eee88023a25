package export_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/export"
)

// A CSV export names the deployment that answered each record and its
// fallback moves (recovery.routes) as the JSONL result writes them.
func TestCSVExportDeploymentAndRoutes(t *testing.T) {
	t.Parallel()
	b, job, o := setup(t)
	o.Format, o.Sorted = export.CSV, true
	var out bytes.Buffer
	_, err := export.Write(context.Background(), b, job, &out, o)
	require.NoError(t, err)
	rows, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 5, "a header and four records")
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	require.Equal(t, col["model"]+1, col["deployment"])
	require.Equal(t, col["deployment"]+1, col["routes"])
	require.Equal(t, "sim-2", rows[1][col["deployment"]])
	var routes []broker.Route
	require.NoError(t, json.Unmarshal([]byte(rows[1][col["routes"]]), &routes))
	require.Equal(t, []broker.Route{{After: 1, From: "sim/m0", To: "sim/m", On: "content_filter"}}, routes)
	require.Empty(t, rows[2][col["deployment"]])
	require.Empty(t, rows[2][col["routes"]], "no moves: an empty cell")
	require.JSONEq(t, `[{"from":"sim/m0","to":"sim/m","on":"outage"},{"after":2,"from":"sim/m","to":"sim/m2","on":"server"}]`,
		rows[3][col["routes"]])
}
