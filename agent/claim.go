package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// claim is what an agent holds on the node for as long as it runs: its state folder, its API
// socket, its metrics port and its cgroup tree. New takes all of them before it reads or
// writes a cgroup, so a second agent that cannot have one of them stops without touching the
// first one's workloads.
type claim struct {
	stateLock, rootLock, reclaimedLock *os.File
	api, metrics                       net.Listener // metrics nil when disabled
}

// claimNode takes, in order: the state folder, the API socket, the metrics address and the
// cgroup root and the reclaimed tier beside it (created if missing, and locked).
func claimNode(cfg config.Config, layout *cgroupfs.Layout) (c claim, err error) {
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.stateLock, err = lockStateDir(cfg.StateDir); err != nil {
		return c, err
	}
	if c.api, err = listenUnix(cfg.SocketPath); err != nil {
		return c, err
	}
	if addr := cfg.MetricsAddress; addr != "" {
		if c.metrics, err = net.Listen("tcp", addr); err != nil {
			return c, fmt.Errorf("metrics address %s: %w", addr, err)
		}
	}
	if c.rootLock, err = lockCgroupRoot(layout.Dir("cpu", cfg.Cgroup.Root)); err != nil {
		return c, err
	}
	c.reclaimedLock, err = lockCgroupRoot(layout.Dir("cpu", plugins.TierPath(cfg.Cgroup.Root, qos.Reclaimed)))
	return c, err
}

// release gives back whatever was taken; the listeners remove their socket file.
func (c *claim) release() {
	for _, f := range []*os.File{c.reclaimedLock, c.rootLock, c.stateLock} {
		if f != nil {
			_ = f.Close()
		}
	}
	for _, ln := range []net.Listener{c.api, c.metrics} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	*c = claim{}
}

// lockStateDir takes an exclusive lock on the state folder.
func lockStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "agent.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another tidal agent is running with state folder %s (%v)", dir, err)
	}
	return f, nil
}

// lockCgroupRoot takes an exclusive lock on the root cgroup's own directory (in the cpu
// hierarchy on v1). The lock is on the cgroup file system itself, which every agent on the
// node sees, in a container or not, whatever its state folder and socket.
func lockCgroupRoot(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cgroup root %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another tidal agent manages the cgroup tree %s (cgroup.root)", dir)
		}
		return nil, fmt.Errorf("cgroup root %s: lock: %w", dir, err)
	}
	return f, nil
}

// listenUnix opens the API socket with root-only permissions: its folder 0700, the socket 0600.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another agent is already serving %s", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
