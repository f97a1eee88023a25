package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	_ "bufio"
	_ "cmp"
	_ "context"
	_ "encoding/json"
	_ "errors"
	_ "flag"
	_ "fmt"
	_ "github.com/jetpool/jetpool"
	_ "github.com/jetpool/jetpool/batch"
	_ "github.com/jetpool/jetpool/broker"
	_ "github.com/jetpool/jetpool/deadletter"
	_ "github.com/jetpool/jetpool/dispatcher"
	_ "github.com/jetpool/jetpool/export"
	_ "github.com/jetpool/jetpool/internal/bench"
	_ "github.com/jetpool/jetpool/internal/jobstatus"
	_ "github.com/jetpool/jetpool/internal/profile"
	_ "github.com/jetpool/jetpool/provider"
	_ "github.com/jetpool/jetpool/ratelimit"
	_ "github.com/jetpool/jetpool/retry"
	_ "github.com/jetpool/jetpool/steer"
	_ "github.com/jetpool/jetpool/tracing"
	_ "github.com/jetpool/jetpool/ui"
	_ "github.com/jetpool/jetpool/worker"
	_ "github.com/jetpool/jetpool/workflow"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/rs/zerolog"
	_ "github.com/schollz/progressbar/v3"
	_ "golang.org/x/term"
	_ "io"
	_ "maps"
	_ "math"
	_ "net"
	_ "net/http"
	_ "os"
	_ "os/signal"
	_ "path/filepath"
	_ "runtime"
	_ "runtime/debug"
	_ "runtime/metrics"
	_ "slices"
	_ "sort"
	_ "strconv"
	_ "strings"
	_ "sync"
	_ "sync/atomic"
	_ "syscall"
	_ "text/tabwriter"
	_ "time"
)

func main() {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fmt.Println("live heap", m.HeapAlloc, "stacks", m.StackInuse, "sys", m.Sys)
	if len(os.Args) > 1 {
		f, _ := os.Create(os.Args[1])
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
}
