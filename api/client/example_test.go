package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// A task counts events per key with futures, then checkpoints. It restores
// from the job's latest checkpoint when there is one, so it runs the same
// on a fresh daemon and after a restart. (Needs a running daemon: stated
// serve.)
func Example() {
	if err := countClicks(context.Background(), "./stated-data/stated.sock"); err != nil {
		log.Fatal(err)
	}
}

func countClicks(ctx context.Context, socket string) (err error) {
	c, err := client.Dial(socket, client.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()

	// Restore only if the job has a retained checkpoint: on a fresh daemon
	// a restore from the latest one fails with codes.NotFound. The next
	// checkpoint id is above every id the job has used.
	history, err := c.ListCheckpoints(ctx, "clicks")
	if err != nil {
		return err
	}
	var restore *client.Restore
	next := uint64(1)
	for _, cp := range history {
		if cp.GetRetained() {
			restore = &client.Restore{Latest: true}
		}
		next = max(next, cp.GetCheckpointId()+1)
	}

	in, err := c.Open(ctx, client.OpenSpec{
		Task:        backend.TaskID{Job: "clicks", Operator: "count", Subtask: 0},
		Parallelism: 1,
		Backend:     backend.KindLSM,
		States:      []backend.StateDescriptor{{Name: "n", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64}},
		Restore:     restore,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.Close(ctx)) }()

	for _, user := range []string{"ann", "bob", "ann"} {
		in.AggregateAdd("n", []byte(user), nil, backend.Int64(1)) // returns at once
	}
	n, err := in.AggregateGet("n", []byte("ann"), nil).Wait(ctx) // sends the batch, waits
	if err != nil {
		return err
	}
	// Fire-and-forget operations report failures through Err.
	if err := in.Err(); err != nil {
		return err
	}
	fmt.Println("ann:", n.Value.Int)
	if _, err := in.Snapshot(ctx, next, false); err != nil {
		return err
	}
	_, err = c.CompleteCheckpoint(ctx, "clicks", next)
	return err
}
