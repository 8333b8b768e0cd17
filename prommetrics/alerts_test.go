package prommetrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/prommetrics"
)

// rulesFile is the alerting rules users load, and rulesTests their promtool unit tests.
const (
	rulesFile  = "rules/alerts.yml"
	rulesTests = "rules/alerts_test.yml"
)

// lookPrometheus returns the path of one of Prometheus's binaries, failing the test with how to install it when it
// is missing: the rules mean nothing unchecked.
func lookPrometheus(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs Prometheus's %s; run without -short", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; these tests check the alerting rules with Prometheus's own tools "+
			"(Debian: apt-get install -y prometheus): %v", name, err)
	}
	return path
}

// The rules parse, and each alert fires, and stays quiet, where its promtool unit tests say.
func TestAlertRules_PassPromtoolsChecksAndUnitTests(t *testing.T) {
	t.Parallel()
	promtool := lookPrometheus(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTests}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// A real Prometheus server, scraping a process that exports prommetrics and loading rules/alerts.yml, fires the
// retention alert once a consumer that remembered the whole redelivery window is cleaned up with a shorter
// retention.
func TestAlertRules_ARealPrometheusFiresTheRetentionAlert(t *testing.T) {
	t.Parallel()
	binary := lookPrometheus(t, "prometheus")
	db, table := openTable(t)
	ctx := context.Background()
	database := inbox.OnSQL(db)

	// The consumer claims its first message now: from here on it remembers further back each second.
	ib, err := database.New(inbox.WithTable(table), inbox.WithConsumer("wallet"))
	require.NoError(t, err)
	msg := message.NewMessage("m-1", nil)
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, "evt-1")
	msg.SetContext(ctx)
	_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(msg)
	require.NoError(t, err)

	const window = 3 * time.Second
	reg := prometheus.NewRegistry()
	require.NoError(t, prommetrics.RegisterOldestRowAge(reg, database, 0, inbox.WithTable(table)))
	require.NoError(t, prommetrics.RegisterRedeliveryWindow(reg, window))
	app := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(app.Close)

	prom := startPrometheus(t, binary, strings.TrimPrefix(app.URL, "http://"))

	// Prometheus has seen the consumer remember the whole window before any cleanup.
	waitForQuery(t, prom, fmt.Sprintf("max_over_time(watermill_inbox_oldest_row_age_seconds[30d]) >= %g", window.Seconds()))

	// A cleanup with a retention shorter than the window, again and again as a Cleaner would, keeps the consumer
	// remembering about a second.
	cleanCtx, stopCleaning := context.WithCancel(ctx)
	var cleaning sync.WaitGroup
	cleaning.Add(1)
	go func() {
		defer cleaning.Done()
		for cleanCtx.Err() == nil {
			_, err := database.Cleanup(cleanCtx, inbox.CleanupParams{Retention: time.Second, Pause: time.Nanosecond}, inbox.WithTable(table))
			if err != nil && cleanCtx.Err() == nil {
				t.Errorf("cleanup: %v", err)
				return
			}
			select {
			case <-cleanCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopCleaning(); cleaning.Wait() })

	alert := waitForFiringAlert(t, prom, "WatermillInboxRetentionShorterThanRedeliveryWindow")
	require.Equal(t, "wallet", alert.Labels["consumer"])
	require.Equal(t, "critical", alert.Labels["severity"])
	require.Contains(t, alert.Annotations["summary"], "Inbox consumer wallet remembers only")
}

// startPrometheus starts a Prometheus server on a free loopback port, scraping target every second and evaluating
// rulesFile every second, with its data in a directory of the test's; it stops it when the test ends. It returns
// the server's base URL once the server is ready.
func startPrometheus(t *testing.T, binary, target string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	require.NoError(t, err)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: app
    static_configs:
      - targets: [%q]
`, rules, target)
	configFile := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o644))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	cmd := exec.Command(binary, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	logs := &strings.Builder{}
	var logsMu sync.Mutex
	cmd.Stdout, cmd.Stderr = lockedWriter{&logsMu, logs}, lockedWriter{&logsMu, logs}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	base := "http://" + addr
	deadline := time.After(time.Minute)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case err := <-exited:
			logsMu.Lock()
			defer logsMu.Unlock()
			t.Fatalf("prometheus exited before it was ready: %v\n%s", err, logs.String())
		case <-deadline:
			logsMu.Lock()
			defer logsMu.Unlock()
			t.Fatalf("prometheus was not ready within a minute\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// waitForQuery polls Prometheus until query returns at least one series, failing the test after two minutes.
func waitForQuery(t *testing.T, prom, query string) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		var r struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		last = getJSON(t, prom+"/api/v1/query?query="+url.QueryEscape(query), &r)
		return len(r.Data.Result) > 0
	}, 2*time.Minute, 200*time.Millisecond, "Prometheus never answered %q with a series; last answer: %s", query, last)
}

// promAlert is an alert as Prometheus's /api/v1/alerts lists it.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// waitForFiringAlert polls Prometheus until the alert named name is firing and returns it, failing the test after
// two minutes.
func waitForFiringAlert(t *testing.T, prom, name string) promAlert {
	t.Helper()
	var found promAlert
	var last string
	require.Eventually(t, func() bool {
		var r struct {
			Data struct {
				Alerts []promAlert `json:"alerts"`
			} `json:"data"`
		}
		last = getJSON(t, prom+"/api/v1/alerts", &r)
		for _, a := range r.Data.Alerts {
			if a.Labels["alertname"] == name && a.State == "firing" {
				found = a
				return true
			}
		}
		return false
	}, 2*time.Minute, 200*time.Millisecond, "alert %s never fired; Prometheus's last list: %s", name, last)
	return found
}

// getJSON decodes the JSON at u into v and returns the body, for failure messages.
func getJSON(t *testing.T, u string, v any) string {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.NoError(t, json.Unmarshal(body, v))
	return string(body)
}

// Every counter an alert reads has a promtool test in which the counter's series is absent and then appears at
// 1, the shape prommetrics exports on a consumer's first event, and the alert is expected to fire in it: a rule
// built on increase() alone misses that first event.
func TestAlertRules_EveryCounterARuleReadsIsTestedAbsentThenOne(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	for file, v := range map[string]any{rulesFile: &rules, rulesTests: &tests} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, v), file)
	}
	counter := regexp.MustCompile(`watermill_inbox_[a-z_]+_total`)
	checked := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, name := range counter.FindAllString(r.Expr, -1) {
				checked++
				covered := false
				for _, tc := range tests.Tests {
					absentThenOne, fires := false, false
					for _, s := range tc.InputSeries {
						if strings.HasPrefix(s.Series, name+"{") && strings.HasPrefix(s.Values, "_") &&
							strings.Contains(s.Values, " 1") {
							absentThenOne = true
						}
					}
					for _, a := range tc.AlertRuleTest {
						if a.Alertname == r.Alert && len(a.ExpAlerts) > 0 {
							fires = true
						}
					}
					covered = covered || (absentThenOne && fires)
				}
				require.True(t, covered, "alert %s reads %s, and no test in %s has that series absent and then 1 "+
					"with the alert expected to fire", r.Alert, name, rulesTests)
			}
		}
	}
	require.NotZero(t, checked, "no counter found in %s", rulesFile)
}
