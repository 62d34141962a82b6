// Package nftables writes nftables tables: a Ruleset writes one table of its own in
// atomic transactions over netlink (github.com/google/nftables, no process per
// write), with a kernel-faithful Fake; DeleteTable removes other tables through the
// nft binary: upstream's nftables mode keeps all of its state in the tables
// "ip kube-proxy" and "ip6 kube-proxy", and an ipvs-mode kube-proxy (upstream's,
// and this one) deletes them when it starts and on --cleanup.
package nftables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	utilexec "k8s.io/utils/exec"
)

// Family is an nftables address family.
type Family string

const (
	FamilyIPv4 Family = "ip"
	FamilyIPv6 Family = "ip6"
)

// Table names one nftables table.
type Table struct {
	Family Family
	Name   string
}

func (t Table) String() string { return string(t.Family) + " " + t.Name }

// Interface is the part of nftables kube-proxy's ipvs mode touches.
type Interface interface {
	// DeleteTable deletes t with everything in it. It reports whether the table
	// existed; a missing table is not an error.
	DeleteTable(ctx context.Context, t Table) (bool, error)
}

// ErrNoNFT is returned when the nft binary is not installed.
var ErrNoNFT = errors.New("the nft binary is not installed")

type runner struct {
	exec utilexec.Interface
}

// New returns the real implementation, which runs nft.
func New(exec utilexec.Interface) Interface { return &runner{exec: exec} }

func (r *runner) run(ctx context.Context, args ...string) ([]byte, error) {
	if _, err := r.exec.LookPath("nft"); err != nil {
		return nil, ErrNoNFT
	}
	cmd := r.exec.CommandContext(ctx, "nft", args...)
	var stdout, stderr bytes.Buffer
	cmd.SetStdout(&stdout)
	cmd.SetStderr(&stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// DeleteTable lists the family's tables first, so that "not found" is decided
// from nft's listing rather than from the wording of an error message.
func (r *runner) DeleteTable(ctx context.Context, t Table) (bool, error) {
	out, err := r.run(ctx, "list", "tables", string(t.Family))
	if err != nil {
		return false, fmt.Errorf("listing %s tables: %w", t.Family, err)
	}
	if !hasTable(out, t) {
		return false, nil
	}
	if _, err := r.run(ctx, "delete", "table", string(t.Family), t.Name); err != nil {
		return true, fmt.Errorf("deleting table %s: %w", t, err)
	}
	return true, nil
}

// hasTable reads `nft list tables` output: one "table FAMILY NAME" per line.
func hasTable(listing []byte, t Table) bool {
	sc := bufio.NewScanner(bytes.NewReader(listing))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "table" && f[1] == string(t.Family) && f[2] == t.Name {
			return true
		}
	}
	return false
}
