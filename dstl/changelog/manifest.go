package changelog

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/internal/zstdblock"
)

// manifestCodec compresses manifest payloads (version manifestCompressed
// and later). Its bound is maxManifestSize, which a restore reads at most.
var manifestCodec = zstdblock.New(zstdblock.Options{Level: zstd.SpeedDefault, EncoderConcurrency: 1, MaxRawSize: maxManifestSize})

// encodeManifest frames mf at manifestVersion, which it sets.
func encodeManifest(mf *manifest) ([]byte, error) {
	mf.Version = manifestVersion
	payload, err := json.Marshal(mf)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	block, err := manifestCodec.Append(nil, payload)
	if err != nil {
		return nil, fmt.Errorf("compress manifest: %w", err)
	}
	return frame.Encode(manifestMagic, manifestVersion, block), nil
}

// decodeManifest reads a framed manifest of any version this build reads:
// ErrIncompatible for a newer one, ErrCorrupt for damage.
func decodeManifest(data []byte) (*manifest, error) {
	version, payload, err := frame.Decode(manifestMagic, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", backend.ErrCorrupt, err)
	}
	if version < 1 || version > manifestVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads 1..%d)", backend.ErrIncompatible, version, manifestVersion)
	}
	if version >= manifestCompressed {
		if payload, err = manifestCodec.Decode(payload, nil); err != nil {
			return nil, fmt.Errorf("%w: payload: %v", backend.ErrCorrupt, err)
		}
	}
	var mf manifest
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mf); err != nil || mf.Base == nil || mf.Version != int(version) {
		return nil, fmt.Errorf("%w: bad payload (%v)", backend.ErrCorrupt, err)
	}
	return &mf, nil
}
