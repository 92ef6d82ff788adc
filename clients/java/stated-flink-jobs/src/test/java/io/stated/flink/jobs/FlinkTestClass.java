package io.stated.flink.jobs;

import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestTemplate;

/**
 * One of Flink's own test classes from its published test jar (flink-tests), driven by reflection.
 * Flink 2.3.0's checkpointing ITCases are package-private, with private constructors and private
 * test programs, and they pick their backend themselves: they can be neither subclassed nor given
 * parameters. This runs their own bodies, unchanged, on a configuration of ours. A missing member
 * (a Flink version that renamed it) fails with its name.
 */
final class FlinkTestClass {
  private final Class<?> type;

  private FlinkTestClass(Class<?> type) {
    this.type = type;
  }

  static FlinkTestClass load(String name) {
    try {
      return new FlinkTestClass(Class.forName(name));
    } catch (ClassNotFoundException e) {
      throw new IllegalStateException(
          name + " is not on the test classpath: it comes from org.apache.flink:flink-tests:tests",
          e);
    }
  }

  String name() {
    return type.getName();
  }

  /** The names of its JUnit 5 tests ({@code @Test} and {@code @TestTemplate}), sorted. */
  List<String> testMethods() {
    List<String> names = new ArrayList<>();
    for (Method m : type.getDeclaredMethods()) {
      if (m.isAnnotationPresent(Test.class) || m.isAnnotationPresent(TestTemplate.class)) {
        names.add(m.getName());
      }
    }
    names.sort(null);
    return names;
  }

  /** A new instance through its declared constructor taking {@code args.length} arguments. */
  Object construct(Object... args) throws Exception {
    for (Constructor<?> c : type.getDeclaredConstructors()) {
      if (c.getParameterCount() == args.length) {
        c.setAccessible(true);
        try {
          return c.newInstance(args);
        } catch (InvocationTargetException e) {
          throw unwrap(e);
        }
      }
    }
    throw new NoSuchMethodException(
        type.getName() + " has no constructor of " + args.length + " arguments");
  }

  /**
   * Calls its declared method {@code name} with {@code args.length} arguments on {@code target}
   * (null: a static one), rethrowing what the method threw (an AssertionError of Flink's test stays
   * one).
   */
  Object call(Object target, String name, Object... args) throws Exception {
    Method m = method(name, args.length);
    try {
      return m.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw unwrap(e);
    }
  }

  Object getStatic(String field) throws ReflectiveOperationException {
    return field(field).get(null);
  }

  void setStatic(String field, Object value) throws ReflectiveOperationException {
    field(field).set(null, value);
  }

  /** A static field of a nested class of it, e.g. ("CounterSink", "ALL_COUNTS"). */
  Object getNestedStatic(String nested, String field) throws ReflectiveOperationException {
    Class<?> n = Class.forName(type.getName() + "$" + nested);
    Field f = n.getDeclaredField(field);
    f.setAccessible(true);
    return f.get(null);
  }

  private Method method(String name, int arity) throws NoSuchMethodException {
    for (Method m : type.getDeclaredMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == arity) {
        m.setAccessible(true);
        return m;
      }
    }
    throw new NoSuchMethodException(
        type.getName()
            + "."
            + name
            + " with "
            + arity
            + " arguments; it has "
            + Arrays.stream(type.getDeclaredMethods()).map(Method::getName).sorted().toList());
  }

  private Field field(String name) throws NoSuchFieldException {
    Field f = type.getDeclaredField(name);
    f.setAccessible(true);
    return f;
  }

  private static Exception unwrap(InvocationTargetException e) {
    Throwable t = e.getCause();
    if (t instanceof Error err) {
      throw err;
    }
    if (t instanceof Exception ex) {
      return ex;
    }
    return e;
  }
}
