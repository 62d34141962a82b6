package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/boundedexec"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/sysctl"
)

// Conntrack sysctls kube-proxy manages (names relative to /proc/sys).
const (
	sysctlConntrackMax              = "net/netfilter/nf_conntrack_max"
	sysctlTCPEstablishedTimeout     = "net/netfilter/nf_conntrack_tcp_timeout_established"
	sysctlTCPCloseWaitTimeout       = "net/netfilter/nf_conntrack_tcp_timeout_close_wait"
	sysctlTCPBeLiberal              = "net/netfilter/nf_conntrack_tcp_be_liberal"
	sysctlUDPTimeout                = "net/netfilter/nf_conntrack_udp_timeout"
	sysctlUDPStreamTimeout          = "net/netfilter/nf_conntrack_udp_timeout_stream"
	conntrackHashsizeParameterRel   = "module/nf_conntrack/parameters/hashsize"
	defaultOOMScoreAdjPath          = "/proc/self/oom_score_adj"
	defaultSysRoot                  = "/sys"
	conntrackHashsizeEntriesPerSlot = 4
)

// kernelSetup holds what setupKernel touches, so tests point it at files.
type kernelSetup struct {
	sysctl          sysctl.Interface
	sysRoot         string // where module/nf_conntrack/parameters/hashsize lives
	oomScoreAdjPath string
	numCPU          func() int
	// loadModule loads a kernel module (modprobe); the conntrack sysctls exist
	// only once nf_conntrack is loaded, which on a fresh node nothing has done yet.
	loadModule func(ctx context.Context, name string) error
}

func defaultKernelSetup() kernelSetup {
	return kernelSetup{
		sysctl:          sysctl.New(),
		sysRoot:         defaultSysRoot,
		oomScoreAdjPath: defaultOOMScoreAdjPath,
		numCPU:          runtime.NumCPU,
		loadModule:      modprobe,
	}
}

// conntrackMax is max(maxPerCore x cores, min); 0 means leave the limit alone.
func conntrackMax(c *v1alpha1.KubeProxyConntrackConfiguration, cores int) int {
	if c.MaxPerCore == nil || *c.MaxPerCore == 0 {
		return 0
	}
	scaled := int(*c.MaxPerCore) * cores
	if c.Min != nil && int(*c.Min) > scaled {
		return int(*c.Min)
	}
	return scaled
}

// apply writes the OOM score and the conntrack sysctls. Failures to write the OOM
// score are logged (containers without CAP_SYS_RESOURCE cannot lower it); failures
// to write conntrack settings are errors, except for the hashsize on a read-only
// /sys, which is logged as upstream does.
func (k kernelSetup) apply(ctx context.Context, cfg *v1alpha1.KubeProxyConfiguration) error {
	logger := klog.FromContext(ctx)

	if cfg.OOMScoreAdj != nil && *cfg.OOMScoreAdj != 0 {
		if err := os.WriteFile(k.oomScoreAdjPath, []byte(strconv.Itoa(int(*cfg.OOMScoreAdj))), 0o644); err != nil {
			logger.Info("Failed to set the OOM score; continuing", "oomScoreAdj", *cfg.OOMScoreAdj, "err", err)
		}
	}

	c := &cfg.Conntrack
	if _, err := k.sysctl.GetSysctl(sysctlConntrackMax); sysctl.IsNotFound(err) && k.loadModule != nil {
		if err := k.loadModule(ctx, "nf_conntrack"); err != nil {
			logger.Info("Could not load nf_conntrack; conntrack settings will fail if it is not built in", "err", err)
		}
	}
	if max := conntrackMax(c, k.numCPU()); max > 0 {
		if err := k.setIfDifferent(sysctlConntrackMax, max); err != nil {
			return err
		}
		// The kernel sizes its hash table for max/4 entries per bucket at module
		// load time; a larger max with the old table makes lookups slow.
		if err := k.raiseHashsize(max / conntrackHashsizeEntriesPerSlot); err != nil {
			if errors.Is(err, fs.ErrPermission) || isReadOnly(err) {
				logger.Info("Could not raise the conntrack hash table size; /sys is read-only or not writable (mount it read-write or set the hashsize on the host)", "err", err)
			} else {
				return err
			}
		}
	}
	for _, s := range []struct {
		name  string
		value int
	}{
		{sysctlTCPEstablishedTimeout, secondsOf(c.TCPEstablishedTimeout)},
		{sysctlTCPCloseWaitTimeout, secondsOf(c.TCPCloseWaitTimeout)},
		{sysctlUDPTimeout, int(c.UDPTimeout.Duration.Seconds())},
		{sysctlUDPStreamTimeout, int(c.UDPStreamTimeout.Duration.Seconds())},
	} {
		if s.value <= 0 {
			continue // 0 leaves the kernel's value as it is
		}
		if err := k.setIfDifferent(s.name, s.value); err != nil {
			return err
		}
	}
	if c.TCPBeLiberal {
		if err := k.setIfDifferent(sysctlTCPBeLiberal, 1); err != nil {
			return err
		}
	}
	return nil
}

func secondsOf(d *metav1.Duration) int {
	if d == nil {
		return 0
	}
	return int(d.Duration.Seconds())
}

func (k kernelSetup) setIfDifferent(name string, value int) error {
	if cur, err := k.sysctl.GetSysctl(name); err == nil && cur == value {
		return nil
	}
	if err := k.sysctl.SetSysctl(name, value); err != nil {
		return fmt.Errorf("setting %s to %d: %w", name, value, err)
	}
	return nil
}

func (k kernelSetup) raiseHashsize(want int) error {
	path := filepath.Join(k.sysRoot, conntrackHashsizeParameterRel)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading conntrack hashsize: %w", err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("parsing conntrack hashsize %q: %w", data, err)
	}
	if cur >= want {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(want)), 0o640); err != nil {
		return fmt.Errorf("writing conntrack hashsize %d: %w", want, err)
	}
	return nil
}

// modprobeTimeout bounds one modprobe (a module load takes well under a second).
const modprobeTimeout = 30 * time.Second

func modprobe(ctx context.Context, name string) error {
	_, stderr, err := boundedexec.Run(ctx, utilexec.New(), modprobeTimeout, "modprobe", nil, "--", name)
	if err != nil {
		return fmt.Errorf("modprobe %s: %w: %s", name, err, strings.TrimSpace(string(stderr)))
	}
	return nil
}

func isReadOnly(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errors.Is(pe.Err, errReadOnlyFS)
	}
	return false
}
