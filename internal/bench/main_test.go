package bench

import (
	"os"
	"testing"

	"github.com/jetpool/jetpool/internal/testenv"
)

// jetpoolBin is the jetpool binary, built once by TestMain, that the bench
// runs as its child processes (Options.Self).
var jetpoolBin string

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithJetpool(m, "bench", &jetpoolBin))
}
