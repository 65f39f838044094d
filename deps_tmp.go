package main
import (
 _ "github.com/containerd/cgroups/v3"
 _ "github.com/containerd/cgroups/v3/cgroup1"
 _ "github.com/containerd/cgroups/v3/cgroup2"
 _ "github.com/opencontainers/runtime-spec/specs-go"
 _ "github.com/prometheus/procfs"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "go.yaml.in/yaml/v3"
 _ "golang.org/x/sys/unix"
 _ "k8s.io/utils/cpuset"
 _ "github.com/NVIDIA/go-nvml/pkg/nvml"
)
func main(){}
