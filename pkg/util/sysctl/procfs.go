package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRoot is where the kernel exposes sysctls.
const DefaultRoot = "/proc/sys"

// IsNotFound reports whether err says the sysctl does not exist (for instance
// net/ipv4/vs/* before ip_vs is loaded).
func IsNotFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

// Procfs reads and writes sysctls as files under a root directory.
type Procfs struct {
	root string
}

var _ Interface = &Procfs{}

// New returns the sysctls of the running kernel (/proc/sys). The network sysctls
// are those of the calling thread's network namespace.
func New() *Procfs { return NewAt(DefaultRoot) }

// NewAt returns sysctls read from files under root (tests use a temporary
// directory laid out like /proc/sys).
func NewAt(root string) *Procfs { return &Procfs{root: root} }

// path maps "net/ipv4/vs/conntrack" to root/net/ipv4/vs/conntrack, refusing names
// that would leave the root.
func (p *Procfs) path(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("invalid sysctl name %q", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("invalid sysctl name %q", name)
		}
	}
	return filepath.Join(p.root, filepath.FromSlash(name)), nil
}

func (p *Procfs) GetSysctl(name string) (int, error) {
	path, err := p.path(name)
	if err != nil {
		return 0, fmt.Errorf("reading sysctl: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading sysctl %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("reading sysctl %s: not an integer: %w", name, err)
	}
	return v, nil
}

// SetSysctl writes value. The file must exist, as in /proc/sys: a sysctl is never
// created.
func (p *Procfs) SetSysctl(name string, value int) error {
	path, err := p.path(name)
	if err != nil {
		return fmt.Errorf("writing sysctl: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("writing sysctl %s=%d: %w", name, value, err)
	}
	_, werr := f.WriteString(strconv.Itoa(value) + "\n")
	// procfs reports a rejected value on write or, buffered, on close.
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("writing sysctl %s=%d: %w", name, value, err)
	}
	return nil
}
