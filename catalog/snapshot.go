package catalog

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/refcount"
)

// A machine image is the machine's whole state in one checksummed frame
// (magic "STMS", version 1, CRC32C) around a JSON payload: what a log
// that replicates the catalog keeps as its snapshot, so that a node
// restarts from the image and the commands after it instead of every
// command since the beginning. The names being deleted right now are not
// in it (they are the deleting node's own); everything else is, the
// registry's holds and the deletion guard's protections included.
// Frozen: a change is a new version, and readers keep reading the old.
//
// Version 2 adds the fencing tokens of in-flight handles (imageInflight's
// "tokens"); an image without any is still written at version 1.
const (
	imageMagic    = "STMS"
	imageVersion1 = 1
	imageVersion  = 2
)

// image is the payload of a machine image.
type image struct {
	Version     int               `json:"version"`
	Loaded      bool              `json:"loaded,omitempty"`
	Entries     []imageEntry      `json:"entries,omitempty"`
	Savepoints  []imageSavepoint  `json:"savepoints,omitempty"`
	SpInflight  []string          `json:"savepointsInFlight,omitempty"`
	Jobs        []imageJob        `json:"jobs,omitempty"`
	Registry    []imageOwner      `json:"registry,omitempty"`
	Protect     map[string]int    `json:"protect,omitempty"`
	DamagedDirs map[string]string `json:"damagedDirs,omitempty"`
	Problems    []imageProblem    `json:"problems,omitempty"`
	Damaged     []imageDamaged    `json:"damaged,omitempty"`
	DamagedSps  map[string]imgErr `json:"damagedSavepoints,omitempty"`
}

type imageEntry struct {
	Job        string    `json:"job"`
	ID         uint64    `json:"id"`
	Manifest   []byte    `json:"manifest"`
	Owner      string    `json:"owner"`
	AdoptedAt  time.Time `json:"adoptedAt,omitzero"`
	Pinned     bool      `json:"pinned,omitempty"`
	Discarding bool      `json:"discarding,omitempty"`
}

type imageSavepoint struct {
	ID       string `json:"id"`
	Manifest []byte `json:"manifest"`
}

type imageRef struct {
	Job string `json:"job,omitempty"`
	ID  uint64 `json:"id,omitempty"`
}

type imageInflight struct {
	ID         uint64            `json:"id"`
	Started    time.Time         `json:"started"`
	Handles    []*backend.Handle `json:"handles,omitempty"`
	Completing bool              `json:"completing,omitempty"`
	Extra      []*backend.Handle `json:"extra,omitempty"`
	// Tokens are the fencing tokens Handles were reported under (version
	// 2).
	Tokens []imageToken `json:"tokens,omitempty"`
}

type imageToken struct {
	Task  backend.TaskID `json:"task"`
	Token uint64         `json:"token"`
}

type imageJob struct {
	Name         string            `json:"name"`
	Inflight     []imageInflight   `json:"inflight,omitempty"`
	History      []Record          `json:"history,omitempty"`
	NoClaim      map[string]string `json:"noClaim,omitempty"`
	NoClaimFrom  string            `json:"noClaimFrom,omitempty"`
	Base         imageRef          `json:"base,omitzero"`
	PrevBase     imageRef          `json:"prevBase,omitzero"`
	BaseRestored bool              `json:"baseRestored,omitempty"`
	Degraded     bool              `json:"degraded,omitempty"`
	Damage       *imgErr           `json:"damage,omitempty"`
}

type imageOwner struct {
	Owner   string            `json:"owner"`
	Objects []refcount.Object `json:"objects"`
}

type imageProblem struct {
	What   string `json:"what"`
	Object string `json:"object"`
	Job    string `json:"job,omitempty"`
	Err    imgErr `json:"err"`
	Effect string `json:"effect,omitempty"`
}

type imageDamaged struct {
	Job      string `json:"job"`
	ID       uint64 `json:"id"`
	Manifest string `json:"manifest"`
	Err      imgErr `json:"err"`
}

// imgErr is an error in an image: its text, and the sentinel it wraps
// that callers test for (one of imgSentinels, or none).
type imgErr struct {
	Text string `json:"text"`
	Is   string `json:"is,omitempty"`
}

// imgSentinels are the sentinels an imgErr may wrap, the most specific
// first (catalog's ErrCorrupt wraps backend's).
var imgSentinels = []ErrorClass{
	{Name: "catalog-corrupt", Err: ErrCorrupt},
	{Name: "corrupt", Err: backend.ErrCorrupt},
	{Name: "incompatible", Err: backend.ErrIncompatible},
}

func toImgErr(err error) imgErr {
	if err == nil {
		return imgErr{}
	}
	return imgErr{Text: err.Error(), Is: ClassName(err, imgSentinels)}
}

func (e imgErr) err() error {
	if e.Text == "" && e.Is == "" {
		return nil
	}
	se, _ := ErrorOfClass(e.Text, e.Is, imgSentinels)
	return se
}

func cmpRef(a, b ref) int {
	if c := strings.Compare(a.job, b.job); c != 0 {
		return c
	}
	return cmpUint(a.id, b.id)
}

// snapshot encodes the machine's state as an image. The same state always
// encodes to the same bytes.
func (m *machine) snapshot() ([]byte, error) {
	version := imageVersion1
	img := image{Loaded: m.loaded, Protect: maps.Clone(m.guard.protect), DamagedDirs: maps.Clone(m.guard.dirs)}
	for _, r := range slices.SortedFunc(maps.Keys(m.entries), cmpRef) {
		e := m.entries[r]
		img.Entries = append(img.Entries, imageEntry{Job: r.job, ID: r.id, Manifest: e.enc, Owner: e.owner,
			AdoptedAt: e.adoptedAt, Pinned: e.pinned, Discarding: e.discarding})
	}
	for _, id := range slices.Sorted(maps.Keys(m.savepoints)) {
		img.Savepoints = append(img.Savepoints, imageSavepoint{ID: id, Manifest: m.savepoints[id].enc})
	}
	img.SpInflight = slices.Sorted(maps.Keys(m.spInflight))
	for _, name := range slices.Sorted(maps.Keys(m.jobs)) {
		j := m.jobs[name]
		ij := imageJob{Name: name, History: j.history, NoClaim: j.noClaim, NoClaimFrom: j.noClaimFrom,
			Base: imageRef{j.base.job, j.base.id}, PrevBase: imageRef{j.prevBase.job, j.prevBase.id},
			BaseRestored: j.baseRestored, Degraded: j.degraded}
		if j.damage != nil {
			e := toImgErr(j.damage)
			ij.Damage = &e
		}
		for _, id := range slices.Sorted(maps.Keys(j.inflight)) {
			inf := j.inflight[id]
			ii := imageInflight{ID: id, Started: inf.started, Handles: inf.handles, Completing: inf.completing, Extra: inf.extra}
			for _, h := range inf.handles {
				if tok := inf.tokens[h.Task]; tok != 0 {
					ii.Tokens = append(ii.Tokens, imageToken{Task: h.Task, Token: tok})
					version = imageVersion
				}
			}
			ij.Inflight = append(ij.Inflight, ii)
		}
		img.Jobs = append(img.Jobs, ij)
	}
	for _, owner := range m.reg.Owners() {
		img.Registry = append(img.Registry, imageOwner{Owner: owner, Objects: m.reg.Objects(owner)})
	}
	for _, p := range m.problems {
		img.Problems = append(img.Problems, imageProblem{What: p.What, Object: p.Object, Job: p.Job, Err: toImgErr(p.Err), Effect: p.Effect})
	}
	for _, r := range slices.SortedFunc(maps.Keys(m.damaged), cmpRef) {
		d := m.damaged[r]
		img.Damaged = append(img.Damaged, imageDamaged{Job: d.Job, ID: d.ID, Manifest: d.Manifest, Err: toImgErr(d.Err)})
	}
	if len(m.damagedSavepoints) > 0 {
		img.DamagedSps = map[string]imgErr{}
		for id, err := range m.damagedSavepoints {
			img.DamagedSps[id] = toImgErr(err)
		}
	}
	img.Version = version
	payload, err := json.Marshal(img)
	if err != nil {
		return nil, fmt.Errorf("catalog: encode machine image: %w", err)
	}
	return frame.Encode(imageMagic, uint16(version), payload), nil
}

// restoreMachine reads a machine back from an image. Damage is an error
// wrapping ErrCorrupt (backend.ErrIncompatible for a newer version); a
// manifest in it is checked as Open checks those it reads.
func restoreMachine(data []byte, retain, maxHistory int) (machine, error) {
	m := newMachine(retain, maxHistory)
	version, payload, err := frame.Decode(imageMagic, data)
	if err != nil {
		return m, fmt.Errorf("%w: machine image: %v", ErrCorrupt, err)
	}
	if version != imageVersion1 && version != imageVersion {
		return m, fmt.Errorf("%w: machine image version %d (this build reads %d to %d)", backend.ErrIncompatible, version, imageVersion1, imageVersion)
	}
	var img image
	if err := strictUnmarshal(payload, &img); err != nil {
		return m, fmt.Errorf("%w: machine image: %v", ErrCorrupt, err)
	}
	if img.Version != int(version) {
		return m, fmt.Errorf("%w: machine image frame version %d but payload version %d", ErrCorrupt, version, img.Version)
	}
	bad := func(format string, args ...any) (machine, error) {
		return newMachine(retain, maxHistory), fmt.Errorf("%w: machine image: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	m.loaded = img.Loaded
	for _, ie := range img.Entries {
		mf, err := DecodeManifest(ie.Manifest)
		if err == nil {
			err = checkManifestPlace(objName{kind: objCheckpointManifest, job: ie.Job, id: ie.ID}, mf)
		}
		if err != nil {
			return bad("checkpoint %s: %v", CheckpointDir(ie.Job, ie.ID), err)
		}
		r := ref{ie.Job, ie.ID}
		if _, dup := m.entries[r]; dup {
			return bad("checkpoint %s twice", r)
		}
		m.entries[r] = &entry{ref: r, m: mf, enc: ie.Manifest, owner: ie.Owner, adoptedAt: ie.AdoptedAt,
			pinned: ie.Pinned, discarding: ie.Discarding}
	}
	for _, is := range img.Savepoints {
		mf, err := DecodeManifest(is.Manifest)
		if err == nil {
			err = checkManifestPlace(objName{kind: objSavepointManifest, sp: is.ID}, mf)
		}
		if err != nil {
			return bad("savepoint %s: %v", is.ID, err)
		}
		m.savepoints[is.ID] = &spEntry{m: mf, enc: is.Manifest}
	}
	for _, id := range img.SpInflight {
		m.spInflight[id] = true
	}
	for _, ij := range img.Jobs {
		if err := ValidateJob(ij.Name); err != nil {
			return bad("%v", err)
		}
		if _, dup := m.jobs[ij.Name]; dup {
			return bad("job %s twice", ij.Name)
		}
		j := m.job(ij.Name)
		j.history, j.noClaim, j.noClaimFrom = ij.History, ij.NoClaim, ij.NoClaimFrom
		j.base, j.prevBase = ref{ij.Base.Job, ij.Base.ID}, ref{ij.PrevBase.Job, ij.PrevBase.ID}
		j.baseRestored, j.degraded = ij.BaseRestored, ij.Degraded
		if ij.Damage != nil {
			j.damage = ij.Damage.err()
		}
		for _, ii := range ij.Inflight {
			for _, h := range append(slices.Clone(ii.Handles), ii.Extra...) {
				if h == nil {
					return bad("checkpoint %s in flight: a null handle", CheckpointDir(ij.Name, ii.ID))
				}
				if err := h.Validate(); err != nil {
					return bad("checkpoint %s in flight: %v", CheckpointDir(ij.Name, ii.ID), err)
				}
			}
			inf := &inflight{started: ii.Started, handles: ii.Handles, completing: ii.Completing, extra: ii.Extra}
			for _, t := range ii.Tokens {
				if version == imageVersion1 {
					return bad("checkpoint %s in flight: fencing tokens in an image of version 1", CheckpointDir(ij.Name, ii.ID))
				}
				if !slices.ContainsFunc(ii.Handles, func(h *backend.Handle) bool { return h.Task == t.Task }) || t.Token == 0 {
					return bad("checkpoint %s in flight: fencing token %d of task %s, which has no handle", CheckpointDir(ij.Name, ii.ID), t.Token, t.Task)
				}
				if inf.tokens == nil {
					inf.tokens = map[backend.TaskID]uint64{}
				}
				inf.tokens[t.Task] = t.Token
			}
			j.inflight[ii.ID] = inf
		}
	}
	owners := make(map[string][]refcount.Object, len(img.Registry))
	for _, o := range img.Registry {
		owners[o.Owner] = o.Objects
	}
	reg, refused := refcount.Rebuild(owners)
	if len(refused) > 0 {
		owner := slices.Sorted(maps.Keys(refused))[0]
		return bad("registry owner %q: %v", owner, refused[owner])
	}
	m.reg = reg
	for p, n := range img.Protect {
		if n <= 0 {
			return bad("protection %d of %s", n, p)
		}
		m.guard.protect[p] = n
	}
	maps.Copy(m.guard.dirs, img.DamagedDirs)
	for _, p := range img.Problems {
		m.problems = append(m.problems, Problem{What: p.What, Object: p.Object, Job: p.Job, Err: p.Err.err(), Effect: p.Effect})
	}
	for _, d := range img.Damaged {
		m.damaged[ref{d.Job, d.ID}] = DamagedCheckpoint{Job: d.Job, ID: d.ID, Manifest: d.Manifest, Err: d.Err.err()}
	}
	for id, e := range img.DamagedSps {
		m.damagedSavepoints[id] = e.err()
	}
	return m, nil
}
