package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// preflight: what a node needs from the machine. A missing piece is `unsupported` (exit 3, the
// tests skip); running in the machine's own network namespace is refused (exit 2) unless only
// checking (--check).
func preflight(cfg *nodeConfig, refuseMachineNetwork bool) error {
	if os.Geteuid() != 0 {
		return unsupported{"not root (a node needs mounts, cgroups and network devices)"}
	}
	own, err1 := os.Readlink("/proc/self/ns/net")
	machine, err2 := os.Readlink("/proc/1/ns/net")
	if refuseMachineNetwork && err1 == nil && err2 == nil && own == machine {
		return errors.New("refusing to run in the machine's network namespace: start it in one of its own (unshare -n)")
	}
	packages := map[string]string{
		"containerd": "containerd", "containerd-shim-runc-v2": "containerd", "ctr": "containerd",
		"runc": "runc", "nsenter": "util-linux", "ip": "iproute2",
	}
	var missing []string
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "nsenter", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", bin, packages[bin]))
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "portmap"} {
		if _, err := os.Stat("/usr/lib/cni/" + plugin); err != nil {
			missing = append(missing, "/usr/lib/cni/"+plugin+" (Debian package containernetworking-plugins)")
		}
	}
	if len(missing) > 0 {
		return unsupported{"missing " + strings.Join(missing, ", ")}
	}
	filesystems, _ := os.ReadFile("/proc/filesystems")
	if !strings.Contains(string(filesystems), "\toverlay\n") {
		return unsupported{"no overlayfs in /proc/filesystems (containerd's snapshotter)"}
	}
	if entries, err := os.ReadDir("/sys/fs/cgroup"); err != nil || len(entries) == 0 {
		return unsupported{"no cgroup file system at /sys/fs/cgroup"}
	}
	if err := staticBinary(cfg.busybox); err != nil {
		return unsupported{fmt.Sprintf("%s: %v (Debian package busybox-static)", cfg.busybox, err)}
	}
	return nil
}

// staticBinary: the images hold busybox alone, so it must need no loader or library.
func staticBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("not statically linked")
		}
	}
	return nil
}

// lockNode takes the machine-wide node lock: nodes of one machine share the kubepods cgroup
// trees the kubelet creates, and the sweep before start may only remove a dead run's leftovers.
// The lock is an flock on /sys/fs/cgroup (no file to leave behind), released when this process
// ends however it ends.
func lockNode(ctx context.Context, wait time.Duration, logf func(string, ...any)) (func(), error) {
	f, err := os.Open("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking /sys/fs/cgroup: %w", err)
		}
		if !said {
			logf("another realkube node runs on this machine: waiting for it to stop")
			said = true
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another realkube node still runs on this machine after %s", wait)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			f.Close()
			return nil, err
		}
	}
}

// stop: the kubelet first (so it restarts nothing), then every container, containerd, the
// mount namespace, the sweep, the network devices and the mountpoint directories this run made.
func (n *nodeRun) stop() {
	began := time.Now()
	if n.kubelet != nil {
		n.kubelet.stop(5 * time.Second)
	}
	// A kubelet a test started again is not our child: the one state.json names now.
	if pid := n.recordedKubelet(); pid > 0 && (n.kubelet == nil || pid != n.kubelet.cmd.Process.Pid) && isOurKubelet(pid, n.work) {
		stopPid(pid, 5*time.Second)
	}
	var mountNS string
	if n.holder != nil {
		mountNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Process.Pid))
	}
	if n.containerd != nil && !n.containerd.exited() {
		if out, err := n.ctr("tasks", "ls", "-q"); err == nil {
			for _, task := range strings.Fields(string(out)) {
				_, _ = n.ctr("tasks", "kill", "-s", "SIGKILL", task)
			}
		}
		n.containerd.stop(5 * time.Second)
	}
	if n.holder != nil {
		n.holderIn.Close()
		done := make(chan struct{})
		go func() { _ = n.holder.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = n.holder.Process.Kill()
			<-done
		}
	}
	if swept := sweep(n.cfg.name, mountNS); swept != "" {
		n.logf("swept: %s", swept)
	}
	if n.links {
		for _, link := range []string{bridgeName, "rk-" + n.cfg.name} {
			_ = exec.Command("ip", "link", "del", link).Run()
		}
	}
	// Only once nothing of the node runs: removing a directory that is a mountpoint in another
	// mount namespace detaches that mount there.
	for _, dir := range n.createdDir {
		_ = os.Remove(filepath.Join(dir, createdMarker))
		_ = os.Remove(dir)
	}
	n.logf("stopped in %.1f s", time.Since(began).Seconds())
}

// sweep kills what a node leaves behind when stopped or killed: every process still in a
// kubepods cgroup, every process in the node's mount namespace (mountNS, when known: the
// shims), the shims of a containerd that no longer answers, and then removes the kubepods cgroup
// trees (empty directories otherwise stay in every hierarchy). It says what it found.
func sweep(name, mountNS string) string {
	var found []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := kubepodsPids()
		for pid := range strayShims(mountNS) {
			pids[pid] = true
		}
		if len(pids) == 0 {
			break
		}
		found = append(found, fmt.Sprintf("%d processes", len(pids)))
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			found = append(found, "some survived SIGKILL")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if removed, left := removeKubepods(deadline); removed > 0 || left > 0 {
		found = append(found, fmt.Sprintf("%d kubepods cgroups removed, %d left", removed, left))
	}
	return strings.Join(found, "; ")
}

// kubepodsRoots: the kubepods tree of every cgroup hierarchy (v1 mounts one per controller).
func kubepodsRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		roots = append(roots, "/sys/fs/cgroup/kubepods") // the unified hierarchy (cgroup v2)
	}
	return roots
}

func kubepodsPids() map[int]bool {
	pids := map[int]bool{}
	for _, root := range kubepodsRoots() {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			raw, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	return pids
}

// strayShims: the processes in mountNS (the node's own), and containerd shims of a realkube
// node (their -address is D/node-N/containerd.sock) whose containerd no longer answers.
func strayShims(mountNS string) map[int]bool {
	pids := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if mountNS != "" {
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == mountNS {
				pids[pid] = true
				continue
			}
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(argv) == 0 || filepath.Base(argv[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i, a := range argv[:len(argv)-1] {
			address := argv[i+1]
			if a == "-address" && strings.HasSuffix(address, "/containerd.sock") &&
				strings.HasPrefix(filepath.Base(filepath.Dir(address)), "node-") && !answers(address) {
				pids[pid] = true
			}
		}
	}
	return pids
}

func answers(socket string) bool {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// removeKubepods removes the kubepods trees depth-first; a cgroup whose last process is still
// exiting is busy for a moment, so it retries until deadline.
func removeKubepods(deadline time.Time) (removed, left int) {
	for {
		var dirs []string
		for _, root := range kubepodsRoots() {
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
		}
		// Deepest first.
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		left = 0
		for _, dir := range dirs {
			if err := syscall.Rmdir(dir); err == nil {
				removed++
			} else {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return removed, left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isOurKubelet: pid is a realkube kubelet of this node (its arguments name the node's files).
func isOurKubelet(pid int, work string) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	cmdline := string(raw)
	return strings.Contains(cmdline, "kubelet\x00") && strings.Contains(cmdline, filepath.Join(work, "kubelet.yaml"))
}

// stopPid sends SIGTERM, then SIGKILL after grace, to a process that is not our child; gone
// means no longer in /proc or a zombie its parent has yet to reap.
func stopPid(pid int, grace time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	kill, giveUp := time.Now().Add(grace), time.Now().Add(2*grace)
	for alivePid(pid) && time.Now().Before(giveUp) {
		if time.Now().After(kill) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func alivePid(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
