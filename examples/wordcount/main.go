package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

func main() {
	socket := flag.String("socket", "./stated-data/stated.sock", "the daemon's Unix socket")
	restore := flag.Bool("restore", false, "restore from the job's last completed checkpoint")
	every := flag.Int("every", 1000, "checkpoint every this many lines")
	flag.Parse()
	if err := run(*socket, *restore, *every); err != nil {
		log.Fatal(err)
	}
}

func run(socket string, restore bool, every int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(socket, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()

	spec := client.OpenSpec{
		Task: backend.TaskID{Job: "wordcount", Operator: "count", Subtask: 0},
		// One subtask of one: it owns every key group.
		Parallelism: 1,
		Backend:     backend.KindLSM,
		States: []backend.StateDescriptor{
			{Name: "count", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
			{Name: "last-line", Kind: backend.KindValue},
		},
		Replace: true,
	}
	if restore {
		spec.Restore = &client.Restore{Latest: true}
	}
	in, err := c.Open(ctx, spec)
	if err != nil {
		return err
	}
	defer in.Close(ctx)
	if id := in.RestoredCheckpoint(); id > 0 {
		fmt.Printf("restored checkpoint %d\n", id)
	}

	// Writes return futures at once; the client sends them in batches.
	// Reading a count right after the adds is consistent: operations of an
	// instance complete in the order they were issued.
	seen := map[string]bool{}
	var order []string
	// Checkpoint ids must grow across runs of the job: start past both the
	// clock and the restored checkpoint (two runs may start in one second).
	checkpoint := max(uint64(time.Now().Unix()), in.RestoredCheckpoint())
	sc := bufio.NewScanner(os.Stdin)
	for line := 1; sc.Scan(); line++ {
		for _, w := range strings.Fields(sc.Text()) {
			key := []byte(w)
			in.AggregateAdd("count", key, nil, backend.Int64(1))
			in.Put("last-line", key, nil, []byte(fmt.Sprint(line)))
			if !seen[w] {
				seen[w] = true
				order = append(order, w)
			}
		}
		if line%every == 0 {
			checkpoint++
			if err := takeCheckpoint(ctx, c, in, checkpoint); err != nil {
				return err
			}
		}
		if err := in.Err(); err != nil { // a failed fire-and-forget write
			return err
		}
	}
	checkpoint++
	if err := takeCheckpoint(ctx, c, in, checkpoint); err != nil {
		return err
	}
	// Many reads in flight at once, then wait for each.
	counts := make([]client.Future[client.Aggregate], len(order))
	for i, w := range order {
		counts[i] = in.AggregateGet("count", []byte(w), nil)
	}
	for i, w := range order {
		a, err := counts[i].Wait(ctx)
		if err != nil {
			return err
		}
		last, err := in.Get("last-line", []byte(w), nil).Wait(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%d\t(last seen on line %s)\n", w, a.Value.Int, last.Data)
	}
	return nil
}

// takeCheckpoint snapshots the task (after every write issued so far) and,
// as the job's coordinator, completes the checkpoint.
func takeCheckpoint(ctx context.Context, c *client.Client, in *client.Instance, id uint64) error {
	if _, err := in.Snapshot(ctx, id, false); err != nil {
		return err
	}
	info, err := c.CompleteCheckpoint(ctx, in.Task().Job, id)
	if err != nil {
		return err
	}
	fmt.Printf("checkpoint %d completed: %d bytes uploaded, %d bytes in all\n", id, info.GetCheckpointedSize(), info.GetFullSize())
	return nil
}
