package sysctl

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
)

// Fake holds sysctls in memory. NewFake(nil) models a kernel where every sysctl
// exists and reads 0 until written; NewFake(initial) one where exactly the given
// sysctls exist, as in /proc/sys (for instance net/ipv4/vs/* is missing until
// ip_vs is loaded), so reading or writing any other fails with IsNotFound.
type Fake struct {
	mu     sync.Mutex
	values map[string]int
	strict bool
	writes int
}

var _ Interface = &Fake{}

// NewFake returns a Fake; see Fake for what a nil initial means.
func NewFake(initial map[string]int) *Fake {
	f := &Fake{values: map[string]int{}, strict: initial != nil}
	for k, v := range initial {
		f.values[k] = v
	}
	return f
}

func (f *Fake) GetSysctl(name string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok && f.strict {
		return 0, fmt.Errorf("reading sysctl %s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

func (f *Fake) SetSysctl(name string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[name]; !ok && f.strict {
		return fmt.Errorf("writing sysctl %s=%d: %w", name, value, fs.ErrNotExist)
	}
	f.values[name] = value
	f.writes++
	return nil
}

// Writes returns how many successful SetSysctl calls were made.
func (f *Fake) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Dump prints "name = value" lines sorted by name, for the sysctls seeded or
// written.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.values))
	for k := range f.values {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %d\n", k, f.values[k])
	}
	return b.String()
}
