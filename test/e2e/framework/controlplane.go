package framework

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ProxyUser is the user our kube-proxy authenticates as; the apiserver's
// bootstrap RBAC binds it to the system:node-proxier role.
const ProxyUser = "system:kube-proxy"

// ControlPlane is a real etcd and kube-apiserver listening on 127.0.0.1 only,
// with token authentication (an admin token and the kube-proxy user's), RBAC,
// service-cluster-ip-range 10.96.0.0/16 and no endpoint reconciler. There is
// no controller manager: tests write Nodes and EndpointSlices themselves.
type ControlPlane struct {
	Port       int    // apiserver secure port on 127.0.0.1
	AdminToken string // user "admin", group system:masters
	ProxyToken string // user system:kube-proxy
	CAPEM      []byte // trusts the apiserver's serving certificate
	Client     kubernetes.Interface
	RestConfig *rest.Config
	Dir        string // data dir (on /dev/shm) with the logs
	EtcdURL    string // etcd's client URL (http://127.0.0.1:PORT), for BulkSeed's direct writes
	BinDir     string // test/e2e/lib/build-tools.sh's folder: etcd, kube-apiserver, etcd-seed...

	etcd, apiserver *exec.Cmd
	apiserverArgv   []string
	logf            Logf
}

// VMAPIServerAddress is where the VM reaches the apiserver (a qemu guestfwd).
const VMAPIServerAddress = "10.0.2.100:6443"

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartControlPlane builds (or reuses the cached) kube-apiserver and etcd,
// starts them and waits until the apiserver is ready.
func StartControlPlane(ctx context.Context, root string, logf Logf) (*ControlPlane, error) {
	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(root, "test/e2e/lib/build-tools.sh"))
	build.Stderr = os.Stderr
	out, err := build.Output()
	if err != nil {
		return nil, fmt.Errorf("building kube-apiserver and etcd with test/e2e/lib/build-tools.sh: %w", err)
	}
	binDir := strings.TrimSpace(string(out))
	logf("control plane binaries ready in %s (%s)", binDir, time.Since(start).Round(time.Second))

	shm := "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		shm = os.TempDir()
	}
	dir, err := os.MkdirTemp(shm, "kpi-e2e-")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, BinDir: binDir, AdminToken: token(), ProxyToken: token(), logf: logf}
	ok := false
	defer func() {
		if !ok {
			cp.Stop()
		}
	}()
	p, err := newPKI(dir, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.2.100"), net.ParseIP("10.96.0.1")})
	if err != nil {
		return nil, fmt.Errorf("creating the control plane PKI: %w", err)
	}
	cp.CAPEM = p.caPEM
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n%s,%s,kube-proxy\n", cp.AdminToken, cp.ProxyToken, ProxyUser)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}

	etcdPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	cp.EtcdURL = etcdURL
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cp.etcd, err = startLogged(filepath.Join(dir, "etcd.log"), filepath.Join(binDir, "etcd"),
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}

	if cp.Port, err = freePort(); err != nil {
		return nil, err
	}
	cp.apiserverArgv = []string{filepath.Join(binDir, "kube-apiserver"),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", cp.Port),
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + p.path("server.crt"), "--tls-private-key-file=" + p.path("server.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.path("sa.pub"),
		"--service-account-signing-key-file=" + p.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceRangeIPv4() + ",fd00:96::/112",
		"--service-node-port-range=30000-32767",
		"--endpoint-reconciler-type=none",
		// kube-proxy's DaemonSet is privileged, as in every real cluster.
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--v=1"}
	cp.apiserver, err = startLogged(filepath.Join(dir, "apiserver.log"), cp.apiserverArgv...)
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	if err := cp.waitReady(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	cp.RestConfig = cp.Config(cp.AdminToken)
	if cp.Client, err = kubernetes.NewForConfig(cp.RestConfig); err != nil {
		return nil, err
	}
	logf("kube-apiserver ready on 127.0.0.1:%d after %s (logs in %s)", cp.Port, time.Since(start).Round(time.Second), dir)
	ok = true
	return cp, nil
}

// Config is a rest.Config for the host side with the given bearer token.
func (cp *ControlPlane) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", cp.Port),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAPEM},
		QPS:             50,
		Burst:           100,
	}
}

// ProxyKubeconfig is the kubeconfig our kube-proxy uses inside the VM.
func (cp *ControlPlane) ProxyKubeconfig() []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    certificate-authority-data: %s
users:
- name: kube-proxy
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: kube-proxy
current-context: e2e
`, VMAPIServerAddress, base64Std(cp.CAPEM), cp.ProxyToken))
}

func (cp *ControlPlane) waitReady(ctx context.Context, timeout time.Duration) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CAPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if cp.apiserver.ProcessState != nil {
			break
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.Port), nil)
		req.Header.Set("Authorization", "Bearer "+cp.AdminToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	tail, _ := tailFile(filepath.Join(cp.Dir, "apiserver.log"), 30)
	return fmt.Errorf("kube-apiserver not ready after %s (last: %s); log tail:\n%s", timeout, last, tail)
}

// Stop ends kube-apiserver and etcd by PID and removes the data dir, unless
// KPI_E2E_KEEP is set (then the logs stay for a post-mortem).
func (cp *ControlPlane) Stop() {
	stopProcess(cp.apiserver, 15*time.Second)
	stopProcess(cp.etcd, 10*time.Second)
	if os.Getenv("KPI_E2E_KEEP") == "" {
		os.RemoveAll(cp.Dir)
	} else if cp.logf != nil {
		cp.logf("control plane logs kept in %s", cp.Dir)
	}
}

// StopAPIServer stops kube-apiserver (etcd keeps running), as an apiserver
// outage or upgrade does.
func (cp *ControlPlane) StopAPIServer() {
	stopProcess(cp.apiserver, 15*time.Second)
}

// StartAPIServer starts kube-apiserver again with the same flags, port and
// data after StopAPIServer, and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if cp.apiserver != nil && cp.apiserver.ProcessState == nil {
		return fmt.Errorf("kube-apiserver (pid %d) is still running", cp.apiserver.Process.Pid)
	}
	var err error
	if cp.apiserver, err = startLogged(filepath.Join(cp.Dir, "apiserver.log"), cp.apiserverArgv...); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	return cp.waitReady(ctx, 3*time.Minute)
}

// LogTail returns the last lines of the apiserver log.
func (cp *ControlPlane) LogTail(n int) string {
	s, _ := tailFile(filepath.Join(cp.Dir, "apiserver.log"), n)
	return s
}

// ServiceRangeIPv4 is the apiserver's IPv4 Service range: 10.96.0.0/16, or
// KPI_E2E_SERVICE_CIDR (make bench sets 10.96.0.0/12, the widest the apiserver
// takes, for more than 60,000 Services).
func ServiceRangeIPv4() string {
	if v := os.Getenv("KPI_E2E_SERVICE_CIDR"); v != "" {
		return v
	}
	return "10.96.0.0/16"
}
