package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestExplainEndpoint(t *testing.T) {
	release := make(chan struct{})
	explain := func(ctx context.Context, ns, name string) (any, string, bool, error) {
		switch name {
		case "slow":
			<-release
		case "broken":
			return nil, "", false, errors.New("the proxier is busy syncing; ask again")
		case "missing":
			return nil, "", false, nil
		}
		return map[string]string{"service": ns + "/" + name}, "Service " + ns + "/" + name + "\n", true, nil
	}
	srv := httptest.NewServer(WithExplain(http.NotFoundHandler(), explain))
	defer srv.Close()
	get := func(q string) (int, string) {
		resp, err := http.Get(srv.URL + ExplainPath + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		q    string
		code int
		body string
	}{
		{"?service=ns/web", 200, "Service ns/web\n"},
		{"?service=ns/web&format=json", 200, `"service": "ns/web"`},
		{"?service=ns/missing", 404, "has no port of it"},
		{"?service=ns/broken", 503, "busy syncing"},
		{"?service=web", 400, "want NAMESPACE/NAME"},
		{"?service=ns/Bad_Name", 400, "not a namespace or Service name"},
		{"?service=ns/web&format=yaml", 400, "want text or json"},
	} {
		code, body := get(c.q)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s: %d %q, want %d with %q", c.q, code, body, c.code, c.body)
		}
	}
	// One at a time: a second request while one runs is told to come back.
	time.Sleep(time.Second) // a new window
	done := make(chan int)
	go func() { code, _ := get("?service=ns/slow"); done <- code }()
	running := false
	for i := 0; i < 200 && !running; i++ {
		_, body := get("?service=ns/web")
		running = strings.Contains(body, "another explanation is running")
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if !running {
		t.Errorf("a second explanation ran beside a running one")
	}
	if code := <-done; code != 200 {
		t.Errorf("the slow explanation: %d", code)
	}
	time.Sleep(time.Second)
	code, body := get("?service=ns/web")
	for i := 0; i < 2*explainPerSecond && code == 200; i++ {
		code, body = get("?service=ns/web")
	}
	if code != http.StatusTooManyRequests || !strings.Contains(body, "explanations a second") {
		t.Errorf("%d explanations a second were all answered", 2*explainPerSecond)
	}
}
