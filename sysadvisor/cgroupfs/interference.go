package cgroupfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Threads lists the threads (task IDs) in cgroup rel, and in its descendants when recursive
// (a pod's threads are in its containers' cgroups).
func (l *Layout) Threads(rel string, recursive bool) ([]int, error) {
	file := "tasks"
	if l.Version == V2 {
		file = "cgroup.threads"
	}
	return l.ids(rel, file, recursive)
}

// ids reads the IDs listed in file of cgroup rel (and of its descendants when recursive).
func (l *Layout) ids(rel, file string, recursive bool) ([]int, error) {
	var ids []int
	readOne := func(dir string) error {
		data, err := ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		for _, f := range bytes.Fields(data) {
			id, err := strconv.Atoi(string(f))
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
			}
			ids = append(ids, id)
		}
		return nil
	}
	root := l.Dir("cpu", rel)
	if !recursive {
		return ids, readOne(root)
	}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return readOne(p)
		}
		return nil
	})
	return ids, err
}

// Throttling is a cgroup's CFS bandwidth counters: periods in which it had runnable tasks
// and a quota, and those of them in which the quota ran out.
type Throttling struct {
	Periods, Throttled int64
}

// Throttling reads cpu.stat of cgroup rel (the same keys on v1 and v2).
func (l *Layout) Throttling(rel string) (Throttling, error) {
	path := filepath.Join(l.Dir("cpu", rel), "cpu.stat")
	periods, err := readKey(path, "nr_periods")
	if err != nil {
		return Throttling{}, err
	}
	throttled, err := readKey(path, "nr_throttled")
	return Throttling{Periods: periods, Throttled: throttled}, err
}
