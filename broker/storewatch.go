package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// An embedded server's store lives on a disk it shares with everything
// else on the machine, and that disk changes under it. nats-server sizes its
// file store once, at start, from the space then free, and when a write
// meets a full disk it shuts JetStream down for good: a `jetpool run` whose
// disk filled and was then freed or grown would hold its answers forever.
// storeWatch follows the disk instead: it raises the store's limit as space
// appears, starts JetStream again once space is back after a full disk, and
// notices a data dir removed under the process, which nothing can recover
// from (StoreLost).

// StoreWatchInterval is how often an embedded server's disk is looked at.
const StoreWatchInterval = time.Second

// storeRestartFree is the free space a disk needs before JetStream, shut
// down by a full disk, is started again: enough for the writes that were
// held, so it does not fill again at once.
const storeRestartFree = 16 << 20

// ErrStoreLost is returned (StoreLost) when the embedded server's data dir
// was removed or replaced while the process ran: what the store held is
// gone, and the process cannot go on with it.
var ErrStoreLost = errors.New("the data dir was removed while jetpool used it")

// storeWatch is an embedded server's watcher of its disk.
type storeWatch struct {
	b        *Broker
	srv      *server.Server
	opts     *server.Options // as the server was started (a copy), for reloads
	dir      string          // the data dir
	storeDir string          // opts.StoreDir
	lockIno  uint64          // the inode of the lock file this process holds
	down     bool            // JetStream seen shut down (by a full disk), not started again yet

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	lendOnce sync.Once   // StopReserve
	lent     atomic.Bool // StopReserve raised the limit

	mu   sync.Mutex
	lost error
	gone chan struct{} // closed when lost is set
}

// storeLimit is what the file store may take on a disk with free bytes
// available when it holds used: three quarters of what it could take, as
// nats-server sizes a store it was given no limit for. The quarter left is
// the machine's, and the stop reserve's (Broker.StopReserve).
func storeLimit(used, free int64) int64 { return (used + free) / 4 * 3 }

// freeSpace is the bytes available to this process on dir's filesystem.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// dirBytes is what the files under dir take (0 for a dir not there yet).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func inode(f *os.File) uint64 {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	return st.Ino
}

func (b *Broker) watchStore(opts *server.Options, dir string) {
	w := &storeWatch{b: b, srv: b.srv, opts: opts.Clone(), dir: dir, storeDir: opts.StoreDir, lockIno: inode(b.lock),
		stop: make(chan struct{}), done: make(chan struct{}), gone: make(chan struct{})}
	b.watch = w
	go w.run()
}

func (w *storeWatch) run() {
	defer close(w.done)
	t := time.NewTicker(StoreWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if w.check() {
			return
		}
	}
}

// check looks at the disk once; true: the store is lost, nothing more to do.
func (w *storeWatch) check() bool {
	if err := w.lockHeld(); err != nil {
		w.setLost(err)
		if w.srv.JetStreamEnabled() {
			// Not a write more into a dir that is gone, where nats-server
			// would make half a store of new empty directories.
			_ = w.srv.ShutdownJetStream()
		}
		return true
	}
	free, err := freeSpace(w.storeDir)
	if err != nil {
		return false
	}
	if !w.srv.JetStreamEnabled() {
		if !w.down {
			w.down = true
			w.b.Log.Error().Str("data_dir", w.dir).Int64("free_bytes", free).
				Msg("the embedded store shut itself down: its disk is full (no space left on device). Free space there: it starts again by itself, and the answers held are stored")
		}
		if free < storeRestartFree {
			return false
		}
		cfg := &server.JetStreamConfig{StoreDir: w.opts.StoreDir, SyncInterval: w.opts.SyncInterval, SyncAlways: w.opts.SyncAlways,
			Strict: !w.opts.NoJetStreamStrict, MaxStore: storeLimit(dirBytes(w.storeDir), free), CompressOK: true}
		if err := w.srv.EnableJetStream(cfg); err != nil {
			w.b.Log.Warn().Err(err).Str("data_dir", w.dir).Msg("the store was shut down by a full disk; starting it again failed (tried again)")
			return false
		}
		w.mu.Lock()
		w.opts.JetStreamMaxStore = cfg.MaxStore
		w.mu.Unlock()
		w.down = false
		w.b.Log.Warn().Str("data_dir", w.dir).Int64("free_bytes", free).
			Msg("the embedded store had been shut down by a full disk: space is back and it is started again; held writes go on")
		return false
	}
	if used, ok := w.used(); ok && w.raise(storeLimit(used, free), 8) {
		w.b.Log.Info().Str("data_dir", w.dir).Int64("max_store", w.opts.JetStreamMaxStore).Msg("the disk has more space: the embedded store may take it")
	}
	return false
}

// used is what the store holds now.
func (w *storeWatch) used() (int64, bool) {
	info, err := w.srv.Jsz(nil)
	if err != nil || !w.srv.JetStreamEnabled() {
		return 0, false
	}
	return int64(info.Store), true
}

// raise makes want the store's limit if that is more than a 1/margin above
// the limit now: by a margin, so that a reload is not made for every block
// the store writes; never lowered (nats-server refuses that).
func (w *storeWatch) raise(want int64, margin int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.opts.JetStreamMaxStore
	if want <= cur+cur/margin {
		return false
	}
	next := w.opts.Clone()
	next.JetStreamMaxStore = want
	if err := w.srv.ReloadOptions(next); err != nil {
		w.b.Log.Debug().Err(err).Msg("raise the embedded store's limit")
		return false
	}
	w.opts.JetStreamMaxStore = want
	return true
}

// StopReserve lets a stopping process's embedded store take half of the
// disk it keeps free (storeLimit), so that the answers its workers hold
// unstored because the store is at its limit can be parked for the next
// run instead of paid again. Called once the pool stops with answers held;
// a no-op without an embedded store, or where the disk itself is full.
// It reports whether the store may take more now (lent now or before).
func (b *Broker) StopReserve() bool {
	w := b.watch
	if w == nil {
		return false
	}
	w.lendOnce.Do(func() {
		free, err := freeSpace(w.storeDir)
		used, ok := w.used()
		if err == nil && ok && w.raise(used+free/2, 1<<20) {
			w.lent.Store(true)
			w.b.Log.Warn().Str("data_dir", w.dir).Int64("max_store", w.opts.JetStreamMaxStore).
				Msg("stopping with answers held unstored: the embedded store takes part of the disk it keeps free, to park them for the next run")
		}
	})
	return w.lent.Load()
}

// lockHeld reports the data dir gone: the lock file this process holds is
// no longer the one at its path (removed, or the dir removed and made again).
func (w *storeWatch) lockHeld() error {
	var st syscall.Stat_t
	err := syscall.Stat(filepath.Join(w.dir, "lock"), &st)
	if err == nil && st.Ino == w.lockIno {
		return nil
	}
	return fmt.Errorf("%w: %s (everything the store held there is gone: stop every process using it; the next run starts a new store there)", ErrStoreLost, w.dir)
}

func (w *storeWatch) setLost(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost == nil {
		w.lost = err
		close(w.gone)
		w.b.Log.Error().Err(err).Msg("embedded store lost")
	}
}

func (w *storeWatch) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// StoreLost is closed when the embedded server's data dir was removed under
// the process (StoreErr says so, wrapping ErrStoreLost); nil for a broker
// that runs no embedded server, where it never happens.
func (b *Broker) StoreLost() <-chan struct{} {
	if b.watch == nil {
		return nil
	}
	return b.watch.gone
}

// StoreErr is why StoreLost was closed, or nil.
func (b *Broker) StoreErr() error {
	if b.watch == nil {
		return nil
	}
	b.watch.mu.Lock()
	defer b.watch.mu.Unlock()
	return b.watch.lost
}
