package app

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"
)

// watchConfigFile returns (with an error wrapping errConfigChanged) once the
// content of path differs from what it was at start, or nil when ctx ends.
// Polling the content hash catches edits, atomic renames and ConfigMap symlink
// swaps alike, without an inotify dependency.
func watchConfigFile(ctx context.Context, path string, interval time.Duration) error {
	initial, err := fileHash(path)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			cur, err := fileHash(path)
			if err != nil || cur != initial {
				// A file that disappeared is a change too: restart and let the
				// next start report why it cannot be read.
				return fmt.Errorf("%w: %s; exiting so that the new configuration takes effect", errConfigChanged, path)
			}
		}
	}
}

func fileHash(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("reading config file: %w", err)
	}
	return sha256.Sum256(data), nil
}
