package file_test

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/file"
)

func TestConformance(t *testing.T) {
	for _, comp := range []string{"", "zstd"} {
		t.Run("compression="+comp, func(t *testing.T) {
			backendtest.Run(t, backendtest.Harness{Kind: backend.KindFile, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
				return file.Open(o, file.Options{Compression: comp, TempDir: t.TempDir()})
			}})
		})
	}
}
