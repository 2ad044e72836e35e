package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const upUsage = `usage: realkube up --dir D [--controllers LIST] [flags]

Starts etcd, kube-apiserver and, with --controllers, kube-controller-manager as separate
processes on 127.0.0.1, then writes D/kubeconfig (admin, system:masters) and D/ready.
Stops everything on SIGTERM or SIGINT, and when its parent process dies. Ports are picked below
the kernel's ephemeral range, so a component killed and started again finds its port free.

Files under D: pki/, etcd/ (data), <component>.log, audit.log (every request: verb, URI, user,
User-Agent, code), kubeconfig, state.json (ports, pids and the arguments of each component, to kill
and restart one), ready.

Controllers take kube-controller-manager's names or these short ones: endpointslice,
endpointslicemirroring, garbagecollector, namespace (any other NAME means NAME-controller).
`

// upConfig is the parsed command line of `up`.
type upConfig struct {
	dir           string
	controllers   []string
	crds          []string
	apiserverArgs []string
	kcmArgs       []string
	kcmQPS        string
	kcmBurst      string
	fsync         bool
	audit         bool
	cleanup       bool
	wait          time.Duration
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func parseUp(args []string) (*upConfig, error) {
	c := &upConfig{}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), upUsage); fs.PrintDefaults() }
	fs.StringVar(&c.dir, "dir", "", "directory for the control plane's files (required)")
	controllers := fs.String("controllers", "", "comma-separated kube-controller-manager controllers; none when empty")
	fs.Var((*repeated)(&c.crds), "crd", "a CRD manifest applied before kube-controller-manager starts, so its garbage collector knows the kind (repeatable)")
	fs.Var((*repeated)(&c.apiserverArgs), "apiserver-arg", "an extra kube-apiserver flag, e.g. --apiserver-arg=--max-requests-inflight=5 (repeatable)")
	fs.Var((*repeated)(&c.kcmArgs), "kcm-arg", "an extra kube-controller-manager flag (repeatable)")
	fs.StringVar(&c.kcmQPS, "kcm-qps", "1000", "kube-controller-manager --kube-api-qps")
	fs.StringVar(&c.kcmBurst, "kcm-burst", "2000", "kube-controller-manager --kube-api-burst")
	fs.BoolVar(&c.fsync, "fsync", false, "let etcd fsync (off by default: a test control plane, faster than production)")
	fs.BoolVar(&c.audit, "audit", true, "log every request to D/audit.log (JSON lines, metadata level): the tests' request log")
	fs.BoolVar(&c.cleanup, "cleanup", false, "remove D once everything has stopped")
	fs.DurationVar(&c.wait, "wait", 90*time.Second, "how long each component may take to become ready")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.dir == "" {
		return nil, errors.New("--dir is required")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.controllers = controllerNames(*controllers)
	return c, nil
}

// controllerNames maps the short names to kube-controller-manager's own.
func controllerNames(list string) []string {
	short := map[string]string{
		"endpointslicemirroring": "endpointslice-mirroring-controller",
		"garbagecollector":       "garbage-collector-controller",
	}
	var names []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case short[name] != "":
			names = append(names, short[name])
		case name == "*" || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-controller"):
			names = append(names, name)
		default:
			names = append(names, name+"-controller")
		}
	}
	return names
}

func up(args []string) int {
	cfg, err := parseUp(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "realkube up: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	plane := &controlPlane{cfg: cfg, started: time.Now()}
	defer func() {
		plane.stop()
		if cfg.cleanup {
			_ = os.RemoveAll(cfg.dir)
		}
	}()
	if err := plane.start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "realkube up: %v\n", err)
		return 1
	}
	<-ctx.Done()
	return 0
}

// controlPlane is what `up` started, in start order.
type controlPlane struct {
	cfg        *upConfig
	started    time.Time
	pki        *pki
	ports      map[string]int
	components []*component
}

func (p *controlPlane) start(ctx context.Context) error {
	dir := p.cfg.dir
	for _, stale := range []string{"ready", "kubeconfig", "state.json"} {
		_ = os.Remove(filepath.Join(dir, stale))
	}
	var err error
	if p.pki, err = writePKI(filepath.Join(dir, "pki")); err != nil {
		return err
	}
	if p.ports, err = freePorts("etcd-client", "etcd-peer", "kube-apiserver", "kube-controller-manager"); err != nil {
		return err
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"etcd", p.startEtcd},
		{"kube-apiserver", p.startAPIServer},
		{"kubeconfig", p.writeKubeconfigs},
		{"crds", p.applyCRDs},
		{"kube-controller-manager", p.startKCM},
		{"state", p.writeState},
	}
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		p.logf("%s done", step.name)
	}
	ready := filepath.Join(dir, "ready")
	if err := os.WriteFile(ready, []byte(p.serverURL()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("realkube: ready after %.1f s: KUBECONFIG=%s\n", time.Since(p.started).Seconds(),
		filepath.Join(dir, "kubeconfig"))
	return nil
}

func (p *controlPlane) logf(format string, args ...any) {
	fmt.Printf("realkube: %6.2f s  %s\n", time.Since(p.started).Seconds(), fmt.Sprintf(format, args...))
}

// stop stops the components in reverse start order, so none sees its server vanish first.
func (p *controlPlane) stop() {
	for i := len(p.components) - 1; i >= 0; i-- {
		p.components[i].stop(15 * time.Second)
	}
}

func (p *controlPlane) launch(name string, args []string) (*component, error) {
	c, err := start(p.cfg.dir, name, args)
	if err != nil {
		return nil, err
	}
	p.components = append(p.components, c)
	return c, nil
}

func (p *controlPlane) serverURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", p.ports["kube-apiserver"])
}

// componentState is one entry of D/state.json.
type componentState struct {
	Pid  int      `json:"pid"`
	Args []string `json:"args"`
	Log  string   `json:"log"`
}

func (p *controlPlane) writeState(context.Context) error {
	state := struct {
		Server     string                    `json:"server"`
		Etcd       string                    `json:"etcd"`
		Ports      map[string]int            `json:"ports"`
		Components map[string]componentState `json:"components"`
	}{p.serverURL(), p.etcdURL(), p.ports, map[string]componentState{}}
	for _, c := range p.components {
		state.Components[c.name] = componentState{c.cmd.Process.Pid, c.args, filepath.Join(p.cfg.dir, c.name+".log")}
	}
	raw, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.cfg.dir, "state.json"), raw, 0o644)
}
