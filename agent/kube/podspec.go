package kube

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/agent/source"
	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// MinMemoryLimit is the least memory limit written for a reclaimed pod's own request: 0
// would leave the limit as it is.
const MinMemoryLimit = 4 << 20

// PodInfo is what a source knows of a pod, whichever way it learned it (the pod watch, or a
// runtime hook's sandbox config).
type PodInfo struct {
	Meta    qos.Metadata // Name is "namespace/name"
	UID     string
	Created time.Time
	Cgroup  string
	// MilliCPU is the pod's CPU request: a dedicated pod gets it in whole cores.
	MilliCPU int64
	// ReclaimedMilliCPU and ReclaimedMemory are what a reclaimed pod asked of the lent
	// resources: they cap it under what the node lends.
	ReclaimedMilliCPU int64
	ReclaimedMemory   int64
	// Pinned are the cores the kubelet's CPU manager gave it exclusively (nil: none).
	Pinned *cpuset.CPUSet
	// Terminating: its owner is stopping it (deletion requested).
	Terminating bool
	// IPs are the pod's IPs once it has them (nil before, and for a runtime hook's sandbox),
	// loopback included for a pod on the host's network: an SLO probe must point at one of
	// them, or a pod could make the agent, root on the host's network, send requests anywhere.
	IPs []string
	// CPULimit and ContainerCPULimits are the CPU limits of the pod's spec, in millicores,
	// the pod's (0: none) and its containers' by container ID (see CPULimits): a CPU burst is
	// sized on them as well as on the quotas the kubelet set.
	CPULimit           int64
	ContainerCPULimits map[string]int64
}

// PutPod makes (or updates) the workload of a pod: classified by the same qos function as
// every source, dedicated cores allocated by the node state (a dedicated pod that cannot get
// them runs as shared). It returns the record and the problems with the pod's metadata, for
// the source to report.
func PutPod(node source.Node, sourceName string, p PodInfo, policy qos.Policy) (state.Record, []error) {
	d := qos.Classify(p.Meta, policy)
	problems := d.Problems
	spec := state.Spec{Source: sourceName, Origin: string(d.Source), Terminating: p.Terminating, Workload: plugins.Workload{
		Name: p.Meta.Name, UID: p.UID, Tier: d.Tier, Cgroup: p.Cgroup, Owner: plugins.OwnerKubelet,
		NUMABinding: d.NUMABinding, ReclaimPriority: d.ReclaimPriority, SLO: d.SLO, Started: p.Created,
		CPUBurstPercent: d.CPUBurstPercent, CPULimit: p.CPULimit, ContainerCPULimits: p.ContainerCPULimits,
	}}
	if spec.SLO.Probe != "" {
		key := qos.AnnotationSLOProbe
		if spec.SLO.Histogram != "" {
			key = qos.AnnotationSLOMetric
		}
		probe, err := ownProbe(key, spec.SLO.Probe, p.IPs)
		switch {
		case err == nil:
			spec.SLO.Probe = probe
		case p.IPs == nil: // before its IPs are known: the pod's next update says
			spec.SLO = qos.SLO{}
		default:
			spec.SLO = qos.SLO{}
			problems = append(problems, err)
		}
	}
	if p.Pinned != nil {
		// The kubelet's CPU manager pinned this pod: its cores are taken whatever its tier,
		// and its cpusets are the kubelet's.
		spec.DedicatedCPUs, spec.Owner = *p.Pinned, plugins.OwnerKubeletCPUManager
		if spec.NUMABinding {
			problems = append(problems, &qos.Problem{Key: qos.AnnotationNUMABinding, Value: p.Meta.Annotations[qos.AnnotationNUMABinding],
				Source: qos.SourceAnnotation, Kind: qos.ErrIgnored, Fallback: "ignored",
				Reason: "the kubelet's CPU manager pinned this pod, so its cpusets are the kubelet's (its topology manager's single-numa-node policy keeps a pod on one NUMA node)"})
			spec.NUMABinding = false
		}
	}
	switch d.Tier {
	case qos.Dedicated:
		if p.Pinned == nil {
			spec.WholeCores = int((p.MilliCPU + 999) / 1000)
			if spec.WholeCores == 0 {
				problems = append(problems, dedicatedProblem("the dedicated tier needs a CPU request (whole cores of its own); running as shared"))
				spec.Tier, spec.NUMABinding = qos.Shared, false
			}
		}
	case qos.Reclaimed:
		spec.MilliCPU = p.ReclaimedMilliCPU
		if p.ReclaimedMemory > 0 {
			spec.MemoryLimit = max(p.ReclaimedMemory, MinMemoryLimit)
		}
	}
	rec, err := node.Put(spec)
	var cannot *state.AllocationError
	if errors.As(err, &cannot) && spec.Tier == qos.Dedicated {
		problems = append(problems, dedicatedProblem(fmt.Sprintf("cannot give %d whole cores: %v; running as shared", spec.WholeCores, cannot.Err)))
		spec.Tier, spec.NUMABinding, spec.WholeCores = qos.Shared, false, 0
		rec, err = node.Put(spec)
	}
	if err != nil {
		problems = append(problems, err)
	}
	return rec, problems
}

// ownProbe is the URL to ask for a pod's SLO probe (or to read, for its SLO metric, whose
// annotation key is): one without a host ("http://:8080/healthz", since a pod's IP is not
// known when it is written) gets the pod's first IP; one with a host must name one of the
// pod's IPs.
func ownProbe(key, probe string, ips []string) (string, error) {
	u, err := url.Parse(probe)
	if err == nil && len(ips) > 0 {
		host := u.Hostname()
		if host == "" {
			u.Host = net.JoinHostPort(ips[0], u.Port()) // qos accepts no host without a port
			return u.String(), nil
		}
		if slices.ContainsFunc(ips, func(ip string) bool { return sameHost(ip, host) }) {
			return probe, nil
		}
	}
	return "", &qos.Problem{Key: key, Value: probe, Source: qos.SourceAnnotation, Kind: qos.ErrIgnored,
		Reason: fmt.Sprintf(`the agent asks only the pod itself: leave the host out ("http://:8080/healthz") or name one of its IPs %v; no SLO signal`, ips)}
}

// sameHost compares two hosts as addresses where both are (fd00::7 is fd00:0::7), else as text.
func sameHost(x, y string) bool {
	a, errA := netip.ParseAddr(x)
	b, errB := netip.ParseAddr(y)
	if errA == nil && errB == nil {
		return a.Unmap() == b.Unmap()
	}
	return strings.EqualFold(x, y)
}

func dedicatedProblem(reason string) error {
	return &qos.Problem{Key: qos.AnnotationQoSLevel, Value: string(qos.Dedicated), Source: qos.SourceAnnotation, Kind: qos.ErrIgnored, Reason: reason}
}
