package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const nodeUsage = `usage: realkube node --dir D --name N --ip IP --pod-cidr CIDR [flags]

Starts containerd and a kubelet as node N of the control plane in D (started by 'realkube up
--dir D', whose API server needs --authorization-mode=Node), waits until the Node is Ready, then
writes D/node-N/ready and records the kubelet in D/state.json (as "kubelet", so a test can kill it
and start it again). Stops everything on SIGTERM or SIGINT, and when its parent process dies.

It runs in the caller's network namespace, which must not be the machine's (use 'unshare -n'):
it adds the node address IP on a veth pair rk-N, routes the Service range there, bridges the pods
(rkcni0, CNI bridge + host-local over CIDR) and enables forwarding. containerd, its shims, the
pods and the kubelet live in a private mount namespace: tmpfs over the paths they write regardless
of their configuration, and the kernel tunables the kubelet would set machine-wide shown to it
with the values it wants. Images built from the machine's static busybox are imported at start
(portmapper.test/busybox:1, and registry.k8s.io/pause:3.10 for the sandboxes), and --image
archives too. Leftovers of a killed run (containers, kubepods cgroups, shims) are swept before
start and after stop. One node runs on a machine at a time; another waits for it.

Exit codes: 0 stopped, 1 failed, 2 usage, 3 unsupported here (the one-line reason on stderr).
`

// exitUnsupported tells the tests to skip, not fail: this machine cannot run a node.
const exitUnsupported = 3

// The Service range `up` gives the API server: the node routes it to kube-proxy's rules.
const serviceCIDR = "10.96.0.0/16"

// bridgeName is the pods' bridge (one node per network namespace).
const bridgeName = "rkcni0"

type nodeConfig struct {
	dir         string
	name        string
	ip          net.IP
	podCIDR     *net.IPNet
	busybox     string
	images      []string
	kubeletArgs []string
	wait        time.Duration
	check       bool
}

// unsupported is a reason this machine cannot run a node at all (exit 3), as opposed to a
// failure of this run.
type unsupported struct{ reason string }

func (u unsupported) Error() string { return u.reason }

func parseNode(args []string) (*nodeConfig, error) {
	c := &nodeConfig{}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), nodeUsage); fs.PrintDefaults() }
	fs.StringVar(&c.dir, "dir", "", "the control plane's directory (of 'realkube up'; required)")
	fs.StringVar(&c.name, "name", "", "the Node's name (required)")
	ip := fs.String("ip", "", "the node's IPv4 address, added in the caller's network namespace (required)")
	cidr := fs.String("pod-cidr", "", "the IPv4 range the node's pods get addresses from, e.g. 10.246.0.0/24 (required)")
	fs.StringVar(&c.busybox, "busybox", "/bin/busybox", "a statically linked busybox: the test image and the sandbox (pause) image are built from it")
	fs.Var((*repeated)(&c.images), "image", "an image archive ('docker save' format) imported at start (repeatable)")
	fs.Var((*repeated)(&c.kubeletArgs), "kubelet-arg", "an extra kubelet flag (repeatable)")
	fs.DurationVar(&c.wait, "wait", 90*time.Second, "how long the node may take to become Ready (and to wait for another node to stop)")
	fs.BoolVar(&c.check, "check", false, "only check that this machine can run a node: exit 0, or 3 with the reason (no other flag needed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.check {
		return c, nil
	}
	if c.dir == "" || c.name == "" || *ip == "" || *cidr == "" {
		return nil, errors.New("--dir, --name, --ip and --pod-cidr are required")
	}
	if c.ip = net.ParseIP(*ip).To4(); c.ip == nil {
		return nil, fmt.Errorf("--ip %q is not an IPv4 address", *ip)
	}
	var err error
	if _, c.podCIDR, err = net.ParseCIDR(*cidr); err != nil || c.podCIDR.IP.To4() == nil {
		return nil, fmt.Errorf("--pod-cidr %q is not an IPv4 CIDR", *cidr)
	}
	// The interface names derive from it (15 bytes at most, "rk-" + N + "-p").
	if len(c.name) > 10 || strings.ContainsAny(c.name, "/ \t") {
		return nil, fmt.Errorf("--name %q: at most 10 characters, no slash or space", c.name)
	}
	return c, nil
}

func node(args []string) int {
	cfg, err := parseNode(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "realkube node: %v\n", err)
		return 2
	}
	if err := preflight(cfg, !cfg.check); err != nil {
		var u unsupported
		if errors.As(err, &u) {
			fmt.Fprintf(os.Stderr, "realkube node: unsupported here: %s\n", u.reason)
			return exitUnsupported
		}
		fmt.Fprintf(os.Stderr, "realkube node: %v\n", err)
		return 2
	}
	if cfg.check {
		return 0
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	n := &nodeRun{cfg: cfg, work: filepath.Join(cfg.dir, "node-"+cfg.name), started: time.Now()}
	unlock, err := lockNode(ctx, cfg.wait, n.logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "realkube node: %v\n", err)
		return 1
	}
	defer unlock()
	defer n.stop()
	if err := n.start(ctx); err != nil {
		var u unsupported
		if errors.As(err, &u) {
			fmt.Fprintf(os.Stderr, "realkube node: unsupported here: %s\n", u.reason)
			return exitUnsupported
		}
		fmt.Fprintf(os.Stderr, "realkube node: %v\n", err)
		return 1
	}
	<-ctx.Done()
	return 0
}

// nodeRun is what `node` started, to be stopped in reverse order.
type nodeRun struct {
	cfg        *nodeConfig
	work       string // D/node-N
	started    time.Time
	createdDir []string // host mountpoint directories a realkube node created
	links      bool     // the veth and route were added
	holder     *exec.Cmd
	holderIn   *os.File // the holder's stdin: it exits when this closes
	containerd *component
	kubelet    *component
}

func (n *nodeRun) logf(format string, args ...any) {
	fmt.Printf("realkube node: %6.2f s  %s\n", time.Since(n.started).Seconds(), fmt.Sprintf(format, args...))
}

func (n *nodeRun) socket() string { return filepath.Join(n.work, "containerd.sock") }

func (n *nodeRun) start(ctx context.Context) error {
	if swept := sweep(n.cfg.name, ""); swept != "" {
		n.logf("swept leftovers of an earlier run: %s", swept)
	}
	_ = os.RemoveAll(n.work)
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"files", n.writeFiles},
		{"images", n.buildImages},
		{"network", n.setupNetwork},
		{"mount namespace", n.startHolder},
		{"containerd", n.startContainerd},
		{"image import", n.importImages},
		{"kubelet", n.startKubelet},
		{"node Ready", n.waitReady},
		{"state", n.recordState},
	}
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		n.logf("%s done", step.name)
	}
	if err := os.WriteFile(filepath.Join(n.work, "ready"), []byte(n.cfg.name+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("realkube node: %s Ready after %.1f s\n", n.cfg.name, time.Since(n.started).Seconds())
	return nil
}

// globalPaths are written by containerd, runc, the shims and the kubelet whatever their
// configuration says (runc's root and the shim sockets, libcni's cache, the kubelet's container
// log links and device-plugin socket): tmpfs in the private mount namespace keeps them off the
// machine.
var globalPaths = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/lib/kubelet"}

// kernelTunables are the sysctls the kubelet sets machine-wide at start when they differ from
// these values (pkg/kubelet/cm setupKernelTunables); files holding these values are bound over
// them in the private mount namespace, so it finds them set and writes nothing.
var kernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// createdMarker marks a global path's directory as made by a realkube node, to be removed.
const createdMarker = ".realkube-node-created"

// nodeHolderCommand is the hidden command that holds the private mount namespace.
const nodeHolderCommand = "node-holder"

// startHolder starts `realkube node-holder` in a new mount namespace (Go makes / private in it
// before the exec): it mounts, says "ok", and lives until its stdin closes.
func (n *nodeRun) startHolder(ctx context.Context) error {
	for _, dir := range globalPaths {
		marker := filepath.Join(dir, createdMarker)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			// On the machine's side, hidden under the tmpfs: a later run removes the directory
			// even if this one is killed.
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				return err
			}
		}
		if _, err := os.Stat(marker); err == nil {
			n.createdDir = append(n.createdDir, dir)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, nodeHolderCommand, filepath.Join(n.work, "sysctl"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(n.work, "holder.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the mount namespace holder: %w", err)
	}
	n.holder = cmd
	n.holderIn = stdin.(*os.File)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ok" {
		raw, _ := os.ReadFile(filepath.Join(n.work, "holder.log"))
		return fmt.Errorf("the mount namespace holder failed (%v): %s", err, strings.TrimSpace(string(raw)))
	}
	return nil
}

// nodeHolder runs in the new mount namespace: the kernel tunables' files and tmpfs over the
// global paths, then nothing until stdin closes (the supervisor stopped or died).
func nodeHolder(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: realkube node-holder SYSCTL_DIR")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "realkube node-holder: %v\n", err)
		return 1
	}
	for name := range kernelTunables {
		src := filepath.Join(args[0], strings.ReplaceAll(name, "/", "."))
		if err := syscall.Mount(src, "/proc/sys/"+name, "", syscall.MS_BIND, ""); err != nil {
			return fail(fmt.Errorf("bind %s over /proc/sys/%s: %w", src, name, err))
		}
	}
	for _, dir := range globalPaths {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fail(fmt.Errorf("tmpfs on %s: %w", dir, err))
		}
	}
	fmt.Println("ok")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// inNamespace runs argv in the holder's mount namespace (nsenter execs it: the pid is its own).
func (n *nodeRun) inNamespace(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(n.holder.Process.Pid), "-m", "--"}, argv...)
}

func (n *nodeRun) startContainerd(ctx context.Context) error {
	argv := n.inNamespace("containerd", "--config", filepath.Join(n.work, "containerd.toml"))
	c, err := startProcess(n.work, "containerd", argv, false)
	if err != nil {
		return err
	}
	n.containerd = c
	deadline := time.Now().Add(n.cfg.wait)
	for time.Now().Before(deadline) {
		if c.exited() {
			return fmt.Errorf("containerd exited (%v); its log:\n%s", c.err, logTail(n.work, "containerd"))
		}
		if conn, err := net.Dial("unix", n.socket()); err == nil {
			conn.Close()
			return nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("containerd's socket did not answer in %s; its log:\n%s", n.cfg.wait, logTail(n.work, "containerd"))
}

func (n *nodeRun) ctr(args ...string) ([]byte, error) {
	argv := n.inNamespace(append([]string{"ctr", "-a", n.socket(), "-n", "k8s.io"}, args...)...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

func (n *nodeRun) importImages(context.Context) error {
	archives := append([]string{filepath.Join(n.work, "images", "busybox.tar"), filepath.Join(n.work, "images", "pause.tar")}, n.cfg.images...)
	for _, archive := range archives {
		if _, err := n.ctr("images", "import", "--all-platforms", archive); err != nil {
			return err
		}
	}
	return nil
}

// kubeletMountNSFlag, as the kubelet command's first argument, makes realkube enter that
// process's mount namespace first (through nsenter): the kubelet recorded in state.json is then
// started again in the node's namespace by the same command line.
const kubeletMountNSFlag = "--realkube-mount-ns="

func (n *nodeRun) kubeletArgs() []string {
	return append([]string{
		kubeletMountNSFlag + strconv.Itoa(n.holder.Process.Pid),
		"--config=" + filepath.Join(n.work, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(n.work, "kubelet.kubeconfig"),
		"--hostname-override=" + n.cfg.name,
		"--node-ip=" + n.cfg.ip.String(),
		"--root-dir=" + filepath.Join(n.work, "kubelet"),
		"--cert-dir=" + filepath.Join(n.work, "pki"),
		"--v=1",
	}, n.cfg.kubeletArgs...)
}

func (n *nodeRun) startKubelet(context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c, err := startProcess(n.work, "kubelet", append([]string{self, "kubelet"}, n.kubeletArgs()...), true)
	if err != nil {
		return err
	}
	n.kubelet = c
	return nil
}

// enterMountNS replaces this process by `nsenter -t PID -m -- realkube kubelet ARGS`: Go cannot
// join a mount namespace itself once its runtime has started threads.
func enterMountNS(pid string, args []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "realkube kubelet: %v\n", err)
		return 1
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		fmt.Fprintf(os.Stderr, "realkube kubelet: %v\n", err)
		return 1
	}
	argv := append([]string{"nsenter", "-t", pid, "-m", "--", self, "kubelet"}, args...)
	err = syscall.Exec(nsenter, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "realkube kubelet: exec nsenter: %v\n", err)
	return 1
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// startProcess starts argv logging to DIR/NAME.log, killed if this process dies; with
// dieWithParent also told to poll for it (a realkube component).
func startProcess(dir, name string, argv []string, dieWithParent bool) (*component, error) {
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", logPath, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = os.Environ()
	if dieWithParent {
		cmd.Env = append(cmd.Env, dieWithParentEnv+"=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, args: argv[1:], cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		log.Close()
		close(c.done)
	}()
	return c, nil
}
