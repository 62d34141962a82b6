package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runGet fetches --url and prints "STATUS <code>" then the body, whatever the
// status (busybox wget prints no body for a 503, which health checks need).
func runGet(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	url := fs.String("url", "", "http URL to fetch")
	timeout := fs.Duration("timeout", 3*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("get: --url is required")
	}
	resp, err := (&http.Client{Timeout: *timeout}).Get(*url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("STATUS %d\n%s\n", resp.StatusCode, body)
	return nil
}
