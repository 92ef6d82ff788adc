package catalog

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Object names in the checkpoint root. Frozen: they are on disk.
const (
	// SavepointsDir holds every savepoint: "savepoints/<id>/...".
	SavepointsDir = "savepoints"
	// ManifestName is the manifest of a checkpoint ("<job>/chk-<N>/_metadata")
	// and of a savepoint ("savepoints/<id>/_metadata").
	ManifestName = "_metadata"
	// JobFileName is the per-job catalog file "<job>/_catalog": history,
	// pins and adoptions.
	JobFileName = "_catalog"
	// sharedDir holds a job's shared files: "<job>/shared/<unique>".
	sharedDir = "shared"
	// savepointDataDir is where a native savepoint puts its copies:
	// "savepoints/<id>/data/<original object name>".
	savepointDataDir = "data"
	// LogDir holds the changelog's segments in the log store
	// ("_changelog/..."), shared by every job of a daemon (package dstl
	// names them). Job names start with a letter or digit, so it never
	// collides with a job directory when the log store is the checkpoint
	// store.
	LogDir = "_changelog"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateJob checks that job is usable as a job name: the backend's rules
// for path segments, and not "savepoints", which the layout reserves.
func ValidateJob(job string) error {
	if !nameRE.MatchString(job) {
		return fmt.Errorf("%w: job name %q must match %s", ErrInvalidArgument, job, nameRE)
	}
	if job == SavepointsDir {
		return fmt.Errorf("%w: job name %q is reserved for the savepoint directory", ErrInvalidArgument, job)
	}
	return nil
}

// ValidateSavepointID checks a savepoint id (same rules as a job name).
func ValidateSavepointID(id string) error {
	if !nameRE.MatchString(id) {
		return fmt.Errorf("%w: savepoint id %q must match %s", ErrInvalidArgument, id, nameRE)
	}
	return nil
}

// CheckpointDir is the private directory of checkpoint id of job.
func CheckpointDir(job string, id uint64) string { return fmt.Sprintf("%s/chk-%d", job, id) }

// CheckpointManifest is the manifest object of checkpoint id of job.
func CheckpointManifest(job string, id uint64) string {
	return CheckpointDir(job, id) + "/" + ManifestName
}

// SavepointDir is the directory of savepoint id.
func SavepointDir(id string) string { return SavepointsDir + "/" + id }

// objKind classifies an object name of the checkpoint root.
type objKind int

const (
	objUnknown            objKind = iota // outside the layout: never touched
	objShared                            // <job>/shared/...
	objCheckpoint                        // <job>/chk-<N>/... (not the manifest)
	objCheckpointManifest                // <job>/chk-<N>/_metadata
	objJobFile                           // <job>/_catalog
	objSavepoint                         // savepoints/<id>/... (not the manifest)
	objSavepointManifest                 // savepoints/<id>/_metadata
	objLog                               // _changelog/... (in the log store)
)

// objName is a parsed object name.
type objName struct {
	kind objKind
	job  string // objShared, objCheckpoint*, objJobFile
	id   uint64 // objCheckpoint*
	sp   string // objSavepoint*
}

// dir is the directory whose in-progress state protects the object: the
// checkpoint or savepoint directory, "" for shared and unknown objects.
func (n objName) dir() string {
	switch n.kind {
	case objCheckpoint, objCheckpointManifest:
		return CheckpointDir(n.job, n.id)
	case objSavepoint, objSavepointManifest:
		return SavepointDir(n.sp)
	}
	return ""
}

// parseCheckpointSegment parses "chk-<N>" with N a decimal without leading
// zeros (so that one id has one name).
func parseCheckpointSegment(s string) (uint64, bool) {
	num, ok := strings.CutPrefix(s, "chk-")
	if !ok || num == "" || (len(num) > 1 && num[0] == '0') {
		return 0, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	return id, err == nil
}

func classify(name string) objName {
	seg := strings.SplitN(name, "/", 3)
	if len(seg) < 2 {
		return objName{}
	}
	if seg[0] == LogDir {
		return objName{kind: objLog}
	}
	if seg[0] == SavepointsDir {
		if len(seg) < 3 || ValidateSavepointID(seg[1]) != nil {
			return objName{}
		}
		if seg[2] == ManifestName {
			return objName{kind: objSavepointManifest, sp: seg[1]}
		}
		return objName{kind: objSavepoint, sp: seg[1]}
	}
	if ValidateJob(seg[0]) != nil {
		return objName{}
	}
	if len(seg) == 2 {
		if seg[1] == JobFileName {
			return objName{kind: objJobFile, job: seg[0]}
		}
		return objName{}
	}
	if seg[1] == sharedDir {
		return objName{kind: objShared, job: seg[0]}
	}
	if id, ok := parseCheckpointSegment(seg[1]); ok {
		if seg[2] == ManifestName {
			return objName{kind: objCheckpointManifest, job: seg[0], id: id}
		}
		return objName{kind: objCheckpoint, job: seg[0], id: id}
	}
	return objName{}
}

// IsMetadata reports whether name is a metadata object of the catalog: a
// job file "<job>/_catalog", which is rewritten in place, or a manifest
// "<job>/chk-<N>/_metadata" or "savepoints/<id>/_metadata", which is
// deleted with its checkpoint and may be written again under the same
// name. They are small and read when the daemon starts; a cached copy of
// one could be stale once another daemon has written the store (a failover
// to another host and back), so the daemon keeps them out of its local
// cache (storeurl.Options.Uncached). Checkpoint data files are written
// once under unique names, and restores check them against the CRCs of
// their handles.
func IsMetadata(name string) bool {
	b := path.Base(name)
	return b == JobFileName || b == ManifestName
}
