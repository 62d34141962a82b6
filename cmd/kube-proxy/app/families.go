package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// familyCheck decides whether a proxier can run for an IP family, as
// upstream's platformCheckSupported does for the iptables-based modes: the
// kernel has the family (for IPv6: /proc/net/if_inet6 exists and
// net/ipv6/conf/all/disable_ipv6 is not 1) and the family's iptables answers
// for its nat table. Without the second check an IPv6 proxier on a node
// without ip6table_nat fails every sync and /livez restarts the pod forever.
type familyCheck struct {
	procRoot string // "/proc"
	// natUsable lists the nat table's POSTROUTING chain with the family's
	// iptables (upstream's Present()); nil for the nftables rules backend, which
	// does not use iptables.
	natUsable func(ctx context.Context, family v1.IPFamily) error
}

func defaultFamilyCheck() familyCheck {
	return familyCheck{procRoot: "/proc", natUsable: iptablesNATUsable}
}

// usable returns nil when family can be proxied, else why not.
func (c familyCheck) usable(family v1.IPFamily) error {
	if family == v1.IPv6Protocol {
		if _, err := os.Stat(filepath.Join(c.procRoot, "net/if_inet6")); err != nil {
			return fmt.Errorf("the kernel has no IPv6 (%w)", err)
		}
		if data, err := os.ReadFile(filepath.Join(c.procRoot, "sys/net/ipv6/conf/all/disable_ipv6")); err == nil && strings.TrimSpace(string(data)) == "1" {
			return errors.New("IPv6 is disabled (net.ipv6.conf.all.disable_ipv6=1)")
		}
	}
	if c.natUsable == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.natUsable(ctx, family); err != nil {
		return fmt.Errorf("no usable %s nat table: %w", iptablesProtocol(family), err)
	}
	return nil
}

// iptablesNATUsable runs `iptables -t nat -S POSTROUTING` (ip6tables for IPv6)
// in the backend the daemon would use.
func iptablesNATUsable(ctx context.Context, family v1.IPFamily) error {
	exec := utilexec.New()
	mode, err := iptables.DetectMode(ctx, exec)
	if err != nil {
		return err
	}
	ipt := iptables.New(exec, iptablesProtocol(family), mode)
	var buf bytes.Buffer
	// iptables-save of one table fails the same way: no binary, no module,
	// no table.
	if err := ipt.SaveInto(ctx, iptables.TableNAT, &buf); err != nil {
		return err
	}
	if !bytes.Contains(buf.Bytes(), []byte(":POSTROUTING ")) {
		return fmt.Errorf("the nat table has no POSTROUTING chain")
	}
	return nil
}
