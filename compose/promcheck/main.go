// promcheck: Prometheus's own checks of what streambench serves, without building promtool or
// the server. `promcheck lint` reads an exposition on standard input and runs client_golang's
// promlint over it, the lint `promtool check metrics` runs (a problem a line on standard error,
// exit 3; an exposition it cannot parse, exit 1). `promcheck parse` reads one PromQL expression
// a line and parses each with Prometheus's own parser (promql/parser), printing for each the
// metric names its selectors name, space-separated (an expression it cannot parse: the error
// on standard error, exit 1). `promcheck config FILE` loads a prometheus.yml with Prometheus's own
// config package, as the server and `promtool check config` load it (an error: on standard
// error, exit 1), and prints its scrape jobs as JSON. `promcheck targets GLOB...` runs
// Prometheus's file-based service discovery (file_sd_configs) over the files the globs match and
// prints the target groups it found as JSON (a file it cannot read: on standard error, exit 1).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/promql/parser"
)

func lint() int {
	problems, err := promlint.New(os.Stdin).Lint()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error while linting:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p.Metric, p.Text)
	}
	if len(problems) > 0 {
		return 3
	}
	return 0
}

func names(expr parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok && vs.Name != "" {
			seen[vs.Name] = true
		}
		return nil
	})
	found := make([]string, 0, len(seen))
	for n := range seen {
		found = append(found, n)
	}
	sort.Strings(found)
	return found
}

func parse() int {
	p := parser.NewParser(parser.Options{})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	failed := 0
	for line := 1; in.Scan(); line++ {
		text := strings.TrimSpace(in.Text())
		if text == "" {
			continue
		}
		expr, err := p.ParseExpr(text)
		if err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %v\n", line, err)
			failed++
			continue
		}
		fmt.Println(strings.Join(names(expr), " "))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "error while reading:", err)
		return 1
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// job is what `config` prints of one scrape job.
type job struct {
	Name           string     `json:"job_name"`
	ScrapeInterval string     `json:"scrape_interval"`
	ScrapeTimeout  string     `json:"scrape_timeout"`
	MetricsPath    string     `json:"metrics_path"`
	Scheme         string     `json:"scheme"`
	Static         [][]string `json:"static_targets"`
	Files          []string   `json:"file_sd_files"`
}

func printJSON(v any) int {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "error while writing:", err)
		return 1
	}
	fmt.Println(string(out))
	return 0
}

func checkConfig(path string) int {
	cfg, err := config.LoadFile(path, false, promslog.NewNopLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scrapes, err := cfg.GetScrapeConfigs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	jobs := []job{}
	for _, sc := range scrapes {
		j := job{Name: sc.JobName, ScrapeInterval: sc.ScrapeInterval.String(),
			ScrapeTimeout: sc.ScrapeTimeout.String(), MetricsPath: sc.MetricsPath,
			Scheme: sc.Scheme, Static: [][]string{}, Files: []string{}}
		for _, sd := range sc.ServiceDiscoveryConfigs {
			switch c := sd.(type) {
			case discovery.StaticConfig:
				for _, group := range c {
					targets := []string{}
					for _, t := range group.Targets {
						targets = append(targets, string(t["__address__"]))
					}
					j.Static = append(j.Static, targets)
				}
			case *file.SDConfig:
				j.Files = append(j.Files, c.Files...)
			default:
				j.Files = append(j.Files, "(service discovery "+sd.Name()+")")
			}
		}
		jobs = append(jobs, j)
	}
	return printJSON(jobs)
}

// errorCount counts the errors the discovery logs (a file it cannot read or parse).
type errorCount struct {
	slog.Handler
	errors chan string
}

func (h errorCount) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelError
}

func (h errorCount) WithAttrs(_ []slog.Attr) slog.Handler { return h }

func (h errorCount) WithGroup(_ string) slog.Handler { return h }

func (h errorCount) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		text := r.Message
		r.Attrs(func(a slog.Attr) bool {
			text += " " + a.String()
			return true
		})
		h.errors <- text
	}
	return nil
}

func discoverTargets(globs []string) int {
	expected := 0
	for _, g := range globs {
		found, err := filepath.Glob(g)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		expected += len(found)
	}
	sd := &file.SDConfig{Files: globs, RefreshInterval: file.DefaultSDConfig.RefreshInterval}
	reg := prometheus.NewRegistry()
	metrics := sd.NewDiscovererMetrics(reg, discovery.NewRefreshMetrics(reg))
	logged := errorCount{Handler: slog.DiscardHandler, errors: make(chan string, expected+1)}
	d, err := sd.NewDiscoverer(discovery.DiscovererOptions{Logger: slog.New(logged), Metrics: metrics})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups := make(chan []*targetgroup.Group)
	go d.Run(ctx, groups)
	found := []*targetgroup.Group{}
	failed := 0
	for seen := 0; seen < expected; seen++ {
		select {
		case batch := <-groups:
			found = append(found, batch...)
		case text := <-logged.errors:
			fmt.Fprintln(os.Stderr, text)
			failed++
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "the discovery read", seen, "of", expected, "files in 30 s")
			return 1
		}
	}
	if failed > 0 {
		return 1
	}
	return printJSON(found)
}

const usage = "usage: promcheck lint|parse < input, promcheck config FILE, promcheck targets GLOB..."

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	switch {
	case os.Args[1] == "lint" && len(os.Args) == 2:
		os.Exit(lint())
	case os.Args[1] == "parse" && len(os.Args) == 2:
		os.Exit(parse())
	case os.Args[1] == "config" && len(os.Args) == 3:
		os.Exit(checkConfig(os.Args[2]))
	case os.Args[1] == "targets" && len(os.Args) >= 3:
		os.Exit(discoverTargets(os.Args[2:]))
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}
