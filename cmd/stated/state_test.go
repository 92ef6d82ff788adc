package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runState runs "stated state <args>" against the checkpoint store root
// and returns stdout.
func runState(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := newStateCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under rootCmd
	full := append([]string{}, args[:2]...)
	if root != "" {
		full = append(full, "--checkpoint-store", root)
	}
	full = append(full, "--temp-dir", t.TempDir())
	cmd.SetArgs(append(full, args[2:]...))
	err := cmd.Execute()
	return out.String(), err
}

// TestStateCommands runs ls, get, scan and export on real checkpoints and
// a savepoint of the file backend (realCheckpoints: 200 keys {i, id} per
// checkpoint id, value 50 bytes of i, key group i%128).
func TestStateCommands(t *testing.T) {
	root, _ := realCheckpoints(t, 2)

	out, err := runState(t, root, "ls", "j/latest")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"checkpoint 2 of job j", "op/0", "value", " 400 ", "128 key groups hold entries"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls j/latest: no %q in\n%s", want, out)
		}
	}
	out, err = runState(t, root, "ls", "j/latest", "--top", "-1", "--key-groups", "5-7")
	if err != nil || !strings.Contains(out, "3 key groups hold entries:") ||
		len(regexp.MustCompile(`(?m)^op +[567] +4 `).FindAllString(out, -1)) != 3 {
		t.Errorf("ls --top -1 --key-groups 5-7: %v\n%s", err, out)
	}
	out, err = runState(t, root, "ls", "j/1", "--top", "0")
	if err != nil || !strings.Contains(out, "checkpoint 1 of job j") || !strings.Contains(out, " 200 ") {
		t.Errorf("ls j/1: %v\n%s", err, out)
	}

	out, err = runState(t, root, "get", "j/chk-2", "--state", "v", "--key-hex", "0502")
	if want := "0x" + strings.Repeat("05", 50); err != nil || !strings.Contains(out, want) || strings.Count(out, "\n") != 2 {
		t.Errorf("get: %v, want one entry %s:\n%s", err, want, out)
	}
	if _, err = runState(t, root, "get", "j/chk-2", "--key-hex", "ff02"); err == nil || !strings.Contains(err.Error(), "no entry") {
		t.Errorf("get of a missing key: %v", err)
	}

	out, err = runState(t, root, "scan", "j/latest", "--key-groups", "3-4", "--show", "hex")
	// Key groups 3 and 4 hold i = 3, 4, 131, 132, for ids 1 and 2.
	if err != nil || strings.Count(out, "\n") != 1+8 || !strings.Contains(out, "8302") {
		t.Errorf("scan --key-groups 3-4: %v\n%s", err, out)
	}
	out, err = runState(t, root, "scan", "j/latest", "--prefix-hex", "07", "--limit", "1")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Errorf("scan --limit 1: %v\n%s", err, out)
	}

	exp := filepath.Join(t.TempDir(), "sp.jsonl")
	if _, err := runState(t, root, "export", "savepoints/sp1", "--bytes", "hex", "-o", exp); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		key, _ := hex.DecodeString(row["key"].(string))
		val, _ := hex.DecodeString(row["value"].(string))
		if len(key) != 2 || row["state"] != "v" || row["kind"] != "value" || row["operator"] != "op" ||
			int(row["keyGroup"].(float64)) != int(key[0])%128 || !bytes.Equal(val, bytes.Repeat(key[:1], 50)) {
			t.Fatalf("export line %s is not the model's", sc.Text())
		}
		seen[string(key)] = true
	}
	if len(seen) != 400 {
		t.Errorf("export: %d distinct keys, want 400", len(seen))
	}
	if _, err := runState(t, root, "export", "j/latest", "--bytes", "text"); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("export --bytes text of binary keys: %v", err)
	}
	// A local checkpoint directory, as verify reads it.
	if out, err := runState(t, "", "ls", filepath.Join(root, "j", "chk-2")); err != nil || !strings.Contains(out, " 400 ") {
		t.Errorf("ls of a local directory: %v\n%s", err, out)
	}
}

// TestStateBadInput: an unknown job, a checkpoint that does not exist, bad
// flags and a damaged file are errors that say what is wrong.
func TestStateBadInput(t *testing.T) {
	root, m := realCheckpoints(t, 2)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "nojob/latest"}, "job nojob has no retained checkpoint"},
		{[]string{"ls", "j/chk-9"}, "j/chk-9/_metadata"},
		{[]string{"ls", "j/9"}, "j/chk-9/_metadata"},
		{[]string{"ls", "savepoints/nope"}, "savepoints/nope/_metadata"},
		{[]string{"scan", "j/latest", "--key-groups", "9-3"}, "--key-groups"},
		{[]string{"get", "j/latest"}, "--key"},
		{[]string{"export", "j/latest", "--bytes", "utf16"}, "--bytes"},
	} {
		if _, err := runState(t, root, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %q", c.args, err, c.want)
		}
	}
	f := m.Tasks[0].Files[0].Path
	fp := filepath.Join(root, filepath.FromSlash(f))
	data, err := os.ReadFile(fp)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 1
	if err := os.WriteFile(fp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runState(t, root, "export", "j/latest")
	if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), "corrupt") || out != "" {
		t.Errorf("export of a damaged checkpoint: %v, output %q; want an error naming %s and nothing written", err, out, f)
	}
}

// TestExportJSONEncoding: the hand-written JSON of export reads back as
// encoding/json reads it, for text that needs escapes and for the floats
// JSON has no number for.
func TestExportJSONEncoding(t *testing.T) {
	for _, s := range []string{"", "plain-name.1", `q"uote`, "back\\slash", "tab\tnl\n", "<html>&", "ünï €", "\x7f\x01"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("appendJSONString(%q) reads back as %q, %v", s, got, err)
		}
	}
	enc, err := bytesEncoder("text")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc(nil, []byte{0xff}); err == nil {
		t.Error("text encoding of a non-UTF-8 byte: no error")
	}
	for f, want := range map[float64]string{0.5: "0.5", -3: "-3", 1e300: "1e+300", math.NaN(): `"NaN"`, math.Inf(-1): `"-Inf"`} {
		if got := string(appendJSONFloat(nil, f)); got != want {
			t.Errorf("appendJSONFloat(%v) = %s, want %s", f, got, want)
		}
	}
}
