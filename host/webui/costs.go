package webui

// Costs is the page's object-store requests table: what each store was
// asked over the last hour (or since the daemon started, if less), by
// request kind, and the month's bill it comes to at the daemon's prices
// (--s3-prices).
type Costs struct {
	// WindowSeconds is the time the figures cover.
	WindowSeconds float64 `json:"windowSeconds"`
	// Checkpoints completed in the window.
	Checkpoints uint64 `json:"checkpoints"`
	// Prices are the prices the estimates use ("put=0.005,...").
	Prices string       `json:"prices"`
	Stores []StoreCosts `json:"stores"`
	// DollarsPerMonth is every store's estimate together.
	DollarsPerMonth float64 `json:"dollarsPerMonth"`
}

// StoreCosts is one store's part of the table.
type StoreCosts struct {
	// Store is "checkpoint" or "changelog" (a --changelog-store of its
	// own).
	Store string `json:"store"`
	// Measured: the requests were counted on the wire (S3, every attempt);
	// otherwise they are the store's calls, one request each.
	Measured bool        `json:"measured"`
	Kinds    []KindCosts `json:"kinds"`
	// Throttled answers (SlowDown, 429) in the window, each retried.
	Throttled uint64 `json:"throttled"`
	// StateBytes is what the store holds for the catalog (0: unknown),
	// and StorageDollarsPerMonth its price.
	StateBytes             int64   `json:"stateBytes"`
	StorageDollarsPerMonth float64 `json:"storageDollarsPerMonth"`
	// DollarsPerMonth is requests and storage.
	DollarsPerMonth float64 `json:"dollarsPerMonth"`
}

// KindCosts is one kind of request of a store.
type KindCosts struct {
	Kind          string  `json:"kind"` // put, get, list, delete, head
	Requests      uint64  `json:"requests"`
	PerSecond     float64 `json:"perSecond"`
	PerCheckpoint float64 `json:"perCheckpoint"` // 0: no checkpoint completed
	// PerHourPerGiB is the hourly rate per GiB of state (0: no state).
	PerHourPerGiB   float64 `json:"perHourPerGiB"`
	DollarsPerMonth float64 `json:"dollarsPerMonth"`
}
