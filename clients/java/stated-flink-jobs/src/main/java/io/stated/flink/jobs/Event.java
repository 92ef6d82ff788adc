package io.stated.flink.jobs;

import java.util.Objects;

/**
 * One input record: a key, an event time and a value. A Flink POJO (public fields, public
 * no-argument constructor) so that every backend serializes it with Flink's POJO serializer.
 */
public class Event {
  public long key;
  public long timestamp;
  public long value;

  public Event() {}

  public Event(long key, long timestamp, long value) {
    this.key = key;
    this.timestamp = timestamp;
    this.value = value;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Event)) {
      return false;
    }
    Event e = (Event) o;
    return key == e.key && timestamp == e.timestamp && value == e.value;
  }

  @Override
  public int hashCode() {
    return Objects.hash(key, timestamp, value);
  }

  @Override
  public String toString() {
    return "Event{key=" + key + ", ts=" + timestamp + ", value=" + value + "}";
  }
}
