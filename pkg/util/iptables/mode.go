package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
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
// whose save fails, e.g. a missing binary or kernel module, counts as empty).
func DetectMode(ctx context.Context, exec utilexec.Interface) (Mode, error) {
	switch v := os.Getenv(EnvMode); v {
	case "":
	case string(ModeLegacy), string(ModeNFT):
		return Mode(v), nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", EnvMode, v, ModeLegacy, ModeNFT)
	}
	count := func(mode Mode) saveStats {
		var all bytes.Buffer
		present := false
		for _, base := range []string{"iptables", "ip6tables"} {
			// A backend whose kernel side is broken can hang; the wrapper script
			// upstream bounds it the same way.
			if out, _, err := boundedexec.Run(ctx, exec, detectTimeout, base+"-"+string(mode)+"-save", nil); err == nil {
				all.Write(out)
				present = present || base == "iptables"
			}
		}
		s := statsOf(all.Bytes())
		s.present = present
		return s
	}
	return chooseMode(count(ModeLegacy), count(ModeNFT)), nil
}
