package io.stated.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.file.Files;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;

/** The key-group vectors of api/testdata/keygroups.json, computed from the proto's words. */
class KeyGroupsTest {
  @Test
  void vectors() throws Exception {
    JsonObject doc =
        JsonParser.parseString(
                Files.readString(Daemon.repo().resolve("api/testdata/keygroups.json")))
            .getAsJsonObject();
    int n = 0;
    int negative = 0;
    for (JsonElement e : doc.getAsJsonArray("vectors")) {
      JsonObject v = e.getAsJsonObject();
      byte[] key = HexFormat.of().parseHex(v.get("key_hex").getAsString());
      int h = KeyGroups.fnv1a32(key);
      assertEquals(v.get("fnv1a32").getAsInt(), h, "fnv1a32 of " + v.get("key_hex"));
      if (h < 0) {
        negative++;
      }
      assertEquals(v.get("murmur").getAsInt(), KeyGroups.murmur(h), "murmur of " + h);
      for (JsonElement p : doc.getAsJsonArray("max_parallelisms")) {
        int max = p.getAsInt();
        assertEquals(
            v.getAsJsonObject("key_groups").get(String.valueOf(max)).getAsInt(),
            KeyGroups.keyGroup(key, max),
            "key group of " + v.get("key_hex") + " at max parallelism " + max);
      }
      n++;
    }
    assertTrue(n >= 10, "too few vectors: " + n);
    assertTrue(negative > 0, "no vector with a negative hash");
  }

  @Test
  void ranges() {
    // Flink's KeyGroupRangeAssignment for 128 key groups over 3 subtasks.
    assertEquals(0, KeyGroups.rangeOf(128, 3, 0)[0]);
    assertEquals(42, KeyGroups.rangeOf(128, 3, 0)[1]);
    assertEquals(43, KeyGroups.rangeOf(128, 3, 1)[0]);
    assertEquals(85, KeyGroups.rangeOf(128, 3, 1)[1]);
    assertEquals(86, KeyGroups.rangeOf(128, 3, 2)[0]);
    assertEquals(127, KeyGroups.rangeOf(128, 3, 2)[1]);
  }
}
