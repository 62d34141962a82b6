package ipvs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestPredicates(t *testing.T) {
	tests := []struct {
		err                       error
		notFound, exists, invalid bool
	}{
		{errorf(syscall.ESRCH, "deleting virtual server %s", "TCP/10.0.0.1:80"), true, false, false},
		{errorf(syscall.ENOENT, "deleting real server"), true, false, false},
		{fmt.Errorf("sync: %w", errorf(syscall.EEXIST, "adding virtual server")), false, true, false},
		{errorf(syscall.EINVAL, "adding real server"), false, false, true},
		// A message that merely mentions the condition must not match.
		{errors.New("no such process: file exists: invalid argument"), false, false, false},
		{nil, false, false, false},
	}
	for _, tc := range tests {
		if got := IsNotFound(tc.err); got != tc.notFound {
			t.Errorf("IsNotFound(%v) = %v", tc.err, got)
		}
		if got := IsExists(tc.err); got != tc.exists {
			t.Errorf("IsExists(%v) = %v", tc.err, got)
		}
		if got := IsInvalid(tc.err); got != tc.invalid {
			t.Errorf("IsInvalid(%v) = %v", tc.err, got)
		}
	}
}
