package arbiter

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// Store persists the arbiter's state between restarts. Standalone it is a file (FileStore).
// In Kubernetes the arbiter keeps no state of its own: NodeStore keeps each lease on its Node
// object, and the policy ConfigMap is the policy's record.
type Store interface {
	// Load returns the saved state, or nil and no error when nothing was saved yet.
	Load() (*State, error)
	// Save replaces the saved state, atomically: after a crash Load returns either the old
	// state or the new one.
	Save(*State) error
}

// StateVersion is the version of the State format.
const StateVersion = 1

// State is what the arbiter persists: the last accepted policy and every node's lease. Reports
// are not kept: agents send a fresh one every interval.
type State struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"savedAt"`
	// Policy is the last accepted policy, as its YAML text; nil when there was none.
	Policy *SavedPolicy `json:"policy,omitempty"`
	Leases []SavedLease `json:"leases"`
}

// SavedLease is a node's lease and when the report it answered arrived.
type SavedLease struct {
	Received time.Time        `json:"received"`
	Lease    arbiterapi.Lease `json:"lease"`

	encoded []byte // Lease's JSON encoding when the view has it (saves encoding it again)
}

// SavedPolicy is a policy as persisted.
type SavedPolicy struct {
	Source   string    `json:"source"`
	YAML     string    `json:"yaml"`
	Accepted time.Time `json:"accepted"`
}

// FileStore keeps the state in one JSON file, replaced atomically on every save: written to a
// temporary file in the same directory, flushed to disk (fsync), renamed over the old one,
// and the directory flushed so the rename itself survives a crash. Leases are encoded one at a
// time, so a save never holds the whole file in memory (10,000 leases are about 5 MB).
type FileStore struct {
	Path string
}

// StateFileName is the name of the state file in the arbiter's state directory.
const StateFileName = "arbiter-state.json"

// NewFileStore returns a store at dir/arbiter-state.json, creating dir (mode 0700) if needed.
func NewFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &FileStore{Path: filepath.Join(dir, StateFileName)}, nil
}

// Load implements Store. A file that cannot be read or decoded is an error: the arbiter does
// not silently start over on a damaged state (move the file away to do that).
func (s *FileStore) Load() (*State, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("state file %s is damaged (%v): move it away to start without saved leases", s.Path, err)
	}
	if st.Version != StateVersion {
		return nil, fmt.Errorf("state file %s has version %d: this arbiter reads version %d", s.Path, st.Version, StateVersion)
	}
	return &st, nil
}

// Save implements Store.
func (s *FileStore) Save(st *State) error {
	dir := filepath.Dir(s.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.Path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if err := writeState(tmp, st); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.Path); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("state: flushing %s: %w", dir, err)
		}
	}
	return nil
}

// writeState writes st as the JSON object json.Marshal would, one lease at a time.
func writeState(w io.Writer, st *State) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	head, err := json.Marshal(struct {
		Version int          `json:"version"`
		SavedAt time.Time    `json:"savedAt"`
		Policy  *SavedPolicy `json:"policy,omitempty"`
	}{st.Version, st.SavedAt, st.Policy})
	if err != nil {
		return err
	}
	bw.Write(head[:len(head)-1]) // without its closing brace
	bw.WriteString(`,"leases":[`)
	for i, l := range st.Leases {
		if i > 0 {
			bw.WriteByte(',')
		}
		if l.encoded == nil {
			data, err := json.Marshal(l)
			if err != nil {
				return err
			}
			bw.Write(data)
			continue
		}
		received, _ := l.Received.MarshalJSON()
		bw.WriteString(`{"received":`)
		bw.Write(received)
		bw.WriteString(`,"lease":`)
		bw.Write(l.encoded)
		bw.WriteByte('}')
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}
