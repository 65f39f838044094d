package main

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// onlineServer is an online service the benchmark drives: tidal's own Go server, or a real
// third-party one from Debian's packages, which tidal was not tuned for.
type onlineServer struct {
	Name  string
	About string
	// path is what the load generator GETs; gzip asks for compressed responses.
	path string
	gzip bool
	// command returns the server's command line listening on addr, with what it needs
	// written under dir.
	command func(b *bench, dir, addr string) ([]string, error)
}

var servers = []onlineServer{
	{Name: "go", About: "tidal's Go HTTP server, CPU work per request (-work)", path: "/work",
		command: func(b *bench, _, addr string) ([]string, error) {
			return []string{b.tidal, "workload", "server", "--addr", addr, "--work", b.opts.work.String()}, nil
		}},
	{Name: "nginx", About: "nginx from Debian's packages (4 workers) serving a 64 KiB text page, gzip-compressed (level 6) for every request",
		path: "/page.txt", gzip: true, command: nginxCommand},
}

func serverByName(name string) (onlineServer, bool) {
	for _, s := range servers {
		if s.Name == name {
			return s, true
		}
	}
	return onlineServer{}, false
}

func serverNames() []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Name)
	}
	return out
}

// nginxCommand writes an nginx config and the page it serves into dir: in the foreground, no
// access log, keep-alive for the load generator's persistent connections, /healthz answered.
func nginxCommand(_ *bench, dir, addr string) ([]string, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return nil, fmt.Errorf("the nginx server needs nginx (scripts/bench-tools.sh installs it): %w", err)
	}
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(www, "page.txt"), page(64<<10), 0o644); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "tmp")
	// Workers as root: the run's folder is the benchmark's own, private to root. reuseport:
	// each worker listens on its own socket and the kernel spreads connections over them.
	// Without it, which worker accepts the load generator's persistent connections was luck
	// (80/0, 79/1 and 39/41 of 2 workers in one round), and a worker holding them all capped
	// nginx at one CPU, so a scenario's p99 measured that draw, not its isolation. The kernel
	// spreads them by a hash, still unevenly (51/29 in one run), so 4 workers on the 2 CPUs:
	// the busiest then carries about a third of the spike, well under a CPU.
	conf := fmt.Sprintf(`user root;
worker_processes 4;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[2]s; proxy_temp_path %[2]s; fastcgi_temp_path %[2]s; uwsgi_temp_path %[2]s; scgi_temp_path %[2]s;
  gzip on; gzip_comp_level 6; gzip_types text/plain; gzip_min_length 0;
  keepalive_requests 10000000; keepalive_timeout 300s;
  server {
    listen %[3]s reuseport;
    root %[4]s;
    location = /healthz { return 200 "ok\n"; }
  }
}
`, dir, tmp, addr, www)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, "-p", dir, "-c", path}, nil
}

// page is n bytes of words, as compressible as ordinary text (about 2.4:1 with gzip -6), the
// same every run.
func page(n int) []byte {
	rng := rand.New(rand.NewSource(1))
	words := make([]string, 3000)
	for i := range words {
		w := make([]byte, 2+rng.Intn(8))
		for j := range w {
			w[j] = byte('a' + rng.Intn(26))
		}
		words[i] = string(w)
	}
	var sb strings.Builder
	for sb.Len() < n {
		sb.WriteString(words[rng.Intn(len(words))])
		sb.WriteByte(' ')
	}
	return []byte(sb.String()[:n])
}
