package app

import "golang.org/x/sys/unix"

var errReadOnlyFS error = unix.EROFS
