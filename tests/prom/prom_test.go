// Package prom checks tidal's Prometheus side with a real Prometheus (Debian's package, put
// there by scripts/prom-tools.sh): it scrapes a live standalone agent and arbiter; every query
// of the Grafana dashboard evaluates and returns series; promtool check metrics passes on both
// /metrics outputs; the agent reads Prometheus's own latency histogram as an SLO metric. It
// skips without root or the tools, and fails instead when CI=true.
package prom

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/tests/testutil"
)

var tidalBin string

func TestMain(m *testing.M) { testutil.RunSuite(m, &tidalBin) }

// need skips (or under CI=true fails) when a precondition is missing.
func need(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: not skipping; run scripts/prom-tools.sh as root)", why)
	}
	t.Skip(why + ": run scripts/prom-tools.sh as root")
}

func tools(t *testing.T) (prometheus, promtool string) {
	t.Helper()
	need(t, os.Geteuid() == 0, "needs root")
	var err1, err2 error
	prometheus, err1 = exec.LookPath("prometheus")
	promtool, err2 = exec.LookPath("promtool")
	need(t, err1 == nil && err2 == nil, "prometheus or promtool not on PATH")
	return prometheus, promtool
}

// Exceptions: dashboard queries that honestly return nothing on this machine, and why. Every
// other query must return at least one series.
var mayBeEmpty = map[string]string{
	"tidal_gpu_lendable":     "no GPU on this machine: one series per GPU",
	"tidal_evictions_total":  "nothing is evicted in this test (counted per reason once one happens)",
	"tidal_hook_calls_total": "a standalone agent runs no runtime hook (CRI proxy, NRI)",
}

type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func queries(t *testing.T) map[string]string {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "grafana", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboard in deploy/grafana")
	}
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for i, tg := range p.Targets {
					if tg.Expr != "" {
						out[fmt.Sprintf("%s #%d (%s)", p.Title, i, filepath.Base(f))] = tg.Expr
					}
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
	}
	return out
}

// grafana expands the dashboard's variables the way Grafana would for "All" nodes.
func grafana(expr string) string {
	r := strings.NewReplacer("${node_label}", "instance", `"$node"`, `".*"`, "$__rate_interval", "30s", "${DS_PROMETHEUS}", "")
	return r.Replace(expr)
}

var metricName = regexp.MustCompile(`\btidal_[a-z_]+|\bprocess_[a-z_]+`)

func TestDashboardQueriesAgainstRealPrometheus(t *testing.T) {
	promBin, promtool := tools(t)

	arb := testutil.NewArbiter(t, tidalBin, "node-a")
	// The node's disks managed (off by default), so the Disk IO panels have series to show.
	ag := testutil.NewAgent(t, tidalBin, arb.AgentConfig("node-a")+"loops:\n  slowInterval: 1s\nio:\n  nodeDisks: true\n", "", true)
	ag.Start()
	ag.Run("--name", "batch", "--tier", "reclaimed", "--", "sh", "-c", "while :; do :; done")
	ag.Run("--name", "web", "--tier", "shared", "--", "sleep", "600")
	batch := ag.WaitWorkload("batch")
	ag.WaitWorkload("web")

	// Drift: change a value the agent wrote; a reconcile pass writes it back (a repair) when
	// the cgroup's turn to be re-read comes, within 30 passes of 1 s.
	testutil.Eventually(t, 45*time.Second, "a drift repair counted", func() error {
		_ = os.WriteFile(filepath.Join(ag.Layout.Dir("cpu", batch.Cgroup), "cpu.shares"), []byte("777"), 0o644)
		m, err := ag.Scrape()
		if err != nil {
			return err
		}
		if !strings.Contains(m, "tidal_cgroup_repairs_total{") {
			return fmt.Errorf("no repair yet")
		}
		return nil
	})

	// promtool check metrics on both outputs.
	arbMetrics, err := testutil.Get(arb.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	agMetrics, err := ag.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"agent": agMetrics, "arbiter": arbMetrics} {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", name, err, out)
		}
	}

	// A real Prometheus scraping both every second, on loopback, with its own storage.
	dir := t.TempDir()
	promAddr := testutil.FreeAddr(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tidal-agent
    static_configs: [{targets: [%q]}]
  - job_name: tidal-arbiter
    static_configs: [{targets: [%q]}]
`, ag.Metrics, arb.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "config", cfg)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	plog := &testutil.SyncBuffer{}
	testutil.StartDaemon(t, "prometheus", plog, 10*time.Second, promBin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	api := "http://" + promAddr + "/api/v1/"
	query := func(q string) (int, error) {
		body, err := testutil.Get(api + "query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, fmt.Errorf("%v: %s", err, body)
		}
		var r struct {
			Status, Error string
			Data          struct {
				Result []json.RawMessage
			}
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	testutil.Eventually(t, 30*time.Second, "both targets up", func() error {
		n, err := query(`up == 1`)
		if err == nil && n < 2 {
			err = fmt.Errorf("%d targets up", n)
		}
		return err
	})
	// Enough samples for rate() over the dashboard's window.
	time.Sleep(8 * time.Second)

	qs := queries(t)
	if len(qs) < 10 {
		t.Fatalf("only %d dashboard queries found", len(qs))
	}
	for title, expr := range qs {
		q := grafana(expr)
		n, err := query(q)
		if err != nil {
			t.Errorf("%s: %s: %v", title, q, err)
			continue
		}
		if n > 0 {
			t.Logf("%-50s %d series", title, n)
			continue
		}
		why := ""
		for _, m := range metricName.FindAllString(expr, -1) {
			m = strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count")
			if w, ok := mayBeEmpty[m]; ok {
				why = w
			}
		}
		if why == "" {
			t.Errorf("%s: %s returns no series", title, q)
		} else {
			t.Logf("%-50s empty, as expected: %s", title, why)
		}
	}
	if t.Failed() {
		t.Logf("prometheus log:\n%s", testutil.Tail(plog.String(), 30))
	}
}

// A real third-party exporter as an SLO metric: Prometheus's own HTTP latency histogram
// (prometheus_http_request_duration_seconds, one series per handler), read by the agent from
// a Prometheus run under `tidal run` with a label selector. The agent finds the query
// handler's buckets among the page's other series and shows their p99 as the workload's
// metric latency. Until Prometheus listens and has served a query (it makes a handler's series
// at its first request) the reads fail, which the log says once, and says again when they answer.
func TestPrometheusLatencyHistogramAsSLOMetric(t *testing.T) {
	promBin, _ := tools(t)
	ag := testutil.NewAgent(t, tidalBin, "interference:\n  interval: 200ms\n", "", false)
	ag.Start()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	ag.Run("--name", "prom", "--tier", "shared",
		"--slo-metric", "http://"+addr+`/metrics#prometheus_http_request_duration_seconds{handler="/api/v1/query"}`, "--slo-latency", "5s",
		"--", promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	ag.WaitWorkload("prom")

	// Its users: an instant query every 50 ms, until the test ends.
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = testutil.Get("http://" + addr + "/api/v1/query?query=up")
			}
		}
	}()

	var got string
	testutil.Eventually(t, 30*time.Second, "prom's metric latency in status", func() error {
		for _, p := range ag.Status().Pools {
			for _, i := range p.Control.Indicators {
				if i.Workload == "prom" && i.Name == "metric latency" {
					got = fmt.Sprintf("%+v", i)
					// Its queries take well under the first bucket's 100 ms bound, and a p99
					// interpolated within that bucket lies inside it.
					if i.Value > 0 && i.Value <= 0.1 && i.Target == 5 {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("none yet (last seen: %s)", got)
	})
	log := ag.Log.String()
	failing, again := strings.LastIndex(log, "SLO signal failing"), strings.LastIndex(log, "SLO signal answering again")
	if failing >= 0 && again < failing {
		t.Errorf("the agent's last word on the signal is a failure:\n%s", testutil.Tail(log, 20))
	}
	// Prometheus makes a handler's series at its first request: until then "no ... series"
	// is a failure, and the last word above says the signal answers since.
	if strings.Contains(log, "not a histogram") {
		t.Errorf("the agent took the histogram for something else:\n%s", testutil.Tail(log, 20))
	}
}
