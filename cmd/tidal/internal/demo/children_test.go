package demo

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParentFromStat(t *testing.T) {
	ppid, ok := parentFromStat([]byte("1234 (tidal (x) y) S 42 1234 1234 0 -1"))
	if !ok || ppid != 42 {
		t.Errorf("got %d %v", ppid, ok)
	}
	if _, ok := parentFromStat([]byte("garbage")); ok {
		t.Error("garbage parsed")
	}
}

// A child that ignores SIGTERM, with a grandchild in a process group of its own (as `tidal run`
// puts its workload), is killed with both after the grace period.
func TestStopChildrenKillsWhatIgnoresSIGTERM(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	c := &child{name: "stubborn", stderr: &tailBuffer{}, exited: make(chan struct{}),
		cmd: exec.Command("sh", "-c", `trap "" TERM; setsid sleep 60 & wait`)}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { defer close(c.exited); c.err = c.cmd.Wait() }()
	var kids []int
	for deadline := time.Now().Add(5 * time.Second); len(kids) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		kids = childPIDs(c.cmd.Process.Pid)
	}
	if len(kids) != 1 {
		t.Fatalf("children of the shell: %v", kids)
	}
	start := time.Now()
	if err := stopChildren([]*child{c}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < stopGrace || el > stopGrace+2*time.Second {
		t.Errorf("stopped after %s, want about %s", el, stopGrace)
	}
	for deadline := time.Now().Add(2 * time.Second); alive(kids[0]) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(kids[0]) {
		t.Errorf("grandchild %d still alive", kids[0])
	}
	if err := stopChildren([]*child{c}); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || !strings.HasPrefix(string(data[i+1:]), " Z")
}
