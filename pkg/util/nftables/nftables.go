// Package nftables writes nftables tables: a Ruleset writes one table of its own in
// atomic transactions over netlink (github.com/google/nftables, no process per
// write), with a kernel-faithful Fake; DeleteTable removes other tables, also over
// netlink: upstream's nftables mode keeps all of its state in the tables
// "ip kube-proxy" and "ip6 kube-proxy", and an ipvs-mode kube-proxy (upstream's,
// and this one) deletes them when it starts and on --cleanup.
package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	gnft "github.com/google/nftables"
	"golang.org/x/sys/unix"
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

// ErrNoNFT is returned when the nft binary is not installed (Dump needs it).
var ErrNoNFT = errors.New("the nft binary is not installed")

type runner struct{}

// New returns the real implementation. It talks netlink and runs no nft process:
// `nft list tables` made libnftables read every table with its sets' elements, 5-6 s
// natively (12-25 s under TCG) beside the nftables rules backend's table at 10,000
// Services x 10 endpoints. exec is not used (kept for the callers).
func New(exec utilexec.Interface) Interface { return &runner{} }

// DeleteTable lists the family's tables first, so that "not found" is decided from
// the kernel's listing rather than from an error.
func (r *runner) DeleteTable(ctx context.Context, t Table) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	fam, err := gnftFamily(t.Family)
	if err != nil {
		return false, err
	}
	c, err := gnft.New()
	if err != nil {
		return false, fmt.Errorf("opening an nftables netlink socket: %w", err)
	}
	tables, err := c.ListTablesOfFamily(fam)
	if err != nil {
		return false, fmt.Errorf("listing %s tables: %w", t.Family, err)
	}
	found := false
	for _, tb := range tables {
		found = found || tb.Name == t.Name
	}
	if !found {
		return false, nil
	}
	c.DelTable(&gnft.Table{Name: t.Name, Family: fam})
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil // deleted by someone else meanwhile
		}
		return true, fmt.Errorf("deleting table %s: %w", t, err)
	}
	return true, nil
}

// runNFT runs the nft binary (Dump only: diagnostics and tests).
func runNFT(ctx context.Context, exec utilexec.Interface, args ...string) ([]byte, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, ErrNoNFT
	}
	cmd := exec.CommandContext(ctx, "nft", args...)
	var stdout, stderr bytes.Buffer
	cmd.SetStdout(&stdout)
	cmd.SetStderr(&stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
