// cadvisor: cAdvisor's container monitoring, built from its library module, for streambench's
// --resources cadvisor. It wires the library the way cAdvisor's own command does: an in-memory
// stats cache (cache/memory), the manager (manager.New) with the raw cgroup handler and the
// docker handler registered as plugins, the Prometheus collectors (metrics) on /metrics, and of
// the REST API the part streambench reads: /api/v2.0/stats/NAME and /api/v2.0/spec/NAME with
// the query parameters type, count, recursive and max_age, answered as the command answers
// them. /healthz says ok.
//
// It listens on 127.0.0.1 only. With -port 0 the kernel picks a free port; once the server
// listens, the address (127.0.0.1:PORT) is written to -address_file. SIGTERM or SIGINT stop
// the manager, then the program. The library's own flags (-housekeeping_interval,
// -allow_dynamic_housekeeping, -docker_only, -docker, -storage_duration, …) are accepted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/cadvisor/cache/memory"
	"github.com/google/cadvisor/container"
	v2 "github.com/google/cadvisor/info/v2"
	"github.com/google/cadvisor/manager"
	"github.com/google/cadvisor/metrics"
	"github.com/google/cadvisor/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	// the container handlers: docker's as a plugin; the raw cgroup handler is the manager's own
	_ "github.com/google/cadvisor/container/docker/install"
)

const (
	host      = "127.0.0.1"
	statsPath = "/api/v2.0/stats"
	specPath  = "/api/v2.0/spec"
)

var (
	port            = flag.Int("port", 0, "port on 127.0.0.1 to listen on (0: a free one)")
	addressFile     = flag.String("address_file", "", "file to write the address listened on to")
	storageDuration = flag.Duration("storage_duration", 2*time.Minute, "how long stats are kept in memory")
	labels          = flag.String("whitelisted_container_labels", "",
		"comma-separated container labels to keep as Prometheus labels")
	enabled = container.MetricSet{
		container.CpuUsageMetrics:     struct{}{},
		container.MemoryUsageMetrics:  struct{}{},
		container.DiskIOMetrics:       struct{}{},
		container.NetworkUsageMetrics: struct{}{},
	}
)

func init() {
	flag.Var(&enabled, "enable_metrics", "comma-separated kinds of metrics to collect; among: "+
		container.AllMetrics.String())
}

// options reads the REST API's query parameters, with the command's defaults.
func options(r *http.Request) (v2.RequestOptions, error) {
	opt := v2.RequestOptions{IdType: v2.TypeName, Count: 64}
	q := r.URL.Query()
	switch kind := q.Get("type"); kind {
	case "":
	case v2.TypeName, v2.TypeDocker:
		opt.IdType = kind
	default:
		return opt, fmt.Errorf("unknown 'type' %q", kind)
	}
	if text := q.Get("count"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < -1 {
			return opt, fmt.Errorf("invalid 'count' option %q: -1 or more", text)
		}
		opt.Count = n
	}
	opt.Recursive = q.Get("recursive") == "true"
	if text := q.Get("max_age"); text != "" {
		age, err := time.ParseDuration(text)
		if err != nil {
			return opt, fmt.Errorf("failed to parse 'max_age' option: %v", err)
		}
		opt.MaxAge = &age
	}
	return opt, nil
}

// answer serves one kind of the REST API at prefix + "/NAME": what `read` makes of the
// container NAME and the request's options, as JSON.
func answer(prefix string, read func(name string, opt v2.RequestOptions) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		opt, err := options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		name := "/" + strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, prefix), "/")
		out, err := read(name, opt)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(out); err != nil {
			klog.Errorf("answering %s: %v", r.URL.Path, err)
		}
	}
}

// stats: container name → its samples, oldest first (the command's v2.0 stats).
func stats(m manager.Manager) http.HandlerFunc {
	return answer(statsPath, func(name string, opt v2.RequestOptions) (any, error) {
		infos, err := m.GetRequestedContainersInfo(name, opt)
		if err != nil && len(infos) == 0 {
			return nil, err
		}
		out := make(map[string][]v2.DeprecatedContainerStats, len(infos))
		for key, info := range infos {
			out[key] = v2.DeprecatedStatsFromV1(info)
		}
		return out, nil
	})
}

// spec: container name → its description (names, labels, image, limits), the command's v2.0
// spec.
func spec(m manager.Manager) http.HandlerFunc {
	return answer(specPath, func(name string, opt v2.RequestOptions) (any, error) {
		opt.Count = 1 // the samples that come with it are not served
		infos, err := m.GetContainerInfoV2(name, opt)
		if err != nil {
			return nil, err
		}
		out := make(map[string]v2.ContainerSpec, len(infos))
		for key, info := range infos {
			out[key] = info.Spec
		}
		return out, nil
	})
}

// prometheusHandler serves the newest sample of every container, the machine's figures and
// the program's own, each scrape from a registry of its own as the command does.
func prometheusHandler(m manager.Manager) http.Handler {
	labelFunc := metrics.DefaultContainerLabels
	if *labels != "" {
		keep := strings.Split(*labels, ",")
		for i := range keep {
			keep[i] = strings.TrimSpace(keep[i])
		}
		labelFunc = metrics.BaseContainerLabels(keep)
	}
	machine := metrics.NewPrometheusMachineCollector(m, enabled)
	goCollector := collectors.NewGoCollector()
	process := collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opt, err := options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		opt.Count, opt.Recursive = 1, true
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewPrometheusCollector(m, labelFunc, enabled, clock.RealClock{}, opt),
			machine, goCollector, process)
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
	})
}

// announce writes the address atomically, so a reader never sees half of it.
func announce(address string) error {
	if *addressFile == "" {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(*addressFile), "."+filepath.Base(*addressFile)+".tmp")
	if err := os.WriteFile(tmp, []byte(address+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *addressFile)
}

func run() error {
	cache := memory.New(*storageDuration, nil)
	m, err := manager.New(cache, sysfs.NewRealSysFs(), manager.HousekeepingConfigFlags, enabled,
		http.DefaultClient, []string{""}, []string{""}, "", 0) // no raw cgroup, no environment kept
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle(statsPath+"/", stats(m))
	mux.Handle(specPath+"/", spec(m))
	mux.Handle("/metrics", prometheusHandler(m))
	if err := m.Start(); err != nil {
		return fmt.Errorf("starting the manager: %w", err)
	}
	listener, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(*port)))
	if err != nil {
		_ = m.Stop()
		return err
	}
	if err := announce(listener.Addr().String()); err != nil {
		_ = m.Stop()
		return fmt.Errorf("writing the address file: %w", err)
	}
	klog.Infof("cAdvisor listening on http://%s (metrics: %s)", listener.Addr(), enabled.String())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	select {
	case sig := <-stop:
		klog.Infof("stopping on %v", sig)
		_ = server.Close()
		return m.Stop()
	case err := <-served:
		_ = m.Stop()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

func main() {
	klog.InitFlags(nil)
	flag.Parse()
	defer klog.Flush()
	if err := run(); err != nil {
		klog.Flush()
		fmt.Fprintln(os.Stderr, "cadvisor:", err)
		os.Exit(1)
	}
}
