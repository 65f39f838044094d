package arbiter

import (
	"os"
	"sync"
	"syscall"
)

// PolicySource is where the arbiter gets its policy. Standalone it is a file (FilePolicy); in
// Kubernetes a ConfigMap watched through an informer (ConfigMapPolicy).
type PolicySource interface {
	// Load returns the current policy. An error leaves the arbiter on the policy it has.
	Load() (*Policy, error)
	// Changed reports, cheaply, whether Load may return something new; the arbiter polls it.
	Changed() bool
}

// FilePolicy reads the policy from a YAML file. It is polled: a change of the file's
// modification time, size or inode makes the arbiter load it again.
type FilePolicy struct {
	file watchedFile
}

// NewFilePolicy returns a source reading the policy file at path.
func NewFilePolicy(path string) *FilePolicy { return &FilePolicy{file: watchedFile{path: path}} }

// Load implements PolicySource.
func (f *FilePolicy) Load() (*Policy, error) {
	data, err := f.file.read()
	if err != nil {
		return nil, err
	}
	return ParsePolicy(f.file.path, data)
}

// Changed implements PolicySource.
func (f *FilePolicy) Changed() bool { return f.file.changed() }

// watchedFile reads a file and remembers which version it read (modification time, size,
// inode), so that a poller can tell cheaply when to read it again. A Kubernetes ConfigMap or
// Secret volume replaces its files through a symlink; os.Stat follows it, so such updates are
// seen too.
type watchedFile struct {
	path string

	mu    sync.Mutex
	stamp fileStamp // of the version last read
}

type fileStamp struct {
	ok      bool // the file could be stat'ed
	modNano int64
	size    int64
	ino     uint64
}

func statFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{ok: true, modNano: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// read reads the file and records its version. The version is taken before reading, so a
// change during the read is seen by the next poll.
func (w *watchedFile) read() ([]byte, error) {
	stamp := statFile(w.path)
	w.mu.Lock()
	w.stamp = stamp
	w.mu.Unlock()
	return os.ReadFile(w.path)
}

// changed reports whether the file differs from the version last read.
func (w *watchedFile) changed() bool {
	now := statFile(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	return now != w.stamp
}
