package io.stated.flink.tools;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.stated.client.Daemon;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.AggregatingState;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A Flink job on stated with value, list, map, reducing and aggregating state and event-time timers
 * is stopped with a canonical savepoint; the tool's export equals the job's model entry for entry,
 * its ls counts match, a cut state file is refused naming the file, and the export bootstrapped
 * into a stated savepoint exports the same through {@code stated state export}.
 */
class FlinkSavepointExportTest {
  private static final int N = 600;
  private static final int KEYS = 40;
  private static final int MAX_PARALLELISM = 128;
  private static final int PARALLELISM = 2;
  private static final String TIMERS = "_timer_state/event_user-timers";
  static final AtomicLong PROCESSED = new AtomicLong();

  private static Daemon daemon;
  private static Path savepoint;

  /** The export of a checkpoint of the job on stated, read while the job still ran. */
  private static String checkpointExport;

  @TempDir static Path tmp;

  /** The job's state, one update per event. */
  static final class Fn extends KeyedProcessFunction<Integer, Long, Long> {
    private static final long serialVersionUID = 1L;
    private transient ValueState<String> last;
    private transient ListState<Long> seen;
    private transient MapState<String, Integer> counts;
    private transient ReducingState<Long> sum;
    private transient AggregatingState<Long, Long> maxOf;

    @Override
    public void open(org.apache.flink.api.common.functions.OpenContext ctx) {
      last = getRuntimeContext().getState(new ValueStateDescriptor<>("last", Types.STRING));
      seen = getRuntimeContext().getListState(new ListStateDescriptor<>("seen", Types.LONG));
      counts =
          getRuntimeContext()
              .getMapState(new MapStateDescriptor<>("counts", Types.STRING, Types.INT));
      sum =
          getRuntimeContext()
              .getReducingState(new ReducingStateDescriptor<>("sum", Long::sum, Types.LONG));
      maxOf =
          getRuntimeContext()
              .getAggregatingState(
                  new AggregatingStateDescriptor<>("maxOf", new Max(), Types.LONG));
    }

    @Override
    public void processElement(Long i, Context ctx, Collector<Long> out) throws Exception {
      last.update("v-" + i);
      seen.add(i);
      String m = "m" + (i % 3);
      Integer c = counts.get(m);
      counts.put(m, c == null ? 1 : c + 1);
      sum.add(i);
      maxOf.add(i);
      // No watermarks flow: the timers stay registered, into the savepoint.
      ctx.timerService().registerEventTimeTimer(1000 + i);
      PROCESSED.incrementAndGet();
    }
  }

  static final class Max implements AggregateFunction<Long, Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long createAccumulator() {
      return Long.MIN_VALUE;
    }

    @Override
    public Long add(Long v, Long acc) {
      return Math.max(v, acc);
    }

    @Override
    public Long getResult(Long acc) {
      return acc;
    }

    @Override
    public Long merge(Long a, Long b) {
      return Math.max(a, b);
    }
  }

  @BeforeAll
  static void runJobOnStated() throws Exception {
    daemon = new Daemon();
    daemon.start();
    savepoint = runJobToSavepoint("io.stated.flink.StatedStateBackendFactory", "stated");
  }

  /**
   * Runs the job on a MiniCluster of its own with the given state backend until it processed all N
   * events, then stops it with a canonical savepoint; returns the savepoint's directory.
   */
  static Path runJobToSavepoint(String backendType, String name) throws Exception {
    return runJobToSavepoint(backendType, name, java.util.Map.of());
  }

  /** As above, with more of the job's configuration. */
  static Path runJobToSavepoint(
      String backendType, String name, java.util.Map<String, String> extra) throws Exception {
    PROCESSED.set(0);
    Configuration conf = new Configuration();
    conf.setString("state.backend.type", backendType);
    conf.setString("state.backend.stated.socket", daemon.socket.toString());
    extra.forEach(conf::setString);
    // Every subtask's state in a file of its own, never inline in _metadata, so that
    // the damaged-file test has a file to cut (a file system checkpoint storage: the
    // JobManager's keeps a savepoint's state in memory).
    conf.set(
        CheckpointingOptions.CHECKPOINTS_DIRECTORY,
        tmp.resolve("checkpoints-" + name).toUri().toString());
    conf.set(CheckpointingOptions.FS_SMALL_FILE_THRESHOLD, MemorySize.parse("0b"));
    conf.set(org.apache.flink.configuration.RestOptions.BIND_PORT, "0");
    // Checkpointing on (for the checkpoint the test triggers), never on its own.
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofHours(1));
    MiniCluster cluster =
        new MiniCluster(
            new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(PARALLELISM)
                .build());
    try {
      cluster.start();
      StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
      env.setParallelism(PARALLELISM);
      env.setMaxParallelism(MAX_PARALLELISM);
      DataGeneratorSource<Long> src =
          new DataGeneratorSource<>(
              i -> i, Long.MAX_VALUE, RateLimiterStrategy.perSecond(5000), Types.LONG);
      env.fromSource(src, WatermarkStrategy.noWatermarks(), "numbers")
          .setParallelism(1)
          .filter(i -> i < N)
          .setParallelism(1)
          .keyBy(i -> (int) (i % KEYS), Types.INT)
          .process(new Fn())
          .uid("agg")
          .name("agg")
          .sinkTo(new DiscardingSink<>());
      JobGraph graph = env.getStreamGraph().getJobGraph();
      cluster.submitJob(graph).get(1, TimeUnit.MINUTES);
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (PROCESSED.get() < N) {
        assertThat(System.nanoTime())
            .as("the job processed " + PROCESSED.get() + " of " + N)
            .isLessThan(deadline);
        Thread.sleep(20);
      }
      if (name.equals("stated")) {
        // A checkpoint of stated's backend is in the same format as its savepoints: it
        // is read here, while the job runs and the checkpoint exists.
        String chk = cluster.triggerCheckpoint(graph.getJobID()).get(1, TimeUnit.MINUTES);
        checkpointExport = run("export", "--bytes", "text", chk);
      }
      String sp =
          cluster
              .stopWithSavepoint(
                  graph.getJobID(),
                  tmp.resolve("savepoints-" + name).toUri().toString(),
                  false,
                  SavepointFormatType.CANONICAL)
              .get(1, TimeUnit.MINUTES);
      Path dir = Path.of(java.net.URI.create(sp));
      if (System.getProperty("keep.savepoint") != null) {
        copyDir(dir, Path.of(System.getProperty("keep.savepoint") + "-" + name));
      }
      return dir;
    } finally {
      cluster.close();
    }
  }

  @AfterAll
  static void stop() throws Exception {
    if (daemon != null) {
      daemon.close();
    }
  }

  private static String run(String... args) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    int rc =
        FlinkState.run(
            args,
            new PrintStream(out, true, StandardCharsets.UTF_8),
            new PrintStream(err, true, StandardCharsets.UTF_8));
    assertThat(rc).as(err.toString(StandardCharsets.UTF_8)).isZero();
    return out.toString(StandardCharsets.UTF_8);
  }

  private static String line(int key, String state, String kind, String rest) {
    int kg = KeyGroupRangeAssignment.assignToKeyGroup(key, MAX_PARALLELISM);
    int subtask =
        KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(MAX_PARALLELISM, PARALLELISM, kg);
    return "{\"operator\":\"agg\",\"subtask\":"
        + subtask
        + ",\"state\":\""
        + state
        + "\",\"kind\":\""
        + kind
        + "\",\"keyGroup\":"
        + kg
        + ",\"key\":\""
        + key
        + "\",\"namespace\":\"\""
        + rest
        + "}";
  }

  /** The export the job's model predicts, with --bytes text, sorted. */
  private static List<String> model() {
    List<String> out = new ArrayList<>();
    for (int k = 0; k < KEYS; k++) {
      long max = Long.MIN_VALUE;
      long sum = 0;
      int j = 0;
      TreeMap<String, Integer> counts = new TreeMap<>();
      for (long i = k; i < N; i += KEYS) {
        max = Math.max(max, i);
        sum += i;
        counts.merge("m" + (i % 3), 1, Integer::sum);
        out.add(line(k, "seen", "list", ",\"value\":\"" + i + "\",\"index\":" + j++));
        out.add(line(k, TIMERS, "timers", ",\"timestamp\":" + (1000 + i)));
      }
      out.add(line(k, "last", "value", ",\"value\":\"v-" + max + "\""));
      out.add(line(k, "sum", "value", ",\"value\":\"" + sum + "\""));
      out.add(line(k, "maxOf", "value", ",\"value\":\"" + max + "\""));
      for (var c : counts.entrySet()) {
        out.add(
            line(
                k,
                "counts",
                "map",
                ",\"userKey\":\"" + c.getKey() + "\",\"value\":\"" + c.getValue() + "\""));
      }
    }
    Collections.sort(out);
    return out;
  }

  /** The lines with their byte fields decoded from base64 or hex into text. */
  private static String decode(String lines, String enc) {
    java.util.regex.Matcher m =
        java.util.regex.Pattern.compile("\"(key|namespace|userKey|value)\":\"([^\"]*)\"")
            .matcher(lines);
    StringBuilder sb = new StringBuilder();
    while (m.find()) {
      byte[] b =
          enc.equals("hex")
              ? java.util.HexFormat.of().parseHex(m.group(2))
              : java.util.Base64.getDecoder().decode(m.group(2));
      m.appendReplacement(
          sb,
          java.util.regex.Matcher.quoteReplacement(
              "\"" + m.group(1) + "\":\"" + new String(b, StandardCharsets.UTF_8) + "\""));
    }
    m.appendTail(sb);
    return sb.toString();
  }

  private static List<String> sortedLines(String s) {
    List<String> l = new ArrayList<>(s.lines().filter(x -> !x.isEmpty()).toList());
    Collections.sort(l);
    return l;
  }

  @Test
  void exportEqualsTheModel() throws Exception {
    List<String> got = sortedLines(run("export", "--bytes", "text", savepoint.toString()));
    assertThat(got).hasSize(model().size()).containsExactlyElementsOf(model());
    // base64 (the default) and hex carry the same bytes.
    assertThat(sortedLines(decode(run("export", savepoint.toString()), "base64")))
        .containsExactlyElementsOf(got);
    assertThat(sortedLines(decode(run("export", "--bytes", "hex", savepoint.toString()), "hex")))
        .containsExactlyElementsOf(got);
    // --values raw: the serializers' bytes; an Int key is its 4 bytes, big-endian.
    java.util.Set<String> rawKeys = new java.util.TreeSet<>();
    java.util.regex.Matcher m =
        java.util.regex.Pattern.compile("\"key\":\"([0-9a-f]*)\"")
            .matcher(run("export", "--values", "raw", "--bytes", "hex", savepoint.toString()));
    while (m.find()) {
      rawKeys.add(m.group(1));
    }
    java.util.Set<String> want = new java.util.TreeSet<>();
    for (int k = 0; k < KEYS; k++) {
      want.add(String.format("%08x", k));
    }
    assertThat(rawKeys).isEqualTo(want);
  }

  @Test
  void aCheckpointOnStatedExportsTheSame() {
    assertThat(sortedLines(checkpointExport)).containsExactlyElementsOf(model());
  }

  /**
   * Flink's own backends write the same canonical format, their timers PRIORITY_QUEUE states in the
   * managed keyed state as stated's (with its default, daemon timers), and read the same.
   */
  /**
   * stated with timers on the heap: its timer service writes them into raw keyed state, which the
   * reader reads as Flink's restore does, to the same lines.
   */
  @Test
  void statedWithHeapTimersExportsTheSame() throws Exception {
    Path sp =
        runJobToSavepoint(
            "io.stated.flink.StatedStateBackendFactory",
            "stated-heap-timers",
            java.util.Map.of("state.backend.stated.timer-service", "heap"));
    List<String> got = sortedLines(run("export", "--bytes", "text", sp.toString()));
    assertThat(got).containsExactlyElementsOf(model());
  }

  @ParameterizedTest
  @ValueSource(strings = {"hashmap", "rocksdb"})
  void flinksOwnBackendsExportTheSame(String backend) throws Exception {
    Path sp = runJobToSavepoint(backend, backend);
    List<String> got = sortedLines(run("export", "--bytes", "text", sp.toString()));
    assertThat(got).containsExactlyElementsOf(model());
  }

  @Test
  void lsCountsMatch() throws Exception {
    String out = run("ls", "--top", "3", savepoint.toString());
    assertThat(out).contains("2 tasks");
    assertThat(stateRow(out, "last")).containsExactly("agg", "last", "value", String.valueOf(KEYS));
    assertThat(stateRow(out, "seen")).containsExactly("agg", "seen", "list", String.valueOf(N));
    assertThat(stateRow(out, "counts"))
        .containsExactly("agg", "counts", "map", String.valueOf(KEYS * 3));
    assertThat(stateRow(out, "sum"))
        .containsExactly("agg", "sum", "value", "(reducing)", String.valueOf(KEYS));
    assertThat(stateRow(out, "maxOf"))
        .containsExactly("agg", "maxOf", "value", "(aggregating)", String.valueOf(KEYS));
    assertThat(stateRow(out, TIMERS)).containsExactly("agg", TIMERS, "timers", String.valueOf(N));
    long total = KEYS * 3 + N * 2 + KEYS * 3;
    assertThat(out).containsPattern("(?m)^total\\s+" + total + "\\s");
    assertThat(out).contains("key groups hold entries; the largest:");
  }

  /** The first columns of the state table's row of a state, up to its entry count. */
  private static List<String> stateRow(String ls, String state) {
    for (String l : ls.lines().toList()) {
      String[] f = l.trim().split("\\s+");
      if (f.length > 4 && f[0].equals("agg") && f[1].equals(state) && !f[2].matches("\\d+")) {
        int upTo = f[3].startsWith("(") ? 5 : 4;
        return List.of(f).subList(0, upTo);
      }
    }
    throw new AssertionError("no row of state " + state + " in\n" + ls);
  }

  @Test
  void aCutStateFileIsRefusedNamingIt() throws Exception {
    Path copy = tmp.resolve("damaged");
    copyDir(savepoint, copy);
    Path victim;
    try (Stream<Path> s = Files.list(copy)) {
      victim =
          s.filter(p -> !p.getFileName().toString().equals("_metadata"))
              .max((a, b) -> Long.compare(a.toFile().length(), b.toFile().length()))
              .orElseThrow(() -> new AssertionError("no state file in " + listing(copy)));
    }
    try (RandomAccessFile f = new RandomAccessFile(victim.toFile(), "rw")) {
      f.setLength(f.length() - 7);
    }
    assertThatThrownBy(() -> run("export", copy.toString()))
        .isInstanceOf(IOException.class)
        .hasMessageContaining(victim.getFileName().toString())
        .hasMessageContaining("damaged");
    assertThatThrownBy(() -> run("ls", copy.toString()))
        .isInstanceOf(IOException.class)
        .hasMessageContaining(victim.getFileName().toString());
  }

  @Test
  void aGarbledKeyGroupIsRefusedNamingTheFile() throws Exception {
    Path copy = tmp.resolve("garbled");
    copyDir(savepoint, copy);
    Path victim;
    try (Stream<Path> s = Files.list(copy)) {
      victim =
          s.filter(p -> !p.getFileName().toString().equals("_metadata"))
              .max((a, b) -> Long.compare(a.toFile().length(), b.toFile().length()))
              .orElseThrow(() -> new AssertionError("no state file in " + listing(copy)));
    }
    // The tail of the file is the last key group's entries and its end mark: lengths of 2 GiB
    // over all of it, whichever of its bytes the entries' lengths and the mark are.
    try (RandomAccessFile f = new RandomAccessFile(victim.toFile(), "rw")) {
      f.seek(f.length() - 40);
      for (int i = 0; i < 10; i++) {
        f.write(new byte[] {(byte) 0x7f, (byte) 0xff, (byte) 0xff, (byte) 0xf0});
      }
    }
    assertThatThrownBy(() -> run("export", copy.toString()))
        .isInstanceOf(IOException.class)
        .hasMessageContaining(victim.getFileName().toString());
  }

  private static String listing(Path dir) {
    try (Stream<Path> s = Files.list(dir)) {
      return s.map(p -> p.getFileName() + " " + p.toFile().length()).toList().toString();
    } catch (IOException e) {
      return e.toString();
    }
  }

  private static void copyDir(Path from, Path to) throws IOException {
    Files.createDirectories(to);
    try (Stream<Path> s = Files.list(from)) {
      for (Path p : s.toList()) {
        Files.copy(p, to.resolve(p.getFileName()));
      }
    }
  }

  /**
   * The export, bootstrapped into a stated savepoint by {@code stated savepoint bootstrap}, reads
   * back through {@code stated state export} line for line.
   */
  @Test
  void bootstrapRoundTrip() throws Exception {
    Path jsonl = tmp.resolve("flink.jsonl");
    String exported = run("export", "--bytes", "text", savepoint.toString());
    Files.writeString(jsonl, exported);
    Path data = tmp.resolve("bootstrap-data");
    Files.createDirectories(data.resolve("checkpoints"));
    exec(
        Daemon.binary().toString(),
        "savepoint",
        "bootstrap",
        "--data-dir",
        data.toString(),
        "--from",
        jsonl.toString(),
        "--bytes",
        "text",
        "--job",
        "flinkjob",
        "--max-parallelism",
        String.valueOf(MAX_PARALLELISM),
        "--parallelism",
        String.valueOf(PARALLELISM),
        "from-flink");
    String back =
        exec(
            Daemon.binary().toString(),
            "state",
            "export",
            "--data-dir",
            data.toString(),
            "--bytes",
            "text",
            "savepoints/from-flink");
    assertThat(sortedLines(back)).containsExactlyElementsOf(sortedLines(exported));
  }

  private static String exec(String... cmd) throws Exception {
    Path out = Files.createTempFile(tmp, "out", ".txt");
    Path err = Files.createTempFile(tmp, "err", ".txt");
    Process p =
        new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile()).start();
    assertThat(p.waitFor(2, TimeUnit.MINUTES)).as(String.join(" ", cmd)).isTrue();
    assertThat(p.exitValue()).as(String.join(" ", cmd) + ": " + Files.readString(err)).isZero();
    return Files.readString(out);
  }
}
