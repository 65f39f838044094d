package cgroupfs

import (
	"os"
	"syscall"
)

// ReadFile reads a small kernel file (a cgroup's or one under /proc) with plain open, read
// and close calls. os.ReadFile also stats the file and registers it with Go's poller (cgroup
// files can be polled, so that is an epoll_ctl to add and one to remove): four more system
// calls than the read itself needs, on the agent's hottest paths. Errors are *os.PathError,
// as os.ReadFile's (errors.Is(err, os.ErrNotExist) holds for a missing file).
func ReadFile(path string) ([]byte, error) {
	return ReadFileInto(path, make([]byte, 0, 512))
}

// ReadFileInto is ReadFile reading into buf[:0], grown as needed: a caller that reads the
// same kind of file again and again can keep its buffer.
func ReadFileInto(path string, buf []byte) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
