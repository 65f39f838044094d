// Command gpucheck prints what tidal sees of this machine's NVIDIA GPUs through NVML
// (devices, NUMA node, utilization, memory, processes) and what the GPU plugin would
// lend after a few samples. scripts/gpu-check.sh builds and runs it. Without NVML it
// says so and exits 0.
//
// Every GPU process counts as "of no known workload" here (no agent, no workloads), so
// a GPU with any process on it is never lendable in this check.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	plugingpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/sysadvisor/gpu"
)

func main() {
	samples := flag.Int("samples", 4, "NVML reads to take")
	interval := flag.Duration("interval", time.Second, "time between reads")
	window := flag.Duration("idle-window", 2*time.Second, "idle window for this check (the agent's default is 5m)")
	below := flag.Int("idle-below", plugingpu.DefaultIdleUtilizationBelow, "idle utilization threshold, percent")
	flag.Parse()
	if err := run(*samples, *interval, *window, *below); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}

func run(samples int, interval, window time.Duration, below int) error {
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	src := gpu.Open(log)
	defer src.Close()
	if _, none := src.(gpu.NoGPUs); none {
		fmt.Println("no GPU / no NVML: GPU support reports zero GPUs (see the line above)")
		return nil
	}
	tr, err := plugingpu.NewTracker(plugingpu.Config{IdleUtilizationBelow: below, IdleWindow: window})
	if err != nil {
		return err
	}
	owner := plugingpu.OwnerByCgroup(nil, func(pid int) (string, error) { return gpu.ProcessCgroup("/proc", pid) })

	var devs []gpu.Device
	for i := 0; i < samples; i++ {
		if i > 0 {
			time.Sleep(interval)
		}
		var err error
		devs, err = src.Devices()
		if err != nil {
			fmt.Printf("read %d: %v\n", i, err)
		}
		tr.Observe(time.Now(), devs, owner)
	}
	if len(devs) == 0 {
		fmt.Println("NVML loaded but reports no GPU")
		return nil
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INDEX\tUUID\tMODEL\tMINOR\tPCI\tNUMA\tUTIL%\tMEMORY USED/TOTAL MiB\tPROCESSES")
	for _, d := range devs {
		procs := ""
		for _, p := range d.Processes {
			cg, err := gpu.ProcessCgroup("/proc", p.PID)
			if err != nil {
				cg = err.Error()
			}
			procs += fmt.Sprintf("pid %d (%d MiB, cgroup %s) ", p.PID, p.UsedMemory>>20, cg)
		}
		if procs == "" {
			procs = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%d\t%d\t%d/%d\t%s\n", d.Index, d.UUID, d.Model, d.Minor,
			d.PCIBusID, d.NUMANode, d.UtilizationGPU, d.MemoryUsed>>20, d.MemoryTotal>>20, procs)
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Printf("\nlending after %d reads %s apart (idle window %s, under %d%%): %d lendable\n",
		samples, interval, window, below, tr.Lendable())
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INDEX\tUUID\tNUMA\tLENDABLE\tREASON")
	for _, s := range tr.States() {
		fmt.Fprintf(w, "%d\t%s\t%d\t%v\t%s\n", s.Index, s.UUID, s.NUMANode, s.Lendable, s.Reason)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if node, uuids, ok := tr.ForNUMA(1); ok {
		fmt.Printf("a dedicated workload asking for 1 GPU would get NUMA node %d with %v\n", node, uuids)
	}
	if tr.Lendable() > 0 {
		if uuids, err := tr.Assign(plugingpu.Request{Workload: "gpucheck", GPUs: 1}); err == nil {
			env, minors := tr.Visibility("gpucheck")
			fmt.Printf("a reclaimed workload asking for 1 GPU would get %v: env %v, /dev/nvidia minors %v\n", uuids, env, minors)
		}
	}
	return nil
}
