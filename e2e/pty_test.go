package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// natsCLIOnTerminal runs the `nats` CLI on a pseudo-terminal: `nats stream
// view` refuses to run without one ("interactive stream paging requires a
// valid terminal"), exactly as an operator types it. It pages only when there
// is more than a page to show, so the test keeps the stream shorter than that.
func natsCLIOnTerminal(t testing.TB, url string, args ...string) string {
	t.Helper()
	bin := tool(t, "nats")
	master, slave := openPTY(t)
	defer master.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", url}, args...)...)
	home := t.TempDir()
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH"),
		"TERM=dumb", "TZ=UTC"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	slave.Close() // the child holds it; EOF (EIO) on master once the child exits

	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, master)
		copied <- err
	}()
	err := cmd.Wait()
	// Drain what the child wrote before closing the master: closing it at
	// once threw away output still in the terminal's buffer (a flaky test
	// that saw one dead letter of five). The copy ends with EIO once the
	// buffer is empty and the slave side is closed.
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		master.Close()
		<-copied
	}
	require.NoError(t, err, "nats %v on a terminal:\n%s", args, out.String())
	return out.String()
}

// openPTY opens a pseudo-terminal pair (Linux /dev/ptmx).
func openPTY(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no pseudo-terminal: %v", err)
		}
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pts: %v", err)
	}
	// A wide terminal, so the CLI's tables do not wrap.
	_ = unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 200})
	return m, s
}
