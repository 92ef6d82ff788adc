package memstore_test

import (
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
)

func TestAcceptance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(testing.TB) tiered.Store { return memstore.New() }})
}
