package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

const keys = 50

var states = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "t", Kind: backend.KindTimers},
}

func main() {
	if len(os.Args) != 5 || (os.Args[1] != "write" && os.Args[1] != "read" && os.Args[1] != "bench") {
		fmt.Fprintln(os.Stderr, "usage: xcheck write|read <socket> <job> <writer> | xcheck bench <socket> <job> <keys>")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := run
	if os.Args[1] == "bench" {
		run = bench
	}
	if err := run(ctx, os.Args[1], os.Args[2], os.Args[3], os.Args[4]); err != nil {
		fmt.Fprintln(os.Stderr, "xcheck:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode, sock, job, writer string) error {
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	spec := client.OpenSpec{Task: backend.TaskID{Job: job, Operator: "op"}, Parallelism: 1, Backend: backend.KindFile,
		States: states, Replace: true, CheckKeyGroups: true}
	if mode == "read" {
		spec.Restore = &client.Restore{Latest: true}
	}
	in, err := c.Open(ctx, spec)
	if err != nil {
		return err
	}
	defer in.Close(ctx)
	if mode == "write" {
		return write(ctx, c, in, job, writer)
	}
	return check(ctx, in, writer)
}

func write(ctx context.Context, c *client.Client, in *client.Instance, job, writer string) error {
	for i := range keys {
		k := []byte("x" + strconv.Itoa(i))
		in.Put("v", k, nil, []byte(writer+"-"+strconv.Itoa(i)))
		in.ListAppend("l", k, nil, []byte(writer), []byte(strconv.Itoa(i)))
		in.MapPut("m", k, nil, []byte("u"), []byte(writer))
		in.AggregateAdd("sum", k, nil, backend.Number{Type: backend.NumInt64, Int: int64(i)})
		in.AggregateAdd("sum", k, nil, backend.Number{Type: backend.NumInt64, Int: 1})
		in.RegisterTimer("t", k, nil, int64(1000+i))
	}
	in.SetOperatorList("ops", backend.OperatorSplit, []byte(writer))
	if _, err := in.Snapshot(ctx, 1, false); err != nil {
		return err
	}
	if err := in.Err(); err != nil {
		return err
	}
	_, err := c.CompleteCheckpoint(ctx, job, 1)
	return err
}

func check(ctx context.Context, in *client.Instance, writer string) error {
	for i := range keys {
		k := []byte("x" + strconv.Itoa(i))
		v, err := in.Get("v", k, nil).Wait(ctx)
		if err != nil {
			return err
		}
		if want := writer + "-" + strconv.Itoa(i); !v.Found || string(v.Data) != want {
			return fmt.Errorf("v[%s] = %q (found %v), want %q", k, v.Data, v.Found, want)
		}
		l, err := in.ListGet("l", k, nil).Wait(ctx)
		if err != nil {
			return err
		}
		if len(l) != 2 || string(l[0]) != writer || string(l[1]) != strconv.Itoa(i) {
			return fmt.Errorf("l[%s] = %q", k, l)
		}
		m, err := in.MapGet("m", k, nil, []byte("u")).Wait(ctx)
		if err != nil {
			return err
		}
		if string(m.Data) != writer {
			return fmt.Errorf("m[%s][u] = %q", k, m.Data)
		}
		a, err := in.AggregateGet("sum", k, nil).Wait(ctx)
		if err != nil {
			return err
		}
		if a.Value.Int != int64(i+1) {
			return fmt.Errorf("sum[%s] = %d, want %d", k, a.Value.Int, i+1)
		}
	}
	timers, err := in.PollTimers("t", 1000+keys, 0).Wait(ctx)
	if err != nil {
		return err
	}
	var ts []int64
	for _, t := range timers {
		ts = append(ts, t.Timestamp)
	}
	if len(ts) != keys || !slices.IsSorted(ts) || ts[0] != 1000 {
		return fmt.Errorf("timers %v", ts)
	}
	ops, err := in.GetOperatorList("ops").Wait(ctx)
	if err != nil {
		return err
	}
	if len(ops.Elements) != 1 || string(ops.Elements[0]) != writer {
		return fmt.Errorf("operator list ops = %q", ops.Elements)
	}
	return nil
}

// bench is the Node script's --bench, through the Go client: puts of keys
// "key-<i>" with 100-byte values, then gets of them, one instance on the
// file backend, batches of 1000 operations, 8 in flight.
func bench(ctx context.Context, _, sock, job, keys string) error {
	n, err := strconv.Atoi(keys)
	if err != nil {
		return err
	}
	const batch = 1000
	c, err := client.Dial(sock, client.Options{MaxBatchOps: batch, MaxInFlight: 8, FlushDelay: time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: job, Operator: "op"}, Parallelism: 1, Backend: backend.KindFile,
		States: states[:1], Replace: true, CheckKeyGroups: true})
	if err != nil {
		return err
	}
	defer in.Close(ctx)
	key := make([][]byte, n)
	for i := range key {
		key[i] = []byte("key-" + strconv.Itoa(i))
	}
	val := make([]byte, 100)
	var rate [2]float64
	for op := range 2 {
		t0 := time.Now()
		for _, k := range key {
			if op == 0 {
				in.Put("v", k, nil, val)
			} else {
				in.Get("v", k, nil)
			}
		}
		if err := in.Sync(ctx); err != nil {
			return err
		}
		if err := in.Err(); err != nil {
			return err
		}
		rate[op] = float64(n) / time.Since(t0).Seconds()
	}
	fmt.Printf("put %.0fk ops/s, get %.0fk ops/s\n", rate[0]/1000, rate[1]/1000)
	return nil
}
