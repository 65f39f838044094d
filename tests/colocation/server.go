package main

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/resp"
	"github.com/tidalqos/tidal/internal/workload"
)

// onlineServer is an online service the benchmark drives: tidal's own Go server, or a real
// third-party one from Debian's packages, which tidal was not tuned for.
type onlineServer struct {
	Name  string
	About string
	// proto is how the load generator speaks to it: "http" (it GETs path; gzip asks for
	// compressed responses) or "redis" (it sends the command path names, as
	// redis://HOST:PORT/COMMAND/ARG/...).
	proto string
	path  string
	gzip  bool
	// seed, where set, gives the server the data its requests read, once it answers.
	seed func(ctx context.Context, addr string) error
	// loadScale scales the day's request rates for this server (0: 1), so that each server
	// alone keeps up with the spike, near the same share of the node.
	loadScale float64
	// metric, where set, is the latency histogram the server exports at /metrics, for the
	// SLO metric scenarios.
	metric string
	// command returns the server's command line listening on addr, with what it needs
	// written under dir.
	command func(b *bench, dir, addr string) ([]string, error)
}

var servers = []onlineServer{
	{Name: "go", About: "tidal's Go HTTP server, CPU work per request (-work)", proto: "http", path: "/work",
		metric: workload.MetricRequestDuration, command: func(b *bench, _, addr string) ([]string, error) {
			return []string{b.tidal, "workload", "server", "--addr", addr, "--work", b.opts.work.String()}, nil
		}},
	{Name: "nginx", About: "nginx from Debian's packages (4 workers) serving a 64 KiB text page, gzip-compressed (level 6) for every request",
		proto: "http", path: "/page.txt", gzip: true, command: nginxCommand},
	// At the full day's rates Apache alone used about 30% more CPU than nginx and saturated
	// the node at the spike (its p99 there 16-75 ms against nginx's 6-8; 2026-12-04).
	{Name: "apache", About: "Apache httpd from Debian's packages (mpm_event with Debian's thread pool: 25 threads a process) serving the same page, gzip-compressed (mod_deflate, level 6), at 3/4 of the day's request rates (it needs about 30% more CPU a request than nginx)",
		proto: "http", path: "/page.txt", gzip: true, loadScale: 0.75, command: apacheCommand},
	// A database, single-threaded where the web servers run several workers. SINTER of two
	// sets of 4000 members sharing 2000 ("the followers two users have in common") takes about
	// 0.55 ms of the server's thread on an Intel Xeon of this kind, so the day's rates keep
	// it well under one CPU.
	{Name: "redis", About: "Redis from Debian's packages (one thread, no persistence) answering SINTER of two sets of 4000 members with 2000 in common (about 0.55 ms of server CPU each)",
		proto: "redis", path: "/SINTER/followers:a/followers:b", command: redisCommand, seed: seedRedis},
}

// loadURL is what the load generator asks the server at addr for.
func (s onlineServer) loadURL(addr string) string { return s.proto + "://" + addr + s.path }

// metricURL is the SLO metric the agent reads of the server at addr: its histogram on its
// Prometheus page.
func (s onlineServer) metricURL(addr string) string { return "http://" + addr + "/metrics#" + s.metric }

// answers checks once that the server at addr answers: /healthz over HTTP, PING over Redis.
func (s onlineServer) answers(ctx context.Context, addr string) error {
	if s.proto == "redis" {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return resp.Do(ctx, addr, []string{"PING"})
	}
	client := &http.Client{Timeout: time.Second}
	res, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// phases are the day's phases at this server's request rates.
func (s onlineServer) phases(o options) []workload.Phase {
	ps := dayPhases(o)
	if s.loadScale > 0 {
		for i := range ps {
			ps[i].RPS *= s.loadScale
			ps[i].EndRPS *= s.loadScale
		}
	}
	return ps
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
	bin, www, err := prepareServer("nginx", dir)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
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

// apacheCommand writes an Apache httpd config into dir: in the foreground, Debian's mpm_event
// sizing (its mods-available/mpm_event.conf), mod_deflate at level 6 on the page, keep-alive
// for the load generator's persistent connections, /healthz a file.
func apacheCommand(b *bench, dir, addr string) ([]string, error) {
	bin, www, err := prepareServer("apache2", dir)
	if err != nil {
		return nil, err
	}
	// httpd refuses to serve as root: its threads run as www-data, which must reach the page
	// through the benchmark's folder and the server's own (search only; neither is listable).
	// Only those two: dir is a child of b.tmp, and nothing above b.tmp is the benchmark's.
	for _, d := range []string{b.tmp, dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`ServerRoot %[1]s
PidFile %[1]s/httpd.pid
ErrorLog %[1]s/error.log
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so
LoadModule filter_module /usr/lib/apache2/modules/mod_filter.so
LoadModule deflate_module /usr/lib/apache2/modules/mod_deflate.so
User www-data
Group www-data
ServerName localhost
Listen %[2]s
DocumentRoot %[3]s
<Directory %[3]s>
  Require all granted
</Directory>
TypesConfig /etc/mime.types
AddOutputFilterByType DEFLATE text/plain
DeflateCompressionLevel 6
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 300
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadLimit 64
ThreadsPerChild 25
MaxRequestWorkers 150
MaxConnectionsPerChild 0
`, dir, addr, www)
	path := filepath.Join(dir, "httpd.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, "-f", path, "-DFOREGROUND"}, nil
}

// redisCommand writes a Redis config into dir: in the foreground, on loopback, no snapshots and
// no append-only file (a cache-like database: nothing on disk during the day).
func redisCommand(_ *bench, dir, addr string) ([]string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is missing (scripts/bench-tools.sh installs it): %w", err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`bind %s
port %s
daemonize no
save ""
appendonly no
dir %s
logfile %s/redis.log
`, host, port, dir, dir)
	path := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return []string{bin, path}, nil
}

// seedRedis fills the two follower sets the load intersects.
func seedRedis(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	members := func(key string, from, to int) []string {
		cmd := []string{"SADD", key}
		for i := from; i < to; i++ {
			cmd = append(cmd, "user:"+strconv.Itoa(i))
		}
		return cmd
	}
	return resp.Do(ctx, addr, []string{"FLUSHALL"},
		members("followers:a", 0, 4000), members("followers:b", 2000, 6000))
}

// prepareServer finds a third-party server's binary and writes what it serves into dir/www:
// the 64 KiB page and /healthz.
func prepareServer(binary, dir string) (bin, www string, err error) {
	if bin, err = exec.LookPath(binary); err != nil {
		return "", "", fmt.Errorf("%s is missing (scripts/bench-tools.sh installs it): %w", binary, err)
	}
	www = filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(www, "page.txt"), page(64<<10), 0o644); err != nil {
		return "", "", err
	}
	return bin, www, os.WriteFile(filepath.Join(www, "healthz"), []byte("ok\n"), 0o644)
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
