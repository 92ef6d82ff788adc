package io.stated.flink.tools;

import com.google.gson.Gson;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.state.VoidNamespace;

/**
 * {@code ls} and {@code export} of a Flink savepoint or retained full checkpoint, in the output of
 * {@code stated state ls} and the JSON lines of {@code stated state export} (which {@code stated
 * savepoint bootstrap --from} reads). See docs/flink.md, "Reading a Flink savepoint".
 */
public final class FlinkState {
  private static final String USAGE =
      String.join(
          "\n",
          "usage: ls [--operator NAME] [--top N] <savepoint-dir>",
          "       export [--operator NAME] [--bytes base64|hex|text] [--values decoded|raw]"
              + " [-o FILE] <savepoint-dir>",
          "",
          "<savepoint-dir> is a Flink savepoint or retained checkpoint directory (or its"
              + " _metadata), a path or a Flink file system URI. The job's classes (its key, value"
              + " and namespace types) must be on the classpath for their values to decode; a state"
              + " whose serializer cannot be restored is exported as raw bytes.");

  private FlinkState() {}

  public static void main(String[] args) {
    try {
      System.exit(run(args, System.out, System.err));
    } catch (IOException | RuntimeException e) {
      System.err.println("error: " + e.getMessage());
      System.exit(1);
    }
  }

  /** Runs a command; returns the exit code. Errors of the savepoint are thrown. */
  public static int run(String[] args, PrintStream out, PrintStream err) throws IOException {
    if (args.length == 0) {
      err.println(USAGE);
      return 2;
    }
    String cmd = args[0];
    Map<String, String> flags = new LinkedHashMap<>();
    List<String> pos = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      String a = args[i];
      if (a.startsWith("-") && a.length() > 1) {
        if (i + 1 >= args.length) {
          throw new IllegalArgumentException(a + " needs a value\n" + USAGE);
        }
        flags.put(a, args[++i]);
      } else {
        pos.add(a);
      }
    }
    if (pos.size() != 1) {
      throw new IllegalArgumentException("give one savepoint directory\n" + USAGE);
    }
    String operator = flags.remove("--operator");
    switch (cmd) {
      case "ls" -> {
        int top = Integer.parseInt(flags.getOrDefault("--top", "10"));
        flags.remove("--top");
        rejectUnknown(flags);
        ls(SavepointReader.open(pos.get(0)), operator, top, out);
      }
      case "export" -> {
        String bytes = flags.getOrDefault("--bytes", "base64");
        String values = flags.getOrDefault("--values", "decoded");
        String output = flags.getOrDefault("-o", flags.getOrDefault("--output", "-"));
        flags.remove("--bytes");
        flags.remove("--values");
        flags.remove("-o");
        flags.remove("--output");
        rejectUnknown(flags);
        if (!values.equals("decoded") && !values.equals("raw")) {
          throw new IllegalArgumentException("--values " + values + ": give decoded or raw");
        }
        Exporter ex = new Exporter(bytes, values.equals("raw"));
        SavepointReader r = SavepointReader.open(pos.get(0));
        long n;
        if (output.equals("-")) {
          n = ex.export(r, operator, out);
          out.flush();
        } else {
          Path p = Path.of(output);
          try (OutputStream os = Files.newOutputStream(p)) {
            n = ex.export(r, operator, os);
          } catch (IOException | RuntimeException e) {
            // A partial export must not pass for a whole one.
            Files.deleteIfExists(p);
            throw e;
          }
        }
        err.println("exported " + n + " entries of " + r.pointer());
      }
      default -> {
        err.println("unknown command " + cmd + "\n" + USAGE);
        return 2;
      }
    }
    return 0;
  }

  private static void rejectUnknown(Map<String, String> flags) {
    if (!flags.isEmpty()) {
      throw new IllegalArgumentException("unknown flag " + flags.keySet() + "\n" + USAGE);
    }
  }

  /** Entries and bytes of a state or key group. */
  static final class Count {
    long entries;
    long bytes;
  }

  static void ls(SavepointReader r, String operator, int top, PrintStream out) throws IOException {
    List<OperatorState> ops = r.keyedOperators();
    long files = 0;
    int tasks = 0;
    for (OperatorState op : ops) {
      if (operator == null || operator.equals(SavepointReader.operatorName(op))) {
        files += op.getStateSize();
        tasks += op.getSubtaskStates().size();
      }
    }
    out.printf(
        "%s (checkpoint %d): %d tasks, %s in files%n",
        r.pointer(), r.checkpointId(), tasks, formatBytes(files));
    List<String[]> rows = new ArrayList<>();
    rows.add(new String[] {"TASK", "KEY GROUPS", "PARALLELISM", "MAX PARALLELISM"});
    for (OperatorState op : ops) {
      String name = SavepointReader.operatorName(op);
      if (operator != null && !operator.equals(name)) {
        continue;
      }
      for (var st : new TreeMap<>(op.getSubtaskStates()).entrySet()) {
        String range =
            st.getValue().getManagedKeyedState().stream()
                .map(
                    h ->
                        h.getKeyGroupRange().getStartKeyGroup()
                            + "-"
                            + h.getKeyGroupRange().getEndKeyGroup())
                .reduce((a, b) -> a + "," + b)
                .orElse("-");
        rows.add(
            new String[] {
              name + "/" + st.getKey(),
              range,
              String.valueOf(op.getParallelism()),
              String.valueOf(op.getMaxParallelism())
            });
      }
    }
    printTable(out, rows);
    // operator -> state -> count; (operator, key group) -> count
    Map<String, Map<String, Count>> states = new TreeMap<>();
    Map<String, String> kinds = new TreeMap<>();
    Map<String, Count> groups = new TreeMap<>();
    Count total = new Count();
    r.scan(
        operator,
        e -> {
          Count s =
              states
                  .computeIfAbsent(e.operator, k -> new TreeMap<>())
                  .computeIfAbsent(e.state, k -> new Count());
          kinds.put(e.operator + "\0" + e.state, kindName(e));
          Count g = groups.computeIfAbsent(e.operator + "\0" + e.keyGroup, k -> new Count());
          // A list's elements share one stored value: its bytes count once, at its first element.
          long b = e.kind == SavepointReader.Kind.LIST && e.index > 0 ? 0 : e.storedBytes;
          for (Count c : new Count[] {s, g, total}) {
            c.entries++;
            c.bytes += b;
          }
        });
    out.println();
    rows = new ArrayList<>();
    rows.add(new String[] {"OPERATOR", "STATE", "KIND", "ENTRIES", "BYTES", "SHARE"});
    for (var op : states.entrySet()) {
      for (var st : op.getValue().entrySet()) {
        rows.add(
            new String[] {
              op.getKey(),
              st.getKey(),
              kinds.get(op.getKey() + "\0" + st.getKey()),
              String.valueOf(st.getValue().entries),
              formatBytes(st.getValue().bytes),
              share(st.getValue().bytes, total.bytes)
            });
      }
    }
    rows.add(
        new String[] {
          "total", "", "", String.valueOf(total.entries), formatBytes(total.bytes), ""
        });
    printTable(out, rows);
    if (top == 0 || groups.isEmpty()) {
      return;
    }
    java.util.Comparator<Map.Entry<String, Count>> byGroup =
        (a, b) -> {
          String[] x = a.getKey().split("\0"), y = b.getKey().split("\0");
          int c = x[0].compareTo(y[0]);
          return c != 0 ? c : Integer.compare(Integer.parseInt(x[1]), Integer.parseInt(y[1]));
        };
    List<Map.Entry<String, Count>> sorted = new ArrayList<>(groups.entrySet());
    sorted.sort(
        java.util.Comparator.<Map.Entry<String, Count>>comparingLong(g -> -g.getValue().bytes)
            .thenComparing(byGroup));
    if (top > 0) {
      out.printf("%n%d key groups hold entries; the largest:%n", groups.size());
      sorted = sorted.subList(0, Math.min(top, sorted.size()));
    } else {
      out.printf("%n%d key groups hold entries:%n", groups.size());
      sorted = new ArrayList<>(groups.entrySet());
      sorted.sort(byGroup);
    }
    rows = new ArrayList<>();
    rows.add(new String[] {"OPERATOR", "KEY GROUP", "ENTRIES", "BYTES", "SHARE"});
    for (var g : sorted) {
      String[] k = g.getKey().split("\0");
      rows.add(
          new String[] {
            k[0],
            k[1],
            String.valueOf(g.getValue().entries),
            formatBytes(g.getValue().bytes),
            share(g.getValue().bytes, total.bytes)
          });
    }
    printTable(out, rows);
  }

  /** The kind in ls: stated's kind, and Flink's own type where it differs (reducing, ...). */
  private static String kindName(SavepointReader.Entry e) {
    String k = e.kind.toString();
    if (e.kind == SavepointReader.Kind.VALUE && !"VALUE".equals(e.flinkType)) {
      k += " (" + e.flinkType.toLowerCase(Locale.ROOT) + ")";
    }
    return k;
  }

  private static String share(long part, long total) {
    return String.format(Locale.ROOT, "%.1f%%", part * 100.0 / Math.max(1, total));
  }

  /** As stated's bytesize.Format. */
  static String formatBytes(long n) {
    if (n < 1024) {
      return n + " B";
    }
    long div = 1024;
    int exp = 0;
    for (long m = n / 1024; m >= 1024; m /= 1024) {
      div *= 1024;
      exp++;
    }
    return String.format(Locale.ROOT, "%.1f %ciB", (double) n / div, "KMGTPE".charAt(exp));
  }

  /** Columns padded as Go's tabwriter with padding 2. */
  private static void printTable(PrintStream out, List<String[]> rows) {
    int cols = rows.get(0).length;
    int[] w = new int[cols];
    for (String[] r : rows) {
      for (int i = 0; i < cols; i++) {
        w[i] = Math.max(w[i], r[i].length());
      }
    }
    for (String[] r : rows) {
      StringBuilder sb = new StringBuilder();
      for (int i = 0; i < cols; i++) {
        sb.append(r[i]);
        if (i < cols - 1) {
          sb.append(" ".repeat(w[i] - r[i].length() + 2));
        }
      }
      out.println(sb.toString().stripTrailing());
    }
  }

  /** Writes entries as the JSON lines of {@code stated state export}. */
  static final class Exporter {
    private final String bytesMode;
    private final boolean raw;
    private final Gson gson = new Gson();
    private final DataOutputSerializer ser = new DataOutputSerializer(256);

    Exporter(String bytesMode, boolean raw) {
      if (!List.of("base64", "hex", "text").contains(bytesMode)) {
        throw new IllegalArgumentException("--bytes " + bytesMode + ": give base64, hex or text");
      }
      this.bytesMode = bytesMode;
      this.raw = raw;
    }

    long export(SavepointReader r, String operator, OutputStream os) throws IOException {
      BufferedOutputStream bw = new BufferedOutputStream(os, 1 << 20);
      long[] n = {0};
      StringBuilder line = new StringBuilder(256);
      r.scan(
          operator,
          e -> {
            line.setLength(0);
            line.append("{\"operator\":");
            appendJsonString(line, e.operator);
            line.append(",\"subtask\":").append(e.subtask);
            line.append(",\"state\":");
            appendJsonString(line, e.state);
            line.append(",\"kind\":");
            appendJsonString(line, e.kind.toString());
            line.append(",\"keyGroup\":").append(e.keyGroup);
            if (e.rawKey != null) {
              field(line, e, "key", e.rawKey);
              field(line, e, "namespace", new byte[0]);
            } else {
              field(line, e, "key", bytes(e.key, e.keySerializer));
              field(line, e, "namespace", bytes(e.namespace, e.namespaceSerializer));
            }
            switch (e.kind) {
              case MAP -> {
                field(
                    line,
                    e,
                    "userKey",
                    e.rawUserKey != null ? e.rawUserKey : bytes(e.userKey, e.userKeySerializer));
                field(
                    line,
                    e,
                    "value",
                    e.rawValue != null ? e.rawValue : bytes(e.value, e.valueSerializer));
              }
              case VALUE ->
                  field(
                      line,
                      e,
                      "value",
                      e.rawValue != null ? e.rawValue : bytes(e.value, e.valueSerializer));
              case LIST -> {
                field(
                    line,
                    e,
                    "value",
                    e.rawValue != null ? e.rawValue : bytes(e.value, e.valueSerializer));
                line.append(",\"index\":").append(e.index);
              }
              case TIMERS -> line.append(",\"timestamp\":").append(e.timestamp);
            }
            line.append("}\n");
            bw.write(line.toString().getBytes(StandardCharsets.UTF_8));
            n[0]++;
          });
      bw.flush();
      return n[0];
    }

    private void field(StringBuilder line, SavepointReader.Entry e, String name, byte[] b)
        throws IOException {
      line.append(",\"").append(name).append("\":");
      switch (bytesMode) {
        case "base64" -> line.append('"').append(Base64.getEncoder().encodeToString(b)).append('"');
        case "hex" -> line.append('"').append(HexFormat.of().formatHex(b)).append('"');
        default -> {
          java.nio.charset.CharsetDecoder d =
              StandardCharsets.UTF_8
                  .newDecoder()
                  .onMalformedInput(java.nio.charset.CodingErrorAction.REPORT)
                  .onUnmappableCharacter(java.nio.charset.CodingErrorAction.REPORT);
          try {
            appendJsonString(line, d.decode(java.nio.ByteBuffer.wrap(b)).toString());
          } catch (java.nio.charset.CharacterCodingException x) {
            throw new IOException(
                e.operator
                    + "/"
                    + e.subtask
                    + " state "
                    + e.state
                    + " key group "
                    + e.keyGroup
                    + ": "
                    + name
                    + " "
                    + HexFormat.of().formatHex(b)
                    + " is not UTF-8 text: export with --bytes base64 or hex");
          }
        }
      }
    }

    /** A decoded field's bytes: its text (decoded) or its serializer's bytes (raw). */
    private byte[] bytes(Object o, TypeSerializer<Object> s) throws IOException {
      if (raw && s != null && o != null) {
        ser.clear();
        s.serialize(o, ser);
        return ser.getCopyOfBuffer();
      }
      if (o instanceof VoidNamespace) {
        return new byte[0]; // the namespace of state outside windows: none
      }
      return render(o).getBytes(StandardCharsets.UTF_8);
    }

    /** Text as is, numbers and booleans as written in Java, anything else as JSON. */
    String render(Object o) {
      if (o == null) {
        return "null";
      }
      if (o instanceof String s) {
        return s;
      }
      if (o instanceof Number || o instanceof Boolean || o instanceof Character) {
        return o.toString();
      }
      try {
        return gson.toJson(o);
      } catch (RuntimeException e) {
        return o.toString(); // a class Gson cannot reflect on
      }
    }
  }

  /** Appends s as a JSON string, escaped as Go's encoding/json does (the Go export's bytes). */
  static void appendJsonString(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        case '<', '>', '&', '\u2028', '\u2029' -> sb.append(String.format("\\u%04x", (int) c));
        default -> {
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
        }
      }
    }
    sb.append('"');
  }
}
