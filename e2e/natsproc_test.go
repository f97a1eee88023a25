package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// natsCluster is three real nats-server processes (the binary CI
// installs), routed to each other with JetStream: a node can be killed
// (SIGKILL), frozen (SIGSTOP) and started again on its store, as operators
// and machines do to them. Only loopback addresses.
type natsCluster struct {
	t     testing.TB
	bin   string
	nodes []*natsNode
}

type natsNode struct {
	name   string
	conf   string
	port   int
	http   int    // monitoring: /healthz
	log    string // the server's log, kept by E2E_LOG_DIR when the test fails
	cmd    *exec.Cmd
	done   chan struct{}
	frozen bool
}

// natsOpts shape a cluster's nodes.
type natsOpts struct {
	// SyncAlways: fsync every write (sync_interval: always), as the careful
	// deploy.
	SyncAlways bool
	// MaxStore caps each node's file store (max_file_store), 0: none.
	MaxStore int64
	// Nodes is 3 unless set (1: a single server).
	Nodes int
}

// startNATSCluster starts the nodes and waits for a meta leader; the test
// holds the cluster lock (one cluster at a time on two cores) until it ends.
func startNATSCluster(t testing.TB, o natsOpts) *natsCluster {
	t.Helper()
	clusters.Lock()
	t.Cleanup(clusters.Unlock)
	n := o.Nodes
	if n == 0 {
		n = 3
	}
	c := &natsCluster{t: t, bin: tool(t, "nats-server")}
	ports := freePorts(t, 3*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	dir := t.TempDir()
	for i := range n {
		nd := &natsNode{name: fmt.Sprintf("n%d", i+1), port: ports[i], http: ports[2*n+i]}
		store := filepath.Join(dir, nd.name)
		js := fmt.Sprintf("store_dir: %q", store)
		if o.SyncAlways {
			js += "\n  sync_interval: always"
		}
		if o.MaxStore > 0 {
			js += fmt.Sprintf("\n  max_file_store: %d", o.MaxStore)
		}
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nmax_payload: 8MB\njetstream {\n  %s\n}\n", nd.name, nd.port, nd.http, js)
		if n > 1 {
			conf += fmt.Sprintf("cluster {\n  name: jetpool-chaos\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", ports[n+i], strings.Join(routes, ", "))
		}
		nd.conf = filepath.Join(dir, nd.name+".conf")
		nd.log = filepath.Join(dir, nd.name+".log")
		require.NoError(t, os.WriteFile(nd.conf, []byte(conf), 0o600))
		c.nodes = append(c.nodes, nd)
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.kill(i)
		}
		if logs := os.Getenv("E2E_LOG_DIR"); logs != "" && t.Failed() {
			for _, nd := range c.nodes {
				if b, err := os.ReadFile(nd.log); err == nil {
					_ = os.WriteFile(filepath.Join(logs, strings.ReplaceAll(t.Name(), "/", "_")+"-nats-"+nd.name+".log"), b, 0o644)
				}
			}
		}
	})
	return c
}

// start starts node i (again, on its store).
func (c *natsCluster) start(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	nd.cmd = exec.Command(c.bin, "-c", nd.conf)
	logf, err := os.OpenFile(nd.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(c.t, err)
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	require.NoError(c.t, nd.cmd.Start(), "start %s", nd.name)
	logf.Close() // the child has its own
	nd.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(nd.cmd, nd.done)
	nd.frozen = false
	// A restarted node recovers its store before it listens: under the race
	// detector on two loaded cores that took more than 20 s (CI, 2026-12-05).
	testenv.Eventually(c.t, 60*time.Second, func() bool {
		select {
		case <-nd.done:
			require.FailNow(c.t, fmt.Sprintf("%s exited while starting: see %s", nd.name, nd.log))
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", nd.port), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, "%s listens", nd.name)
}

// kill SIGKILLs node i and waits for it to be gone.
func (c *natsCluster) kill(i int) {
	nd := c.nodes[i]
	if nd.cmd == nil {
		return
	}
	select {
	case <-nd.done:
		return
	default:
	}
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.done
}

// freeze and thaw stop and continue node i (SIGSTOP, SIGCONT): its
// connections stay open and silent, as a node swapping or paused by its VM.
func (c *natsCluster) freeze(i int) {
	c.t.Helper()
	require.NoError(c.t, c.nodes[i].cmd.Process.Signal(syscall.SIGSTOP))
	c.nodes[i].frozen = true
}

func (c *natsCluster) thaw(i int) {
	c.t.Helper()
	require.NoError(c.t, c.nodes[i].cmd.Process.Signal(syscall.SIGCONT))
	c.nodes[i].frozen = false
}

func (c *natsCluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].port) }

func (c *natsCluster) urls() string {
	var u []string
	for i := range c.nodes {
		u = append(u, c.url(i))
	}
	return strings.Join(u, ",")
}

func (c *natsCluster) byName(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// leader is the node that leads stream now (-1 when it has none), read
// through b (retried while the cluster does not answer).
func (c *natsCluster) leader(b *broker.Broker, stream string) int {
	c.t.Helper()
	leader := -1
	testenv.Eventually(c.t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s, err := b.JS.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false
		}
		leader = c.byName(info.Cluster.Leader)
		return leader >= 0
	}, "stream %s has a leader", stream)
	return leader
}

// healthy waits until node i's /healthz says ok: every stream and consumer
// it holds a replica of has caught up. An operator's rolling restart waits
// for it before the next node (deploy/README.md); a kill before it can
// leave a stream without a quorum of current replicas.
func (c *natsCluster) healthy(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	client := &http.Client{Timeout: 3 * time.Second}
	var last string
	deadline := time.Now().Add(90 * time.Second)
	ok := func() bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.http))
		if err != nil {
			last = err.Error()
			return false
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK
	}
	for !ok() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not healthy (/healthz) within 90s: last said %s", nd.name, last)
		}
		testenv.Tick()
	}
}

// current waits until every replica of stream is current again (a node
// that was killed or frozen has caught up).
func (c *natsCluster) current(b *broker.Broker, stream string) {
	c.t.Helper()
	testenv.Eventually(c.t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s, err := b.JS.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != len(c.nodes)-1 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	}, "every replica of %s current", stream)
}
