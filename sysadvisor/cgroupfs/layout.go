// Package cgroupfs finds the cgroup hierarchies of a node (v1, v2 or the hybrid of both) and
// reads cgroup accounting files. It never writes: writes belong to the isolation package.
package cgroupfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Version is the cgroup version tidal manages.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string { return fmt.Sprintf("v%d", int(v)) }

// Controllers tidal uses. On v1 each may be mounted alone or co-mounted (cpu,cpuacct).
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory"}

// v1Optional controllers are used when mounted: devices (GPU access of reclaimed work) and
// blkio (disk IO throttles of reclaimed work).
var v1Optional = []string{"devices", "blkio"}

// Layout says where the controllers tidal uses are mounted.
type Layout struct {
	Version Version
	// Unified is the cgroup2 mount (v2 only).
	Unified string
	// v1 maps a controller name to its hierarchy's mount point (v1 only).
	v1 map[string]string
}

// NewV1 builds a v1 layout from controller mount points (tests and callers that know them).
func NewV1(mounts map[string]string) (*Layout, error) {
	for _, c := range v1Controllers {
		if mounts[c] == "" {
			return nil, fmt.Errorf("cgroup v1: controller %q is not mounted", c)
		}
	}
	m := make(map[string]string, len(mounts))
	for k, v := range mounts {
		m[k] = v
	}
	return &Layout{Version: V1, v1: m}, nil
}

// NewV2 builds a v2 layout rooted at a cgroup2 mount point.
func NewV2(unified string) *Layout { return &Layout{Version: V2, Unified: unified} }

// Detect finds the layout under mountPoint. want is "auto", "v1" or "v2". auto picks v2 when
// mountPoint itself is a cgroup2 file system (a unified host), else v1 (including the hybrid
// layout, whose cgroup2 mount carries no cpu or memory controller).
func Detect(mountPoint, want string) (*Layout, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mountPoint, &st); err != nil {
		return nil, fmt.Errorf("cgroup mount point %s: %w", mountPoint, err)
	}
	isUnified := st.Type == unix.CGROUP2_SUPER_MAGIC
	switch want {
	case "v2":
		if !isUnified {
			return nil, fmt.Errorf("cgroup version v2 requested but %s is not a cgroup2 mount", mountPoint)
		}
		return NewV2(mountPoint), nil
	case "auto", "":
		if isUnified {
			return NewV2(mountPoint), nil
		}
	case "v1":
	default:
		return nil, fmt.Errorf("cgroup version %q: want auto, v1 or v2", want)
	}
	mounts, err := v1Mounts("/proc/self/mountinfo", mountPoint)
	if err != nil {
		return nil, err
	}
	return NewV1(mounts)
}

// v1Mounts reads mountinfo for cgroup (v1) mounts under mountPoint and maps each controller to
// the mount that carries it.
func v1Mounts(mountinfo, mountPoint string) (map[string]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		left, right, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || rf[0] != "cgroup" {
			continue
		}
		dir := lf[4]
		if !strings.HasPrefix(dir, strings.TrimSuffix(mountPoint, "/")+"/") {
			continue
		}
		for _, opt := range strings.Split(rf[2], ",") {
			if slices.Contains(v1Controllers, opt) || slices.Contains(v1Optional, opt) {
				mounts[opt] = dir
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", mountinfo, err)
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("no cgroup v1 controller is mounted under %s", mountPoint)
	}
	return mounts, nil
}

// Controllers returns the v1 controllers tidal uses with their mount points, deduplicated by
// mount (cpu and cpuacct are often one hierarchy). Nil on v2.
func (l *Layout) Controllers() map[string]string {
	if l.Version != V1 {
		return nil
	}
	out := map[string]string{}
	seen := map[string]bool{}
	for _, c := range append(append([]string(nil), v1Controllers...), v1Optional...) {
		if l.v1[c] == "" || seen[l.v1[c]] {
			continue
		}
		seen[l.v1[c]] = true
		out[c] = l.v1[c]
	}
	return out
}

// Has says whether a v1 controller is mounted (every controller is, on v2).
func (l *Layout) Has(controller string) bool { return l.Version == V2 || l.v1[controller] != "" }

// Dir is the absolute directory of the cgroup rel (a path relative to the hierarchy root) for a
// controller. On v2 the controller is ignored.
func (l *Layout) Dir(controller, rel string) string {
	if l.Version == V2 {
		return filepath.Join(l.Unified, rel)
	}
	return filepath.Join(l.v1[controller], rel)
}

// Exists says whether cgroup rel exists (in the cpu hierarchy on v1).
func (l *Layout) Exists(rel string) bool {
	_, err := os.Stat(l.Dir("cpu", rel))
	return err == nil
}

// Mounts lists the hierarchies tidal uses, sorted: the unified mount, or one per v1
// controller mount.
func (l *Layout) Mounts() []string {
	if l.Version == V2 {
		return []string{l.Unified}
	}
	var out []string
	for _, m := range l.Controllers() {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
