package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// A task counts events per key with futures, then checkpoints. (Needs a
// running daemon: stated serve.)
func Example() {
	ctx := context.Background()
	c, err := client.Dial("./stated-data/stated.sock", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	in, err := c.Open(ctx, client.OpenSpec{
		Task:        backend.TaskID{Job: "clicks", Operator: "count", Subtask: 0},
		Parallelism: 1,
		Backend:     backend.KindLSM,
		States:      []backend.StateDescriptor{{Name: "n", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64}},
		Restore:     &client.Restore{Latest: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close(ctx)
	for _, user := range []string{"ann", "bob", "ann"} {
		in.AggregateAdd("n", []byte(user), nil, backend.Int64(1)) // returns at once
	}
	n, err := in.AggregateGet("n", []byte("ann"), nil).Wait(ctx) // sends the batch, waits
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ann:", n.Value.Int)
	if _, err := in.Snapshot(ctx, 1, false); err != nil {
		log.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctx, "clicks", 1); err != nil {
		log.Fatal(err)
	}
}
