package hub

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// Snapshot is a spec resolved to files in the cache.
type Snapshot struct {
	Spec   Spec
	Commit string
	Dir    string   // snapshots/COMMIT
	Files  []string // the spec's files (repository paths)
	// Path is what runtime/load opens: Dir for a checkpoint folder, the
	// (first shard's) GGUF file otherwise.
	Path string
	// Downloaded counts the bytes this call received; Cached is true when
	// the spec came from the cache without asking the hub anything.
	Downloaded int64
	Cached     bool
}

// Fetch resolves spec to files in the cache, downloading what is missing.
// Online it asks the hub for the revision's commit and files (one request)
// and fetches only files the snapshot lacks, so a cached spec costs that
// one request. Offline, or when the hub cannot be reached (not when it
// answers with an error) and the cache has the revision, it uses the
// cache alone.
func (c *Client) Fetch(ctx context.Context, sp Spec) (*Snapshot, error) {
	rev := sp.revision()
	if c.Offline {
		s, err := c.fromCache(sp)
		if err != nil {
			return nil, fmt.Errorf("%w: %s (HF_HUB_OFFLINE is set): %v", ErrOffline, sp, err)
		}
		return s, nil
	}
	info, err := c.modelInfo(ctx, sp.Repo, rev)
	if err != nil {
		var se *statusError
		if ctx.Err() == nil && !errors.As(err, &se) {
			if s, cerr := c.fromCache(sp); cerr == nil {
				c.logf("%s: the hub cannot be reached (%v); using the cached snapshot %s", sp, err, s.Commit)
				return s, nil
			}
		}
		return nil, err
	}
	byName := make(map[string]sibling, len(info.Siblings))
	names := make([]string, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		byName[s.Name] = s
		names = append(names, s.Name)
	}
	snap := &Snapshot{Spec: sp, Commit: info.SHA, Dir: c.snapshotDir(sp.Repo, info.SHA)}
	get := func(name string) error {
		ref, err := c.fileRef(ctx, sp.Repo, info.SHA, byName[name])
		if err != nil {
			return err
		}
		n, err := c.ensure(ctx, ref)
		snap.Downloaded += n
		return err
	}
	sel, err := selectFiles(sp, names, func() ([]byte, error) {
		if err := get(indexFile); err != nil {
			return nil, err
		}
		return os.ReadFile(filepath.Join(snap.Dir, indexFile))
	})
	if err != nil {
		return nil, err
	}
	for _, f := range sel.files {
		if err := get(f); err != nil {
			return nil, err
		}
	}
	if err := c.writeRef(sp.Repo, rev, info.SHA); err != nil {
		return nil, fmt.Errorf("hub: %s: writing refs/%s: %w", sp.Repo, rev, err)
	}
	snap.Files = sel.files
	snap.Path = filepath.Join(snap.Dir, filepath.FromSlash(sel.path))
	return snap, nil
}

// fileRef completes a file's etag and size, asking the resolve endpoint
// when the model info left them out.
func (c *Client) fileRef(ctx context.Context, repo, commit string, s sibling) (fileRef, error) {
	ref := fileRef{repo: repo, commit: commit, path: s.Name, etag: s.etag(), size: s.size()}
	if ref.etag == "" || ref.size < 0 {
		etag, size, err := c.headFile(ctx, repo, commit, s.Name)
		if err != nil {
			return fileRef{}, fmt.Errorf("hub: %s: %s: %w", repo, s.Name, err)
		}
		ref.etag, ref.size = etag, size
	}
	if ref.etag != url.PathEscape(ref.etag) || ref.etag == "." || ref.etag == ".." {
		return fileRef{}, fmt.Errorf("%w: %s: %s has etag %q", ErrVerify, repo, s.Name, ref.etag)
	}
	return ref, nil
}

// fromCache resolves a spec from the cache alone.
func (c *Client) fromCache(sp Spec) (*Snapshot, error) {
	commit, err := c.readRef(sp.Repo, sp.revision())
	if err != nil {
		return nil, fmt.Errorf("no cached revision %s of %s", sp.revision(), sp.Repo)
	}
	dir := c.snapshotDir(sp.Repo, commit)
	names, err := c.snapshotFiles(sp.Repo, commit)
	if err != nil {
		return nil, err
	}
	sel, err := selectFiles(sp, names, func() ([]byte, error) { return os.ReadFile(filepath.Join(dir, indexFile)) })
	if err != nil {
		return nil, err
	}
	return &Snapshot{Spec: sp, Commit: commit, Dir: dir, Files: sel.files, Path: filepath.Join(dir, filepath.FromSlash(sel.path)), Cached: true}, nil
}
