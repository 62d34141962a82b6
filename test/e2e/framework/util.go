package framework

import (
	"encoding/base64"
	"os"
	"strings"
)

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}
