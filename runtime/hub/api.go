package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// modelInfo is the part of GET /api/models/REPO/revision/REV?blobs=true
// memra reads.
type modelInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"` // the revision's commit
	Siblings []sibling `json:"siblings"`
}

// sibling is one file of the revision.
type sibling struct {
	Name   string `json:"rfilename"`
	Size   int64  `json:"size"`
	BlobID string `json:"blobId"` // the git blob hash
	LFS    *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// etag is the blob name of a file: its SHA-256 for an LFS file, its git
// blob hash otherwise ("" when the hub gave neither).
func (s sibling) etag() string {
	if s.LFS != nil && s.LFS.SHA256 != "" {
		return s.LFS.SHA256
	}
	return s.BlobID
}

// size is the file's size (-1 when unknown).
func (s sibling) size() int64 {
	if s.LFS != nil && s.LFS.Size > 0 {
		return s.LFS.Size
	}
	if s.Size > 0 || s.BlobID != "" {
		return s.Size
	}
	return -1
}

// statusError is an HTTP error answer of the hub.
type statusError struct {
	status int
	code   string // X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo
	msg    string // X-Error-Message, or the body's "error"
	after  time.Duration
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.status)
	if e.code != "" {
		s += " " + e.code
	}
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s
}

// Unwrap maps the status to the package's errors.
func (e *statusError) Unwrap() error {
	switch {
	case e.status == http.StatusUnauthorized || e.status == http.StatusForbidden:
		return ErrAuth
	case e.status == http.StatusNotFound:
		return ErrNotFound
	case e.status == http.StatusTooManyRequests:
		return ErrRateLimited
	}
	return nil
}

// retryable reports whether another try may succeed: rate limits, server
// errors and transport failures, not 4xx answers or a cancelled context.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status == http.StatusTooManyRequests || se.status >= 500
	}
	return !errors.Is(err, ErrVerify)
}

// readStatus turns a non-2xx answer into a statusError.
func readStatus(resp *http.Response) *statusError {
	e := &statusError{status: resp.StatusCode, code: resp.Header.Get("X-Error-Code"), msg: resp.Header.Get("X-Error-Message")}
	if e.msg == "" {
		var body struct {
			Error string `json:"error"`
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(raw, &body) == nil {
			e.msg = body.Error
		}
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			e.after = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			e.after = time.Until(t)
		}
	}
	if e.status == http.StatusUnauthorized || e.status == http.StatusForbidden {
		e.msg = strings.TrimSpace(e.msg + " (a private or gated repository: set HF_TOKEN to a token with access)")
	}
	return e
}

// backoff waits before try n+1 (n from 0): Retry-After when the hub sent
// one, else 0.5 s doubling; both capped by MaxBackoff.
func (c *Client) backoff(ctx context.Context, n int, err error) error {
	d := 500 * time.Millisecond << min(n, 10)
	var se *statusError
	if errors.As(err, &se) && se.after > 0 {
		d = se.after
	}
	d = min(d, c.MaxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// request builds a request to the hub with the token and user agent.
func (c *Client) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	return req, nil
}

// apiURL is the model info URL of a repository at a revision.
func (c *Client) apiURL(repo, rev string) string {
	return c.Endpoint + "/api/models/" + repo + "/revision/" + url.PathEscape(rev) + "?blobs=true"
}

// resolveURL is the download URL of a file at a commit.
func (c *Client) resolveURL(repo, commit, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return c.Endpoint + "/" + repo + "/resolve/" + url.PathEscape(commit) + "/" + strings.Join(parts, "/")
}

// modelInfo asks the hub for a revision's commit and files, trying again
// after a 429, a server error or a transport failure.
func (c *Client) modelInfo(ctx context.Context, repo, rev string) (*modelInfo, error) {
	var last error
	for n := range max(c.Attempts, 1) {
		if n > 0 {
			if err := c.backoff(ctx, n-1, last); err != nil {
				return nil, err
			}
		}
		info, err := c.modelInfoOnce(ctx, repo, rev)
		if err == nil {
			return info, nil
		}
		last = err
		if !retryable(ctx, err) {
			break
		}
	}
	return nil, fmt.Errorf("hub: %s@%s: model info: %w", repo, rev, last)
}

func (c *Client) modelInfoOnce(ctx context.Context, repo, rev string) (*modelInfo, error) {
	req, err := c.request(ctx, http.MethodGet, c.apiURL(repo, rev))
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readStatus(resp)
	}
	var info modelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if !commitHash.MatchString(info.SHA) {
		return nil, fmt.Errorf("the answer names no commit (sha %q)", info.SHA)
	}
	return &info, nil
}

// headFile asks the resolve endpoint for a file's etag and size without
// following the redirect, for a model info answer that lacks them.
func (c *Client) headFile(ctx context.Context, repo, commit, file string) (etag string, size int64, err error) {
	req, err := c.request(ctx, http.MethodHead, c.resolveURL(repo, commit, file))
	if err != nil {
		return "", 0, err
	}
	hc := *c.HTTP
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return "", 0, readStatus(resp)
	}
	etag = resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	s := resp.Header.Get("X-Linked-Size")
	if s == "" {
		s = resp.Header.Get("Content-Length")
	}
	size, err = strconv.ParseInt(s, 10, 64)
	if etag == "" || err != nil || size < 0 {
		return "", 0, fmt.Errorf("%w: %s: the hub reports no etag or size for %s", ErrVerify, repo, file)
	}
	return etag, size, nil
}
