package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/ipvs/rules"
	"github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/proxy/metrics"
	utiliptables "github.com/kube-proxy-ipvs/kube-proxy-ipvs/pkg/util/iptables"
)

// With the iptables backend a full sync rewrites our chains (one iptables-restore)
// and reads the nat and filter tables to find missing jumps (two iptables-save): 1.2
// s under TCG, in the sync loop, on every periodic resync, though the rules rarely
// change and are rarely tampered with. So a periodic resync checks them beside the
// loop, after its read: it reads the two tables and compares our chains with how the
// kernel printed them right after we last wrote the same text. Only when they differ
// (or the jumps are missing, or it has not seen that text printed yet) does it write
// the text again, under the lock every writer of our chains takes, and read back what
// the kernel made of it. The sync after the read then leaves the rules and jumps
// alone; if the check could not be done (a sync wrote our chains meanwhile, or the
// kernel refused the write) that sync writes them as before.
//
// The comparison is with the kernel's own printing of our text, not with the text:
// iptables-save normalises what it prints (an explicit `-m tcp`, quoting), and
// reading back after a write gives the form to expect without modelling it.

// rulesGuard orders the writes of our chains and remembers their printed form.
type rulesGuard struct {
	mu sync.Mutex
	// gen counts the writes of our chains in the sync loop.
	gen uint64
	// text is the rules text whose printed form is printed; nil: none known.
	text    []byte
	printed string
}

// wrote records, with g.mu held, that the sync loop wrote our chains.
func (g *rulesGuard) wrote() {
	g.gen++
	g.text, g.printed = nil, ""
}

// ourChainLines returns, of iptables-save output for several tables, the lines that
// declare or fill the chains declared in rules (a restore text), by table.
func ourChainLines(rules []byte, saved string) string {
	ours := map[string]bool{}
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(l, ":") {
			if name, _, ok := strings.Cut(l[1:], " "); ok {
				ours[name] = true
			}
		}
	}
	var b strings.Builder
	for _, l := range strings.Split(saved, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			b.WriteString(l + "\n")
		case strings.HasPrefix(l, ":"):
			if name, _, ok := strings.Cut(l[1:], " "); ok && ours[name] {
				b.WriteString(":" + name + "\n") // without the counters
			}
		case strings.HasPrefix(l, "-A "):
			if name, _, ok := strings.Cut(l[3:], " "); ok && ours[name] {
				b.WriteString(l + "\n")
			}
		}
	}
	return b.String()
}

// saveTables reads the nat and filter tables (iptables-save) as one text. A table
// that cannot be read is left out and its error returned with what was read. The
// two saves run at once: each is a process (100-400 ms under emulation, in every
// full sync's jumps step) and neither depends on the other.
func (b *Backend) saveTables(ctx context.Context, c rules.Counter) (string, error) {
	tables := []utiliptables.Table{utiliptables.TableNAT, utiliptables.TableFilter}
	bufs := make([]bytes.Buffer, len(tables))
	errs := make([]error, len(tables))
	var wg sync.WaitGroup
	for i, t := range tables {
		c.Request(metrics.SubsystemIPTables, "save")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.ipt.SaveInto(ctx, t, &bufs[i]); err != nil {
				errs[i] = fmt.Errorf("reading table %s: %w", t, err)
			}
		}()
	}
	wg.Wait()
	var all strings.Builder
	for i := range tables {
		if errs[i] == nil {
			all.Write(bufs[i].Bytes())
		}
	}
	return all.String(), errors.Join(errs...)
}

// missingJumps returns the restore text that inserts the jumps saved (iptables-save
// output) lacks, "" when none is missing. Each goes in with -I, so the jumps end in
// the order upstream's one `iptables -I` per jump leaves them.
func missingJumps(saved string) string {
	missing := map[utiliptables.Table][]string{}
	var tables []utiliptables.Table
	for _, j := range jumpRules {
		line := jumpRuleLine(j.from, j.comment, j.to)
		if strings.Contains(saved, "\n"+line+"\n") {
			continue
		}
		if missing[j.table] == nil {
			tables = append(tables, j.table)
		}
		missing[j.table] = append(missing[j.table], "-I"+line[2:])
	}
	var b strings.Builder
	for _, t := range tables {
		b.WriteString("*" + string(t) + "\n")
		for _, l := range missing[t] {
			b.WriteString(l + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// checkRulesBeside checks our chains and jumps beside the sync loop (see above).
// want is the text the loop last wrote, gen the loop's write count when the resync
// began. It reports whether the rules are as they should be, and whether a repair
// beside the loop (repairRulesBeside) should write them: not when the loop wrote them
// since (it knows better), nor when they cannot be read (the next full sync in the
// loop writes them).
func (b *Backend) checkRulesBeside(ctx context.Context, want []byte, gen uint64, c rules.Counter) (ok, repair bool) {
	g := &b.guard
	if want == nil {
		return false, false
	}
	saved, err := b.saveTables(ctx, c)
	if err != nil {
		b.log.Error(err, "Failed to read the iptables tables beside the sync loop; the full sync writes our chains")
		return false, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen != gen {
		return false, false
	}
	if missingJumps(saved) == "" && g.text != nil && bytes.Equal(g.text, want) && ourChainLines(want, saved) == g.printed {
		return true, false
	}
	return false, true
}

// repairRulesBeside writes our chains want and every missing jump beside the loop,
// unless the loop wrote them since gen, and learns the form the kernel prints them
// in. It reports whether it wrote them.
func (b *Backend) repairRulesBeside(ctx context.Context, want []byte, gen uint64, c rules.Counter) bool {
	g := &b.guard
	saved, err := b.saveTables(ctx, c)
	if err != nil {
		b.log.Error(err, "Failed to read the iptables tables beside the sync loop; the full sync writes our chains")
		return false
	}
	g.mu.Lock()
	if g.gen != gen {
		g.mu.Unlock()
		return false // the loop wrote our chains since: it knows better
	}
	jumps := missingJumps(saved)
	known := g.text != nil && bytes.Equal(g.text, want)
	c.Request(metrics.SubsystemIPTables, "restore")
	if err := b.ipt.RestoreAll(ctx, slices.Concat(want, []byte(jumps)), utiliptables.NoFlushTables, utiliptables.RestoreCount); err != nil {
		g.mu.Unlock()
		b.log.Error(err, "The kernel refused our chains beside the sync loop; the full sync writes them")
		return false
	}
	c.RulesWritten()
	g.text, g.printed = nil, ""
	g.mu.Unlock()
	if known || jumps != "" {
		b.log.Info("Repaired our iptables chains beside the sync loop", "jumpsMissing", jumps != "")
	}
	back, err := b.saveTables(ctx, c)
	if err != nil {
		return true // written; the next check reads the printed form
	}
	g.mu.Lock()
	if g.gen == gen {
		g.text, g.printed = want, ourChainLines(want, back)
	}
	g.mu.Unlock()
	return true
}
