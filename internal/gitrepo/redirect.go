package gitrepo

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// url is the repository's URL: GIT_REPO_URL, or where the server said the
// repository moved to.
func (r *Repo) url() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opts.URL
}

// relocate asks the server whether the repository moved (Gitea, GitHub and
// GitLab answer a renamed repository's old URL with a redirect). go-git
// follows a redirect only on the first request of a session, and a push
// with known capabilities has no such request, so a moved repository broke
// every other push. When it moved, relocate makes the new URL the one every
// later call uses and tells Options.OnMoved. It follows a redirect only
// within the same scheme and host: the token is never sent elsewhere.
func (r *Repo) relocate(ctx context.Context) (bool, error) {
	old := r.url()
	if !strings.HasPrefix(old, "http://") && !strings.HasPrefix(old, "https://") {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(old, "/")+"/info/refs?service=git-receive-pack", nil)
	if err != nil {
		return false, err
	}
	auth, err := r.auth.Auth()
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrAuth, err)
	}
	if basic, ok := auth.(*githttp.BasicAuth); ok {
		req.SetBasicAuth(basic.Username, basic.Password)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return false, nil // unreachable: not a move; the caller reports its own error
	}
	resp.Body.Close()
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return false, nil
	}
	loc, err := resp.Location()
	if err != nil {
		return false, fmt.Errorf("the server answered %d without a usable Location: %w", resp.StatusCode, err)
	}
	moved, ok := strings.CutSuffix(loc.Path, "/info/refs")
	if !ok {
		return false, fmt.Errorf("the server redirects %s to %s, not to a repository", old, redacted(loc))
	}
	if loc.Scheme != req.URL.Scheme || loc.Host != req.URL.Host {
		return false, fmt.Errorf("the repository moved to another server (%s); set GIT_REPO_URL to it", redacted(loc))
	}
	next := (&url.URL{Scheme: loc.Scheme, Host: loc.Host, Path: moved}).String()
	if next == old {
		return false, nil
	}
	r.mu.Lock()
	r.opts.URL = next
	r.receiveCaps = nil
	r.mu.Unlock()
	if err := r.configureRemote(); err != nil {
		return false, err
	}
	if r.opts.OnMoved != nil {
		r.opts.OnMoved(old, next)
	}
	return true, nil
}

// redacted is u without credentials or query.
func redacted(u *url.URL) string {
	c := *u
	c.User, c.RawQuery = nil, ""
	return c.String()
}
