package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fileRef is a file to fetch: its repository path, blob name and size.
type fileRef struct {
	repo, commit, path string
	etag               string
	size               int64
}

// newHash returns the hash the etag is, and the bytes it starts with: a
// 64-digit etag is the SHA-256 of an LFS file, a 40-digit one the git blob
// hash (SHA-1 of "blob SIZE\x00" and the bytes). Any other etag checks the
// size alone (nil).
func newHash(etag string, size int64) hash.Hash {
	if _, err := hex.DecodeString(etag); err != nil {
		return nil
	}
	switch len(etag) {
	case 64:
		return sha256.New()
	case 40:
		h := sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
		return h
	}
	return nil
}

// ensure makes snapshots/COMMIT/PATH exist and hold the file: a link to
// the blob, downloaded (or resumed) and verified first when the blob is
// missing. It returns the bytes it downloaded.
func (c *Client) ensure(ctx context.Context, f fileRef) (int64, error) {
	// a snapshot entry is made only once its file is whole and verified (by
	// memra or the hub's own tools, which may copy instead of linking)
	snap := filepath.Join(c.snapshotDir(f.repo, f.commit), filepath.FromSlash(f.path))
	if st, err := os.Stat(snap); err == nil && st.Mode().IsRegular() && st.Size() == f.size {
		return 0, nil
	}
	blob := c.blobPath(f.repo, f.etag)
	unlock, err := c.lock(ctx, f)
	if err != nil {
		return 0, err
	}
	defer unlock()
	var got int64
	if st, err := os.Stat(blob); err != nil || st.Size() != f.size {
		if got, err = c.download(ctx, f, blob); err != nil {
			return got, err
		}
	}
	if err := c.link(f.repo, f.commit, f.path, f.etag); err != nil {
		return got, fmt.Errorf("hub: %s: linking %s: %w", f.repo, f.path, err)
	}
	return got, nil
}

// lock takes the blob's lock file (shared with other processes using the
// cache), waiting while another holds it.
func (c *Client) lock(ctx context.Context, f fileRef) (func(), error) {
	path := c.lockPath(f.repo, f.etag)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	waited := false
	for {
		err := unix.Flock(int(fd.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			fd.Close()
			return nil, fmt.Errorf("hub: lock %s: %w", path, err)
		}
		if !waited {
			c.logf("waiting for another process downloading %s of %s", f.path, f.repo)
			waited = true
		}
		select {
		case <-ctx.Done():
			fd.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return func() {
		_ = unix.Flock(int(fd.Fd()), unix.LOCK_UN)
		fd.Close()
	}, nil
}

// download fetches f into blob: into blob.incomplete first, resuming
// whatever an earlier try left there, then, once size and hash match the
// hub's, renamed into place. It returns the bytes it received.
func (c *Client) download(ctx context.Context, f fileRef, blob string) (int64, error) {
	part := blob + ".incomplete"
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return 0, err
	}
	out, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	st, err := out.Stat()
	if err != nil {
		return 0, err
	}
	have := st.Size()
	if have > f.size {
		have = 0
	}
	h := newHash(f.etag, f.size)
	if have > 0 && h != nil { // hash what an earlier try left
		if _, err := io.Copy(h, io.NewSectionReader(out, 0, have)); err != nil {
			return 0, err
		}
	}
	var (
		got  int64
		last error
	)
	retried := false // a file that fails its hash is fetched again once
	for n := 0; ; n++ {
		if have == f.size {
			if last = verify(f, h); last == nil {
				break
			}
			have = 0
			restart(h, f)
			if retried {
				break
			}
			retried = true
		} else if last != nil && !retryable(ctx, last) {
			break
		}
		if n >= max(c.Attempts, 1) {
			if last == nil {
				last = fmt.Errorf("the transfer ended at %d of %d bytes", have, f.size)
			}
			break
		}
		if n > 0 {
			if err := c.backoff(ctx, n-1, last); err != nil {
				return got, err
			}
		}
		var recv int64
		have, recv, last = c.fetchRange(ctx, f, out, have, h)
		got += recv
	}
	if c.Progress != nil {
		c.Progress.Done(f.path, last)
	}
	if last != nil {
		if errors.Is(last, ErrVerify) {
			out.Close()
			os.Remove(part)
			return got, fmt.Errorf("hub: %s: %s: %w", f.repo, f.path, last)
		}
		var se *statusError
		if errors.As(last, &se) || ctx.Err() != nil {
			return got, fmt.Errorf("hub: %s: %s: %w", f.repo, f.path, last)
		}
		return got, fmt.Errorf("%w: %s: %s after %d tries (%d of %d bytes kept in %s for the next): %v",
			ErrTransfer, f.repo, f.path, max(c.Attempts, 1), have, f.size, part, last)
	}
	if err := out.Sync(); err != nil {
		return got, err
	}
	if err := os.Rename(part, blob); err != nil {
		return got, err
	}
	return got, nil
}

// restart resets h to hash a file from its first byte.
func restart(h hash.Hash, f fileRef) {
	if h == nil {
		return
	}
	h.Reset()
	if len(f.etag) == 40 {
		fmt.Fprintf(h, "blob %d\x00", f.size)
	}
}

// verify compares the finished file's hash with its etag.
func verify(f fileRef, h hash.Hash) error {
	if h == nil {
		return nil
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.etag {
		return fmt.Errorf("%w: %s has hash %s, the hub says %s", ErrVerify, f.path, sum, f.etag)
	}
	return nil
}

// fetchRange asks for bytes [have, size) and appends what arrives to out
// (and h), returning the new length and the bytes received. A server
// that ignores the range restarts the file from 0.
func (c *Client) fetchRange(ctx context.Context, f fileRef, out *os.File, have int64, h hash.Hash) (int64, int64, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := c.request(actx, http.MethodGet, c.resolveURL(f.repo, f.commit, f.path))
	if err != nil {
		return have, 0, err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return have, 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, ok := rangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return have, 0, fmt.Errorf("asked for bytes from %d, got Content-Range %q", have, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 { // the range was ignored: start over
			have = 0
			restart(h, f)
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		// what we hold is not a prefix of the file: start over
		if err := out.Truncate(0); err != nil {
			return have, 0, err
		}
		restart(h, f)
		return 0, 0, fmt.Errorf("HTTP 416 for bytes from %d", have)
	default:
		return have, 0, readStatus(resp)
	}
	if err := out.Truncate(have); err != nil {
		return have, 0, err
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return have, 0, err
	}
	// a stall (no byte for Stall) cancels the attempt
	stall := cmpDuration(c.Stall, time.Minute)
	timer := time.AfterFunc(stall, cancel)
	defer timer.Stop()
	var recv int64
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			timer.Reset(stall)
			if have+int64(n) > f.size {
				return have, recv, fmt.Errorf("%w: %s: the server sent more than %d bytes", ErrVerify, f.path, f.size)
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return have, recv, err
			}
			if h != nil {
				h.Write(buf[:n])
			}
			have += int64(n)
			recv += int64(n)
			if c.Progress != nil {
				c.Progress.Update(f.path, f.size, have)
			}
		}
		if rerr == io.EOF {
			return have, recv, nil
		}
		if rerr != nil {
			if actx.Err() != nil && ctx.Err() == nil {
				rerr = fmt.Errorf("no data for %v: %w", stall, rerr)
			}
			return have, recv, rerr
		}
	}
}

// rangeStart reads the first byte of "bytes START-END/SIZE".
func rangeStart(v string) (int64, bool) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	s, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
