package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/boundedexec"
)

// detectTimeout bounds each iptables-save DetectMode runs.
const detectTimeout = 5 * time.Second

// hintChains are created by kubelet in the backend it uses; their presence decides
// (as in kubernetes-sigs/iptables-wrappers).
var hintChains = []string{":KUBE-IPTABLES-HINT", ":KUBE-KUBELET-CANARY"}

// saveStats summarises one backend's iptables-save and ip6tables-save output.
type saveStats struct {
	present bool // the backend's iptables-save ran (binary installed, kernel side works)
	hint    bool // a kubelet hint chain exists
	kube    int  // rules mentioning KUBE- or kube
	rules   int  // all rules
}

func statsOf(out []byte) saveStats {
	var s saveStats
	for _, l := range strings.Split(string(out), "\n") {
		for _, h := range hintChains {
			if strings.HasPrefix(l, h+" ") {
				s.hint = true
			}
		}
		if !strings.HasPrefix(l, "-") {
			continue
		}
		s.rules++
		if strings.Contains(l, "KUBE-") || strings.Contains(l, "kube") {
			s.kube++
		}
	}
	return s
}

// chooseMode is the iptables-wrapper heuristic: a kubelet hint chain wins (nft
// first), then the backend with more kube rules, then the one with more rules;
// a tie (an empty node) picks nft. Before all that, a backend whose save does not
// run at all (not installed) loses to one whose save does.
func chooseMode(legacy, nft saveStats) Mode {
	switch {
	case legacy.present != nft.present:
		if legacy.present {
			return ModeLegacy
		}
		return ModeNFT
	case nft.hint:
		return ModeNFT
	case legacy.hint:
		return ModeLegacy
	case legacy.kube != nft.kube:
		if legacy.kube > nft.kube {
			return ModeLegacy
		}
		return ModeNFT
	case legacy.rules > nft.rules:
		return ModeLegacy
	default:
		return ModeNFT
	}
}

// DetectMode picks the backend: $KUBE_PROXY_IPTABLES_MODE if set, else the
// heuristic over both backends' iptables-save and ip6tables-save output (a backend
// whose save fails, e.g. a missing binary or kernel module, counts as empty). The
// four saves run at once: each is a process (100-400 ms under emulation, where they
// were most of the time before the informers started) and none depends on another.
func DetectMode(ctx context.Context, exec utilexec.Interface) (Mode, error) {
	switch v := os.Getenv(EnvMode); v {
	case "":
	case string(ModeLegacy), string(ModeNFT):
		return Mode(v), nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", EnvMode, v, ModeLegacy, ModeNFT)
	}
	modes := []Mode{ModeLegacy, ModeNFT}
	bases := []string{"iptables", "ip6tables"}
	type result struct {
		out []byte
		ok  bool
	}
	results := make([][]result, len(modes))
	var wg sync.WaitGroup
	for i, mode := range modes {
		results[i] = make([]result, len(bases))
		for j, base := range bases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A backend whose kernel side is broken can hang; the wrapper
				// script upstream bounds it the same way.
				out, _, err := boundedexec.Run(ctx, exec, detectTimeout, base+"-"+string(mode)+"-save", nil)
				results[i][j] = result{out: out, ok: err == nil}
			}()
		}
	}
	wg.Wait()
	stats := make([]saveStats, len(modes))
	for i := range modes {
		var all bytes.Buffer
		for _, r := range results[i] {
			all.Write(r.out)
		}
		stats[i] = statsOf(all.Bytes())
		stats[i].present = results[i][0].ok // iptables-save, not ip6tables-save
	}
	return chooseMode(stats[0], stats[1]), nil
}
