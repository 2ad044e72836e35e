package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
)

// dieWithParentEnv makes a realkube process exit when the process that started it is gone: `up`
// sets it for its components, and tests may set it for `up`. A test harness's child outlives a
// finished test thread, so the thread-bound Pdeathsig alone is not enough.
const dieWithParentEnv = "REALKUBE_DIE_WITH_PARENT"

func runCobra(command *cobra.Command, args []string) int {
	command.SetArgs(args)
	return cli.Run(command)
}

// exitWhenParentDies polls the parent pid: a reparented process (to init or a subreaper) has lost
// the process that owned it.
func exitWhenParentDies() {
	parent := os.Getppid()
	go func() {
		for range time.Tick(250 * time.Millisecond) {
			if os.Getppid() != parent {
				// SIGTERM to ourselves: each component shuts down as it does on a real node.
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
				time.Sleep(10 * time.Second)
				os.Exit(1)
			}
		}
	}()
}

// component is one child process of `up`, logging to D/<name>.log.
type component struct {
	name string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(dir, name string, args []string) (*component, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locating the realkube binary: %w", err)
	}
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", logPath, err)
	}
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), dieWithParentEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, args: args, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		log.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *component) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop asks the component to shut down and kills it after grace.
func (c *component) stop(grace time.Duration) {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
