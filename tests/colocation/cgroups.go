package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
)

// removeTree kills every process left in cgroup rel or below it and removes those cgroups,
// deepest first, in every hierarchy tidal uses. The benchmark creates its cgroups through
// isolation.Writer (the project's one write path); removing a whole tree, including the one a
// tidal agent built under it, is done here.
func removeTree(layout *cgroupfs.Layout, rel string) error {
	var dirs []string
	for _, mount := range layout.Mounts() {
		_ = filepath.WalkDir(filepath.Join(mount, rel), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	var left []string
	for _, d := range dirs {
		if err := removeCgroup(d); err != nil {
			left = append(left, fmt.Sprintf("%s (%v)", d, err))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("cgroups left behind: %s", strings.Join(left, ", "))
	}
	return nil
}

// removeCgroup removes one cgroup folder, killing its processes until it can (a killed
// process leaves its cgroup only once it has exited).
func removeCgroup(dir string) error {
	var err error
	for try := 0; try < 100; try++ {
		killProcs(dir)
		if err = os.Remove(dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// killProcs sends SIGKILL to every process listed in the cgroup folder dir.
func killProcs(dir string) {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range bytes.Fields(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
