package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/test/e2e/agentproto"
)

// Guest addresses of the qemu guestfwd channels. restrict=on user networking
// lets the guest reach nothing but these.
const (
	guestAgentAddr = "10.0.2.101:7000"
	// NodeIP is the VM's eth0 address, the Node's InternalIP.
	NodeIP = "10.0.2.15"
	// NodeIP6 is the IPv6 address node-setup.sh gives eth0 (the node is
	// dual-stack), the Node's second InternalIP.
	NodeIP6 = "fd00:10::15"
	// NodeName is the VM's hostname and Node object name.
	NodeName = "kpi-node"
)

// VMOptions configures BootVM.
type VMOptions struct {
	// APIServerPort, when set, is forwarded to the guest as 10.0.2.100:6443.
	APIServerPort int
	// Files to put in the guest: guest absolute path -> host path.
	Files     map[string]string
	MemoryMiB int
	CPUs      int
	// Image, when set, is unpacked at ImageRoot with its Binary at BinaryPath,
	// and KubeProxyCommand runs the daemon from it.
	Image *Image
}

// VM is a running qemu guest with the e2e agent serving requests.
type VM struct {
	Console string // path of the guest console log on the host
	work    string
	qemu    *exec.Cmd
	ln      net.Listener
	conns   chan net.Conn
	logf    Logf
	exited  chan struct{}
	image   *Image
	ready   bool // the agent answered once (set by BootVM)
	// ackTimeout and lostAfter replace agentproto.AckTimeout and agentLost
	// when set (tests).
	ackTimeout, lostAfter time.Duration

	mu   sync.Mutex
	lost error // set when the agent stopped answering (do)
}

// Result is the outcome of a command run in the guest.
type Result struct {
	ExitCode int
	Stdout   string
	Stderr   string
}

func runScript(ctx context.Context, argv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("running %s: %w", strings.Join(argv, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BootVM prepares (or reuses) the kernel and base initramfs, builds the e2e
// agent, boots qemu and waits until the agent answers.
func BootVM(ctx context.Context, root string, opts VMOptions, logf Logf) (*VM, error) {
	start := time.Now()
	vmDir := filepath.Join(root, "test/e2e/vm")
	kdir, err := runScript(ctx, filepath.Join(vmDir, "build-kernel.sh"))
	if err != nil {
		return nil, err
	}
	base, err := runScript(ctx, filepath.Join(vmDir, "build-initramfs.sh"), kdir)
	if err != nil {
		return nil, err
	}
	accel, err := runScript(ctx, filepath.Join(vmDir, "accel.sh"), filepath.Join(kdir, "vmlinux"))
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "kpi-e2e-vm-")
	if err != nil {
		return nil, err
	}
	vm := &VM{work: work, Console: filepath.Join(work, "console.log"), conns: make(chan net.Conn, 4), logf: logf, exited: make(chan struct{}), image: opts.Image}
	ok := false
	defer func() {
		if !ok {
			vm.Stop()
		}
	}()

	initrd, err := buildInitrd(ctx, root, work, base, opts)
	if err != nil {
		return nil, err
	}

	vm.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go vm.accept()
	netdev := "user,id=n0,restrict=on"
	if opts.APIServerPort != 0 {
		netdev += fmt.Sprintf(",guestfwd=tcp:%s-cmd:socat - TCP:127.0.0.1:%d", VMAPIServerAddress, opts.APIServerPort)
	}
	netdev += fmt.Sprintf(",guestfwd=tcp:%s-cmd:socat - TCP:%s", guestAgentAddr, vm.ln.Addr())
	mem, cpus := opts.MemoryMiB, opts.CPUs
	if mem == 0 {
		mem = 1024
	}
	if cpus == 0 {
		cpus = 2
	}
	argv := append([]string{"qemu-system-x86_64"}, strings.Fields(accel)...)
	argv = append(argv, "-machine", "pc", "-smp", fmt.Sprint(cpus), "-m", fmt.Sprint(mem),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-display", "none",
		"-serial", "stdio",
		"-netdev", netdev, "-device", "virtio-net-pci,netdev=n0,romfile=",
		"-kernel", filepath.Join(kdir, "vmlinux"), "-initrd", initrd,
		"-append", "console=ttyS0 quiet loglevel=1 panic=-1 kpi.mode=agent kpi.agent="+guestAgentAddr)
	vm.qemu, err = startLogged(vm.Console, argv...)
	if err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	go func() {
		_ = vm.qemu.Wait()
		close(vm.exited)
	}()
	if opts.Image != nil {
		logf("booting the VM (%s) with the image root filesystem %s at %s", accel, opts.Image.Dir, ImageRoot)
	} else {
		logf("booting the VM (%s)", accel)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := vm.do(pingCtx, agentproto.Request{Op: agentproto.OpPing}); err != nil {
		tail, _ := tailFile(vm.Console, 40)
		return nil, fmt.Errorf("the VM agent did not answer: %w; console tail:\n%s", err, tail)
	}
	logf("VM ready after %s", time.Since(start).Round(time.Second))
	vm.ready = true
	ok = true
	return vm, nil
}

// buildInitrd writes the VM's initrd to work: the base initramfs, the image's
// cpio when opts has one, then a cpio of this run's files (the e2e agent, built
// here, the guest scripts and opts.Files).
func buildInitrd(ctx context.Context, root, work, base string, opts VMOptions) (string, error) {
	vmDir := filepath.Join(root, "test/e2e/vm")
	agent := filepath.Join(work, "e2e-agent")
	build := exec.CommandContext(ctx, "go", "build", "-o", agent, "./test/e2e/cmd/e2e-agent")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building e2e-agent: %w\n%s", err, out)
	}
	files := map[string]string{"/kpi/bin/e2e-agent": agent}
	scripts, _ := filepath.Glob(filepath.Join(vmDir, "guest", "*.sh"))
	for _, s := range scripts {
		files["/kpi/scripts/"+filepath.Base(s)] = s
	}
	for dst, src := range opts.Files {
		files[dst] = src
	}
	archives := []string{base}
	if img := opts.Image; img != nil {
		// The image's cpio (paths image/...) goes in before the per-run one,
		// which adds the daemon: the kernel unpacks them in order.
		archives = append(archives, filepath.Join(img.Dir, "image.cpio.zst"))
		files[ImageRoot+img.BinaryPath] = img.Binary
	}
	specs := []string{filepath.Join(work, "extra.cpio.gz")}
	for dst, src := range files {
		specs = append(specs, src+"="+dst)
	}
	sort.Strings(specs[1:])
	if _, err := runScript(ctx, append([]string{filepath.Join(vmDir, "mkcpio.sh")}, specs...)...); err != nil {
		return "", err
	}
	initrd := filepath.Join(work, "initrd.gz")
	if err := concatFiles(initrd, append(archives, specs[0])...); err != nil {
		return "", err
	}
	return initrd, nil
}

func concatFiles(dst string, srcs ...string) error {
	var all []byte
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		all = append(all, b...)
	}
	return os.WriteFile(dst, all, 0o644)
}

func (vm *VM) accept() {
	for {
		c, err := vm.ln.Accept()
		if err != nil {
			return
		}
		vm.conns <- c
	}
}

// agentLost is how long a request may wait, in all, for a connection whose
// agent acknowledges it before the VM is declared unresponsive (see do).
const agentLost = 3 * time.Minute

// do sends one request on one fresh agent connection. A connection that does
// not acknowledge the request within agentproto.AckTimeout never delivered it
// (agentproto): do drops it and sends the request on the next. A request with
// no deadline gets 5 minutes. When a request waits agentLost without an
// acknowledgement the VM is declared unresponsive, with its console tail, and
// every later request fails at once instead of waiting out its own deadline.
func (vm *VM) do(ctx context.Context, req agentproto.Request) (agentproto.Response, error) {
	var resp agentproto.Response
	if err := vm.lostErr(); err != nil {
		return resp, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
	}
	ackTimeout, lostAfter := agentproto.AckTimeout, agentLost
	if vm.ackTimeout != 0 {
		ackTimeout = vm.ackTimeout
	}
	if vm.lostAfter != 0 {
		lostAfter = vm.lostAfter
	}
	wrap := func(err error) error { return fmt.Errorf("agent request %s %q: %w", req.Op, req.Argv, err) }
	var lost <-chan time.Time // nil (never) while booting
	if vm.ready {
		t := time.NewTimer(lostAfter)
		defer t.Stop()
		lost = t.C
	}
	for {
		var c net.Conn
		select {
		case c = <-vm.conns:
		case <-vm.exited:
			return resp, errors.New("the VM exited")
		case <-lost:
			return resp, vm.markLost(wrap(fmt.Errorf("no acknowledgement from the VM agent in %s", lostAfter)))
		case <-ctx.Done():
			return resp, wrap(ctx.Err())
		}
		dl, _ := ctx.Deadline()
		ackBy := time.Now().Add(ackTimeout)
		if dl.Before(ackBy) {
			ackBy = dl
		}
		dec, err := sendAcknowledged(c, req, ackBy)
		if err != nil {
			c.Close()
			if ctx.Err() != nil {
				return resp, wrap(ctx.Err())
			}
			// Not read by the agent (a stale connection it already closed,
			// or one dead on the way): safe to send again on the next.
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && vm.logf != nil && req.Op != agentproto.OpPing {
				vm.logf("agent request %s %q: no acknowledgement in %s, sending it on a fresh connection", req.Op, req.Argv, ackTimeout)
			}
			continue
		}
		_ = c.SetDeadline(dl)
		err = dec.Decode(&resp)
		c.Close()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return resp, wrap(err)
		}
		return resp, nil
	}
}

// sendAcknowledged writes req on c and reads the agent's acknowledgement by
// ackBy; the returned decoder reads the response that follows.
func sendAcknowledged(c net.Conn, req agentproto.Request, ackBy time.Time) (*json.Decoder, error) {
	_ = c.SetDeadline(ackBy)
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(c)
	var ack agentproto.Response
	if err := dec.Decode(&ack); err != nil {
		return nil, err
	}
	if !ack.Accepted {
		return nil, fmt.Errorf("the agent answered %+v before acknowledging", ack)
	}
	return dec, nil
}

// markLost records that the agent stopped answering and returns the error
// every later request gets.
func (vm *VM) markLost(err error) error {
	tail, _ := tailFile(vm.Console, 30)
	lost := fmt.Errorf("FAIL LOUDLY: the VM stopped answering (%w); every later request fails at once. Console tail:\n%s", err, tail)
	vm.mu.Lock()
	if vm.lost == nil {
		vm.lost = lost
	}
	vm.mu.Unlock()
	return lost
}

func (vm *VM) lostErr() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.lost
}

// Exec runs argv in the guest (as root, in the root network namespace) and
// waits for it. The error is set only when the command could not be run.
func (vm *VM) Exec(ctx context.Context, argv ...string) (Result, error) {
	timeout := 2 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	// Beyond the command's own timeout: time to send the request again when a
	// connection lost it (do).
	cctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second+agentproto.AckTimeout+agentproto.IdleRedial)
	defer cancel()
	resp, err := vm.do(cctx, agentproto.Request{Op: agentproto.OpExec, Argv: argv, Timeout: timeout})
	if err != nil {
		return Result{}, err
	}
	r := Result{ExitCode: resp.ExitCode, Stdout: string(resp.Stdout), Stderr: string(resp.Stderr)}
	if resp.Error != "" {
		return r, fmt.Errorf("guest: %s", resp.Error)
	}
	return r, nil
}

// Sh runs a bash script in the guest and returns its stdout; a non-zero exit
// is an error carrying stderr.
func (vm *VM) Sh(ctx context.Context, script string) (string, error) {
	r, err := vm.Exec(ctx, "bash", "-c", script)
	if err != nil {
		return r.Stdout, err
	}
	if r.ExitCode != 0 {
		return r.Stdout, fmt.Errorf("guest script exited %d: %s\nstderr: %s", r.ExitCode, script, strings.TrimSpace(r.Stderr))
	}
	return r.Stdout, nil
}

// Start runs argv in the background in the guest, output appended to logPath
// (in the guest), and returns its PID.
func (vm *VM) Start(ctx context.Context, logPath string, argv ...string) (int, error) {
	resp, err := vm.do(ctx, agentproto.Request{Op: agentproto.OpStart, Argv: argv, Log: logPath})
	if err != nil {
		return 0, err
	}
	if resp.Error != "" {
		return 0, fmt.Errorf("guest: starting %q: %s", argv, resp.Error)
	}
	return resp.PID, nil
}

// Signal sends sig to a process Start started.
func (vm *VM) Signal(ctx context.Context, pid int, sig syscall.Signal) error {
	resp, err := vm.do(ctx, agentproto.Request{Op: agentproto.OpSignal, PID: pid, Signal: int(sig)})
	if err != nil {
		return err
	}
	if resp.Error != "" {
		return fmt.Errorf("guest: signalling %d: %s", pid, resp.Error)
	}
	return nil
}

// WriteFile writes a file in the guest.
func (vm *VM) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	resp, err := vm.do(ctx, agentproto.Request{Op: agentproto.OpWrite, Path: path, Data: data, Mode: uint32(mode)})
	if err != nil {
		return err
	}
	if resp.Error != "" {
		return fmt.Errorf("guest: writing %s: %s", path, resp.Error)
	}
	return nil
}

// Stop kills qemu (by PID; the guest is throwaway) and removes the work dir.
func (vm *VM) Stop() {
	if vm.ln != nil {
		vm.ln.Close()
	}
	if vm.qemu != nil && vm.qemu.Process != nil {
		_ = vm.qemu.Process.Signal(syscall.SIGTERM)
		select {
		case <-vm.exited:
		case <-time.After(5 * time.Second):
			_ = vm.qemu.Process.Kill()
			<-vm.exited
		}
	}
	if os.Getenv("KPI_E2E_KEEP") == "" {
		os.RemoveAll(vm.work)
	} else if vm.logf != nil {
		vm.logf("VM console kept in %s", vm.Console)
	}
}
