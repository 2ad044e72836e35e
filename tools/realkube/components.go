package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func (p *controlPlane) etcdURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", p.ports["etcd-client"])
}

func (p *controlPlane) startEtcd(ctx context.Context) error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", p.ports["etcd-peer"])
	args := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(p.cfg.dir, "etcd"),
		"--listen-client-urls=" + p.etcdURL(), "--advertise-client-urls=" + p.etcdURL(),
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}
	if !p.cfg.fsync {
		args = append(args, "--unsafe-no-fsync")
	}
	c, err := p.launch("etcd", args)
	if err != nil {
		return err
	}
	return p.waitHealthy(ctx, c, p.etcdURL()+"/health", "")
}

func (p *controlPlane) startAPIServer(ctx context.Context) error {
	pki := filepath.Join(p.cfg.dir, "pki")
	args := []string{
		"--etcd-servers=" + p.etcdURL(),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.ports["kube-apiserver"]),
		"--cert-dir=" + pki,
		"--tls-cert-file=" + p.pki.servingCert, "--tls-private-key-file=" + p.pki.servingKey,
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--token-auth-file=" + p.pki.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.pki.saKey, "--service-account-signing-key-file=" + p.pki.saKey,
		// Dual-stack, and room for more than the default /24's 254 Services (the bench has 1,000).
		"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
		"--authorization-mode=RBAC",
		// No ServiceAccount controller runs: pods are accepted in a new namespace at once.
		"--disable-admission-plugins=ServiceAccount",
		// As upstream integration tests: the kubernetes Service gets no 127.0.0.1 endpoints.
		"--endpoint-reconciler-type=none",
		"--v=1",
	}
	if p.cfg.audit {
		policy := filepath.Join(p.cfg.dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			return err
		}
		args = append(args, "--audit-policy-file="+policy, "--audit-log-format=json",
			"--audit-log-path="+filepath.Join(p.cfg.dir, "audit.log"))
	}
	c, err := p.launch("kube-apiserver", append(args, p.cfg.apiserverArgs...))
	if err != nil {
		return err
	}
	token := p.pki.tokens["admin"]
	if err := p.waitHealthy(ctx, c, p.serverURL()+"/readyz", token); err != nil {
		return err
	}
	return p.waitHealthy(ctx, c, p.serverURL()+"/api/v1/namespaces/default", token)
}

// auditPolicy logs each request when its response is complete (a watch also when it starts),
// without bodies: the tests' request log on the real API server, to count an operator's writes
// and to see every verb it needed authorized.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func (p *controlPlane) startKCM(ctx context.Context) error {
	if len(p.cfg.controllers) == 0 {
		return nil
	}
	args := []string{
		"--kubeconfig=" + filepath.Join(p.cfg.dir, "kube-controller-manager.kubeconfig"),
		"--controllers=" + strings.Join(p.cfg.controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.ports["kube-controller-manager"]),
		"--cert-dir=" + filepath.Join(p.cfg.dir, "pki", "kube-controller-manager"),
		// Health and the native controller's metrics readable without a token (the bench scrapes them).
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--kube-api-qps=" + p.cfg.kcmQPS, "--kube-api-burst=" + p.cfg.kcmBurst,
		"--v=1",
	}
	c, err := p.launch("kube-controller-manager", append(args, p.cfg.kcmArgs...))
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", p.ports["kube-controller-manager"])
	return p.waitHealthy(ctx, c, url, "")
}

func (p *controlPlane) writeKubeconfigs(context.Context) error {
	for file, user := range map[string]string{
		"kubeconfig":                         "admin",
		"kube-controller-manager.kubeconfig": "kube-controller-manager",
	} {
		path := filepath.Join(p.cfg.dir, file)
		if err := os.WriteFile(path, kubeconfig(p.serverURL(), p.pki.caPEM, user, p.pki.tokens[user]), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// freePorts reserves one loopback port per name, below the kernel's ephemeral range: a port the
// kernel may hand to an outgoing connection can be taken while its component is down (a client
// retrying against the stopped API server can even connect to itself on it), and then the
// restarted component cannot bind it. Each port is free when we ask, so a clash needs another
// process to listen on it in the seconds before our component binds it.
func freePorts(names ...string) (map[string]int, error) {
	low, high := listenRange()
	ports := map[string]int{}
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for _, name := range names {
		l, err := listenBetween(low, high)
		if err != nil {
			return nil, fmt.Errorf("reserving a port for %s: %w", name, err)
		}
		listeners = append(listeners, l)
		ports[name] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// listenRange is the range of ports `up` listens on: the 12,000 ports below the start of the
// ephemeral range (net.ipv4.ip_local_port_range; 32768 when unreadable).
func listenRange() (int, int) {
	ephemeral := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(raw)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil && n > 13000 {
				ephemeral = n
			}
		}
	}
	return ephemeral - 12000, ephemeral
}

// listenBetween listens on a random free loopback port in [low, high).
func listenBetween(low, high int) (net.Listener, error) {
	var last error
	for range 200 {
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			return l, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no free port in %d-%d: %w", low, high-1, last)
}
