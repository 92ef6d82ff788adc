package io.stated.flink;

import java.lang.reflect.Field;
import java.util.Map;
import org.junit.jupiter.api.extension.ConditionEvaluationResult;
import org.junit.jupiter.api.extension.ExecutionCondition;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Switches off tests inherited from Flink's suites, whose methods are package-private and cannot be
 * overridden with {@code @Disabled} from here. The test class lists them, each with its reason, in
 * a static {@code Map<String, String> SWITCHED_OFF} (method name to reason); the reason shows in
 * the test report as the skip's reason.
 */
public final class SwitchedOff implements ExecutionCondition {
  @Override
  public ConditionEvaluationResult evaluateExecutionCondition(ExtensionContext context) {
    if (context.getTestMethod().isEmpty() || context.getTestClass().isEmpty()) {
      return ConditionEvaluationResult.enabled("not a test method");
    }
    String reason = list(context.getTestClass().get()).get(context.getTestMethod().get().getName());
    return reason == null
        ? ConditionEvaluationResult.enabled("not switched off")
        : ConditionEvaluationResult.disabled("switched off: " + reason);
  }

  @SuppressWarnings("unchecked")
  private static Map<String, String> list(Class<?> c) {
    try {
      Field f = c.getDeclaredField("SWITCHED_OFF");
      return (Map<String, String>) f.get(null);
    } catch (NoSuchFieldException e) {
      return Map.of();
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(c + ".SWITCHED_OFF is not accessible", e);
    }
  }
}
