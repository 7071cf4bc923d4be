package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The cache layout, as the hub's own tools write it.

// repoDir is models--OWNER--REPO in the cache.
func (c *Client) repoDir(repo string) string {
	return filepath.Join(c.Cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// blobPath is the blob of a file by its etag.
func (c *Client) blobPath(repo, etag string) string {
	return filepath.Join(c.repoDir(repo), "blobs", etag)
}

// snapshotDir is the snapshot of a commit.
func (c *Client) snapshotDir(repo, commit string) string {
	return filepath.Join(c.repoDir(repo), "snapshots", commit)
}

// lockPath is the lock file of a blob.
func (c *Client) lockPath(repo, etag string) string {
	return filepath.Join(c.Cache, ".locks", filepath.Base(c.repoDir(repo)), etag+".lock")
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// readRef returns the commit a revision was last seen at: a commit names
// itself when its snapshot exists, a branch or tag reads refs/REVISION.
func (c *Client) readRef(repo, rev string) (string, error) {
	if commitHash.MatchString(rev) {
		if _, err := os.Stat(c.snapshotDir(repo, rev)); err == nil {
			return rev, nil
		}
	}
	b, err := os.ReadFile(filepath.Join(c.repoDir(repo), "refs", rev))
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(b))
	if !commitHash.MatchString(commit) {
		return "", fmt.Errorf("%w: refs/%s of %s holds %q, not a commit", ErrOffline, rev, repo, commit)
	}
	return commit, nil
}

// writeRef records that rev points at commit (a commit asked for by its
// hash needs no ref).
func (c *Client) writeRef(repo, rev, commit string) error {
	if rev == commit {
		return nil
	}
	path := filepath.Join(c.repoDir(repo), "refs", rev)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == commit {
		return nil
	}
	return writeAtomic(path, []byte(commit))
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// link points snapshots/COMMIT/FILE at the blob, by a relative symbolic
// link made under a temporary name and renamed into place.
func (c *Client) link(repo, commit, file, etag string) error {
	dst := filepath.Join(c.snapshotDir(repo, commit), filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(dst), c.blobPath(repo, etag))
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return nil
	}
	tmp := fmt.Sprintf("%s.tmp-link-%d", dst, os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// snapshotFiles lists the files of a snapshot (repository paths, sorted)
// whose links resolve.
func (c *Client) snapshotFiles(repo, commit string) ([]string, error) {
	dir := c.snapshotDir(repo, commit)
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.Contains(d.Name(), ".tmp-") {
			return nil
		}
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(files)
	return files, err
}

// CachedRepo is one repository in the cache, for `memra ls`.
type CachedRepo struct {
	Repo      string
	Dir       string
	Size      int64             // bytes of its blobs (each counted once)
	Refs      map[string]string // revision → commit
	Snapshots []CachedSnapshot  // newest first
	Partial   int64             // bytes of unfinished downloads
}

// CachedSnapshot is one commit's files.
type CachedSnapshot struct {
	Commit   string
	Files    []CachedFile
	Modified time.Time
}

// CachedFile is one file of a snapshot.
type CachedFile struct {
	Path string // in the repository
	Size int64
}

// List reads every model repository of the cache. A missing cache is an
// empty list.
func (c *Client) List() ([]CachedRepo, error) {
	entries, err := os.ReadDir(c.Cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: cache %s: %w", c.Cache, err)
	}
	var repos []CachedRepo
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		r := CachedRepo{Repo: strings.ReplaceAll(name, "--", "/"), Dir: filepath.Join(c.Cache, e.Name()), Refs: map[string]string{}}
		blobs, _ := os.ReadDir(filepath.Join(r.Dir, "blobs"))
		for _, b := range blobs {
			info, err := b.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			if strings.HasSuffix(b.Name(), ".incomplete") {
				r.Partial += info.Size()
			} else {
				r.Size += info.Size()
			}
		}
		refs, _ := os.ReadDir(filepath.Join(r.Dir, "refs"))
		for _, ref := range refs {
			if b, err := os.ReadFile(filepath.Join(r.Dir, "refs", ref.Name())); err == nil && !ref.IsDir() {
				r.Refs[ref.Name()] = strings.TrimSpace(string(b))
			}
		}
		snaps, _ := os.ReadDir(filepath.Join(r.Dir, "snapshots"))
		for _, s := range snaps {
			files, err := c.snapshotFiles(r.Repo, s.Name())
			if err != nil || !s.IsDir() {
				continue
			}
			cs := CachedSnapshot{Commit: s.Name()}
			if info, err := s.Info(); err == nil {
				cs.Modified = info.ModTime()
			}
			for _, f := range files {
				st, err := os.Stat(filepath.Join(r.Dir, "snapshots", s.Name(), filepath.FromSlash(f)))
				if err == nil {
					cs.Files = append(cs.Files, CachedFile{Path: f, Size: st.Size()})
				}
			}
			r.Snapshots = append(r.Snapshots, cs)
		}
		slices.SortFunc(r.Snapshots, func(a, b CachedSnapshot) int { return b.Modified.Compare(a.Modified) })
		repos = append(repos, r)
	}
	slices.SortFunc(repos, func(a, b CachedRepo) int { return strings.Compare(a.Repo, b.Repo) })
	return repos, nil
}
