package critest

// disabledPlugins are snapshotters that only log errors here (no btrfs, zfs or devmapper
// volumes) or, for containerd v2's blockfile and erofs, need setup the tests do not use.
const disabledPlugins = `["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]`

// config16 is containerd 1.6's config (version 2). Every path is under the runtime's folder
// (%[1]q) so that it shares nothing with a containerd the machine may run: the opt plugin
// would create /opt/containerd and runc's state would go to /run/containerd/runc. The shim
// sockets still go to /run/containerd/s (not configurable in 1.6). restrict_oom_score_adj:
// without CAP_SYS_RESOURCE every sandbox fails with runc's "can't get final child's PID from
// pipe" otherwise. No CNI: the tests' pods use the host network.
const config16 = `version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = %[5]s

[grpc]
  address = %[2]q

[ttrpc]
  address = "%[2]s.ttrpc"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "%[1]s/opt"
  [plugins."io.containerd.runtime.v1.linux"]
    runtime_root = "%[1]s/runc-v1"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[3]q
    restrict_oom_score_adj = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = %[4]q
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "%[1]s/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "%[1]s/cni/bin"
      conf_dir = "%[1]s/cni/conf"
`

// config3 is containerd v2's config (version 3), everything under the runtime's folder
// (%[1]q) as for config16, plus: the shim socket folder (%[3]q, at most 38 characters), NRI
// v2 on %[4]q with plugin folders of its own, runtime_path pinning the shim built with this
// containerd (Debian's older shim on PATH breaks sandbox start: "type with url ...: not
// found"), and the transfer service's unpack config for the snapshotter in use (%[9]q is
// linux/<arch>): its default names only overlayfs, so a native import fails with "no unpack
// platforms defined".
const config3 = `version = 3
root = "%[1]s/root"
state = "%[1]s/state"
temp = "%[1]s/tmp"
disabled_plugins = %[8]s

[grpc]
  address = %[2]q

[ttrpc]
  address = "%[2]s.ttrpc"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "%[1]s/opt"
  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = %[3]q
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = %[4]q
    plugin_path = "%[1]s/nri/plugins"
    plugin_config_path = "%[1]s/nri/conf.d"
  [plugins."io.containerd.transfer.v1.local"]
    [[plugins."io.containerd.transfer.v1.local".unpack_config]]
      platform = %[9]q
      snapshotter = %[5]q
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = %[5]q
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %[6]q
  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    disable_apparmor = true
    cdi_spec_dirs = ["%[1]s/cdi"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = %[7]q
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "%[1]s/runc"
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["%[1]s/cni/bin"]
      conf_dir = "%[1]s/cni/conf"
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`
