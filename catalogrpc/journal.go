package catalogrpc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// Journal is where a Server keeps the reports it accepted, so that the
// next hosting catalog recovers them: the cluster's replicated journal
// (cluster.Node's JournalPut, JournalDeleteRange and JournalRead).
type Journal interface {
	Put(ctx context.Context, key string, value []byte) error
	DeleteRange(ctx context.Context, from, to string) error
	Read(prefix string) map[string][]byte
}

// reportsPrefix starts every journal key of the catalog's reports:
// reportsPrefix + job + "/" + id (20 digits, so that keys sort by id) +
// "/" + task.
const reportsPrefix = "catalog/reports/"

func reportKey(job string, id uint64) string {
	return fmt.Sprintf("%s%s/%020d/", reportsPrefix, job, id)
}

// record journals one accepted report.
func (s *Server) record(ctx context.Context, job string, id uint64, task backend.TaskID, handle []byte) error {
	if s.opts.Journal == nil {
		return nil
	}
	if err := s.opts.Journal.Put(ctx, reportKey(job, id)+task.String(), handle); err != nil {
		return fmt.Errorf("catalogrpc: keeping the report of %s for checkpoint %d: %w", task, id, err)
	}
	return nil
}

// settle drops the journaled reports of checkpoint id of job (through:
// and of every earlier one, subsumed by its completion). A failure is
// logged: the next completion of the job settles them too.
func (s *Server) settle(ctx context.Context, job string, id uint64, through bool) {
	if s.opts.Journal == nil || id == ^uint64(0) {
		return
	}
	from := reportKey(job, id)
	if through {
		from = reportsPrefix + job + "/"
	}
	if err := s.opts.Journal.DeleteRange(ctx, from, reportKey(job, id+1)); err != nil {
		s.log.Warn("settling journaled reports failed; the next completion retries", "job", job, "id", id, "err", err)
	}
}

// Recover gives cat, a catalog just opened by a new leader, the reports
// the journal kept: each begins its checkpoint again and adds its handle.
// Reports of checkpoints that completed meanwhile are settled. It returns
// how many reports it restored, and the errors of the ones it could not
// (a damaged record, a handle the catalog refuses now), which stay out.
func Recover(ctx context.Context, cat *catalog.Catalog, j Journal) (int, error) {
	recs := j.Read(reportsPrefix)
	keys := slices.Sorted(maps.Keys(recs))
	n := 0
	var errs []error
	done := map[string]bool{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, reportsPrefix)
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) != 3 {
			errs = append(errs, fmt.Errorf("catalogrpc: journal key %q is not a report's", k))
			continue
		}
		job := parts[0]
		id, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("catalogrpc: journal key %q: %v", k, err))
			continue
		}
		if done[parts[0]+"/"+parts[1]] {
			continue
		}
		h, err := backend.DecodeHandle(recs[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("catalogrpc: journaled report %s: %w", k, err))
			continue
		}
		if err := cat.BeginCheckpoint(job, id); errors.Is(err, catalog.ErrExists) {
			// Completed before the leader changed: nothing to recover.
			done[parts[0]+"/"+parts[1]] = true
			_ = j.DeleteRange(ctx, reportKey(job, id), reportKey(job, id+1))
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("catalogrpc: journaled report %s: %w", k, err))
			continue
		}
		if err := cat.AddTaskHandle(job, id, h); err != nil {
			errs = append(errs, fmt.Errorf("catalogrpc: journaled report %s: %w", k, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
