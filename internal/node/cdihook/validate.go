package cdihook

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Container IDs as runtimes make them (containerd and CRI-O: 64 hex
// digits; runc accepts letters, digits and _ + - .): the ID names a record
// file, so nothing that could climb out of the record directory passes.
var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_+.-]{0,127}$`)

// ValidateContainerID refuses an OCI state whose container ID could not be
// a file name.
func ValidateContainerID(id string) error {
	if !containerIDPattern.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("OCI state: container id %q is not an id a runtime makes (letters, digits, _ + - ., at most 128)", id)
	}
	return nil
}

// claimUIDPattern is a Kubernetes UID (a UUID in practice).
var claimUIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateClaimUID refuses a --claim that could not be a claim's UID; empty
// means no record is wanted.
func ValidateClaimUID(uid string) error {
	if uid != "" && !claimUIDPattern.MatchString(uid) {
		return fmt.Errorf("--claim %q: not a ResourceClaim UID (lowercase letters, digits and -)", uid)
	}
	return nil
}

// checkCgroupPath makes sure the cgroup read from /proc names a cgroup
// below the root, not the root itself (limits there would bind the whole
// node) and not a path a ".." took elsewhere.
func checkCgroupPath(root, path, from string) error {
	root = filepath.Clean(root)
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s names cgroup %s, which is not a cgroup below %s: refusing to set limits there", from, path, root)
	}
	return nil
}
