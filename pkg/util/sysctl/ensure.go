package sysctl

// Ensure sets name to value unless it already holds it, and reports whether it
// wrote (kube-proxy logs the writes it makes at start-up, and a read-only /proc/sys
// must not fail when nothing needs to change).
func Ensure(s Interface, name string, value int) (changed bool, err error) {
	cur, err := s.GetSysctl(name)
	if err != nil {
		return false, err
	}
	if cur == value {
		return false, nil
	}
	if err := s.SetSysctl(name, value); err != nil {
		return false, err
	}
	return true, nil
}
