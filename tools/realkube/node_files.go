package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// writeFiles writes D/node-N: the kubelet's identity and kubeconfig, containerd's and the
// kubelet's configuration, the CNI network and the kernel tunables' files.
func (n *nodeRun) writeFiles(context.Context) error {
	for _, sub := range []string{"pki", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "sysctl", "images"} {
		if err := os.MkdirAll(filepath.Join(n.work, sub), 0o755); err != nil {
			return err
		}
	}
	server, err := os.ReadFile(filepath.Join(n.cfg.dir, "ready"))
	if err != nil {
		return fmt.Errorf("the control plane in %s is not ready (realkube up --dir %s first): %w", n.cfg.dir, n.cfg.dir, err)
	}
	certPEM, keyPEM, caPEM, err := n.kubeletIdentity()
	if err != nil {
		return err
	}
	files := map[string]string{
		"kubelet.kubeconfig":             certKubeconfig(strings.TrimSpace(string(server)), caPEM, "system:node:"+n.cfg.name, certPEM, keyPEM),
		"containerd.toml":                n.containerdConfig(),
		"cni/net.d/10-realkube.conflist": n.cniConfig(),
		"kubelet.yaml":                   n.kubeletConfig(),
	}
	for name, value := range kernelTunables {
		files[filepath.Join("sysctl", strings.ReplaceAll(name, "/", "."))] = value + "\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.work, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// kubeletIdentity is a client certificate for system:node:N in system:nodes, signed by the
// plane's CA: what the Node authorizer and NodeRestriction know a kubelet by (no TLS bootstrap).
func (n *nodeRun) kubeletIdentity() (certPEM, keyPEM, caPEM []byte, err error) {
	pkiDir := filepath.Join(n.cfg.dir, "pki")
	caPEM, err = os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return nil, nil, nil, err
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.key"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the plane's CA key (written by this realkube's up): %w", err)
	}
	caCert, err := parsePEM(caPEM, "CERTIFICATE", x509.ParseCertificate)
	if err != nil {
		return nil, nil, nil, err
	}
	caKey, err := parsePEM(caKeyPEM, "EC PRIVATE KEY", x509.ParseECPrivateKey)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	template := certTemplate("system:node:" + n.cfg.name)
	template.Subject = pkix.Name{CommonName: "system:node:" + n.cfg.name, Organization: []string{"system:nodes"}}
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, template, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubelet client certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), caPEM, nil
}

func parsePEM[T any](raw []byte, kind string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != kind {
		return zero, fmt.Errorf("no %s PEM block", kind)
	}
	return parse(block.Bytes)
}

func certKubeconfig(server string, caPEM []byte, user string, certPEM, keyPEM []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: realkube
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: realkube
  context: {cluster: realkube, user: %s}
current-context: realkube
`, server, b64(caPEM), user, b64(certPEM), b64(keyPEM), user)
}

// containerdConfig: everything under D/node-N, CNI from Debian's plugins and our conf dir.
// restrict_oom_score_adj: without CAP_SYS_RESOURCE (a VM that withholds it) runc cannot give a
// sandbox a score below containerd's own, and every sandbox fails to start.
func (n *nodeRun) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[4]q
`, filepath.Join(n.work, "containerd-root"), filepath.Join(n.work, "containerd-state"), n.socket(),
		filepath.Join(n.work, "cni", "net.d"))
}

// cniConfig: a bridge whose gateway is the node's side (no masquerade: nothing leaves the
// namespace), host-local addresses recorded under D/node-N, and portmap for hostPorts.
// containerd's CRI brings up lo itself.
func (n *nodeRun) cniConfig() string {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "realkube",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridgeName, "isGateway": true, "hairpinMode": true, "ipMasq": false,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.cfg.podCIDR.String()}}},
					"dataDir": filepath.Join(n.work, "cni", "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	raw, _ := json.MarshalIndent(conf, "", "  ")
	return string(raw) + "\n"
}

// kubeletConfig: cgroupfs and cgroup v1 allowed (failCgroupV1 false: a machine that mounts v1
// only), no swap check, the kubelet's API open on the node address only inside the caller's
// network namespace, image GC and eviction out of the way of a busy CI disk, quick status.
func (n *nodeRun) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
podLogsDir: %s
resolvConf: ""
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
shutdownGracePeriod: 0s
`, n.socket(), n.cfg.ip, filepath.Join(n.work, "pod-logs"))
}

func (n *nodeRun) buildImages(context.Context) error {
	dir := filepath.Join(n.work, "images")
	if err := writeBusyboxImage(filepath.Join(dir, "busybox.tar"), busyboxImage, n.cfg.busybox, []string{"/bin/sh"}); err != nil {
		return err
	}
	// The sandbox's process only holds the pod's namespaces: containerd stops it with SIGKILL.
	return writeBusyboxImage(filepath.Join(dir, "pause.tar"), pauseImage, n.cfg.busybox, []string{"/bin/sleep", "2147483647"})
}

const (
	busyboxImage = "portmapper.test/busybox:1"
	pauseImage   = "registry.k8s.io/pause:3.10"
)

// setupNetwork, in the caller's network namespace: the node address on a veth (no dummy
// devices on every kernel), the Service range routed to it (kube-proxy's rules catch it before
// it leaves), and forwarding with bridged traffic through nftables for hairpin Service traffic.
func (n *nodeRun) setupNetwork(context.Context) error {
	link := "rk-" + n.cfg.name
	// A node killed in this namespace left its devices (a killed run sweeps nothing).
	for _, stale := range []string{bridgeName, link} {
		_ = exec.Command("ip", "link", "del", stale).Run()
	}
	n.links = true
	for _, args := range [][]string{
		{"link", "add", link, "type", "veth", "peer", "name", link + "-p"},
		{"addr", "add", n.cfg.ip.String() + "/32", "dev", link},
		{"link", "set", link, "up"},
		{"link", "set", link + "-p", "up"},
		{"route", "replace", serviceCIDR, "dev", link},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	for _, s := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"} {
		if err := os.WriteFile("/proc/sys/"+s, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", s, err)
		}
	}
	return nil
}

// waitReady polls the Node until its Ready condition is True; a kubelet that exits first fails
// it (with "unsupported here" when it refuses this machine's cgroups).
func (n *nodeRun) waitReady(ctx context.Context) error {
	client, server, token, err := n.adminClient()
	if err != nil {
		return err
	}
	url := server + "/api/v1/nodes/" + n.cfg.name
	deadline := time.Now().Add(n.cfg.wait)
	last := "no answer"
	for time.Now().Before(deadline) {
		if n.kubelet.exited() {
			tail := logTail(n.work, "kubelet")
			if strings.Contains(tail, "cgroup v1") && strings.Contains(strings.ToLower(tail), "unsupported") {
				return unsupported{"the kubelet refuses cgroup v1 on this machine"}
			}
			return fmt.Errorf("the kubelet exited (%v); its log:\n%s", n.kubelet.err, tail)
		}
		if n.containerd.exited() {
			return fmt.Errorf("containerd exited (%v); its log:\n%s", n.containerd.err, logTail(n.work, "containerd"))
		}
		status, body, err := get(ctx, client, url, token)
		if err == nil && status == http.StatusOK {
			if ready, why := nodeReady(body, n.started); ready {
				return nil
			} else {
				last = why
			}
		} else if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("HTTP %d", status)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s not Ready in %s (%s); the kubelet's log:\n%s", n.cfg.name, n.cfg.wait, last, logTail(n.work, "kubelet"))
}

// nodeReady: Ready=True in a status this run's kubelet wrote (a Node object of an earlier run
// may still say Ready within the node-lifecycle grace period). Heartbeats have whole seconds.
func nodeReady(body string, since time.Time) (bool, string) {
	var node struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
				LastHeartbeatTime             time.Time
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &node); err != nil {
		return false, err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			if c.LastHeartbeatTime.Before(since.Truncate(time.Second)) {
				return false, "Ready last reported by an earlier kubelet"
			}
			return c.Status == "True", c.Reason + ": " + c.Message
		}
	}
	return false, "no Ready condition yet"
}

// adminClient reads D/state.json's server and the admin token of D/pki/tokens.csv.
func (n *nodeRun) adminClient() (*http.Client, string, string, error) {
	server, err := os.ReadFile(filepath.Join(n.cfg.dir, "ready"))
	if err != nil {
		return nil, "", "", err
	}
	tokens, err := os.ReadFile(filepath.Join(n.cfg.dir, "pki", "tokens.csv"))
	if err != nil {
		return nil, "", "", err
	}
	var token string
	for _, line := range strings.Split(string(tokens), "\n") {
		if fields := strings.Split(line, ","); len(fields) > 1 && fields[1] == "admin" {
			token = fields[0]
		}
	}
	if token == "" {
		return nil, "", "", errors.New("no admin token in pki/tokens.csv")
	}
	caPEM, err := os.ReadFile(filepath.Join(n.cfg.dir, "pki", "ca.crt"))
	if err != nil {
		return nil, "", "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return client, strings.TrimSpace(string(server)), token, nil
}

// recordState adds the kubelet to D/state.json as "kubelet" (its pid, the arguments of
// `realkube kubelet`, its log), so a test can kill it and start it again.
func (n *nodeRun) recordState(context.Context) error {
	path := filepath.Join(n.cfg.dir, "state.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var state map[string]json.RawMessage
	if err := json.Unmarshal(raw, &state); err != nil {
		return err
	}
	components := map[string]componentState{}
	if c, ok := state["components"]; ok {
		if err := json.Unmarshal(c, &components); err != nil {
			return err
		}
	}
	components["kubelet"] = componentState{n.kubelet.cmd.Process.Pid, n.kubeletArgs(), filepath.Join(n.work, "kubelet.log")}
	if state["components"], err = json.Marshal(components); err != nil {
		return err
	}
	out, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// recordedKubelet is the kubelet pid D/state.json names now (a test may have started another).
func (n *nodeRun) recordedKubelet() int {
	raw, err := os.ReadFile(filepath.Join(n.cfg.dir, "state.json"))
	if err != nil {
		return 0
	}
	var state struct {
		Components map[string]componentState `json:"components"`
	}
	if json.Unmarshal(raw, &state) != nil {
		return 0
	}
	return state.Components["kubelet"].Pid
}
