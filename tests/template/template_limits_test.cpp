// Hostile templates: runaway loops, recursion, deep nesting and huge values must fail fast
// with a clear error instead of hanging, exhausting memory or overflowing the stack.
#include <gtest/gtest.h>

#include <string>

#include "template/chat_template.h"

namespace sluice {
namespace {

std::string limits_render_error(std::string_view source, const ChatTemplateLimits& limits = {}) {
  auto tmpl = ChatTemplate::parse(source, limits);
  if (!tmpl.ok()) return tmpl.message();
  auto out = tmpl->render(ChatTemplateInputs{});
  EXPECT_FALSE(out.ok()) << "rendered " << out->size() << " bytes";
  return out.ok() ? std::string() : out.message();
}

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

::testing::AssertionResult mentions(const std::string& message, std::string_view needle) {
  if (message.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << message << "' does not mention '" << needle << "'";
}

TEST(TemplateLimits, HugeRangeIsRejectedLikeTheSandbox) {
  EXPECT_TRUE(mentions(limits_render_error("{% for i in range(100000000) %}x{% endfor %}"),
                       "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."));
}

TEST(TemplateLimits, NestedLoopsHitTheStepLimit) {
  // 10^10 iterations: stops after the default 10M steps (about a second).
  std::string err = limits_render_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_TRUE(mentions(err, "step limit"));
  ChatTemplateLimits small;
  small.max_steps = 10'000;
  EXPECT_TRUE(
      mentions(limits_render_error("{% for i in range(100000) %}{{ i }}{% endfor %}", small),
               "exceeded the step limit (10000 evaluation steps)"));
}

TEST(TemplateLimits, QuadraticListGrowthIsCharged) {
  ChatTemplateLimits small;
  small.max_steps = 200'000;
  EXPECT_TRUE(
      mentions(limits_render_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                                   "{% set ns.l = ns.l + [i] %}{% endfor %}",
                                   small),
               "step limit"));
}

TEST(TemplateLimits, HiddenLinearWorkIsCharged) {
  // O(size) operations repeated in a loop: length of a 50 MB string, `in` over a big list.
  EXPECT_TRUE(mentions(
      limits_render_error("{% set s = 'x' * 50000000 %}{% for i in range(100000) %}{{ s | length }}"
                          "{% endfor %}"),
      "step limit"));
  EXPECT_TRUE(
      mentions(limits_render_error("{% set l = range(100000) | list %}{% for i in range(100000) %}"
                                   "{% if -1 in l %}{% endif %}{% endfor %}"),
               "step limit"));
}

TEST(TemplateLimits, SharedNestsCannotExplodeComparisons) {
  // Each level doubles the unfolded size: 2^60 leaves, but only 60 list objects each.
  const std::string build =
      "{% set ns = namespace(a=[0], b=[0], t=(0,), u=(0,)) %}{% for i in range(60) %}"
      "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}"
      "{% set ns.t = (ns.t, ns.t) %}{% set ns.u = (ns.u, ns.u) %}{% endfor %}";
  EXPECT_TRUE(mentions(limits_render_error(build + "{{ ns.a == ns.b }}"), "step limit"));
  EXPECT_TRUE(mentions(limits_render_error(build + "{{ ns.a in [ns.b] }}"), "step limit"));
  EXPECT_TRUE(mentions(limits_render_error(build + "{{ {ns.t: 1}[ns.u] }}"), "step limit"));
  EXPECT_TRUE(
      mentions(limits_render_error(build + "{{ [ns.t, ns.u] | unique | list }}"), "step limit"));
  EXPECT_TRUE(mentions(limits_render_error(build + "{{ ns.a | tojson }}"), "exceeds"));
}

// A quadratic search would take hours here (10^12 steps), so a regression times the test out.
TEST(TemplateLimits, LongRepetitiveSearchesAreLinear) {
  auto tmpl = ChatTemplate::parse(
      "{% set a = 'a' * 1000000 %}{{ (a ~ 'b') in (a ~ a) }} {{ (a ~ a).count(a) }} {{ (a ~ "
      "a).rfind('b' ~ a) }}"
      " {{ ((a ~ a).split(a ~ 'b')) | length }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render({});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, "False 2 -1 1");
}

TEST(TemplateLimits, InfiniteRecursionStops) {
  EXPECT_TRUE(
      mentions(limits_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
               "maximum recursion depth exceeded (64 nested calls, in macro 'f')"));
  EXPECT_TRUE(
      mentions(limits_render_error("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}"),
               "maximum recursion depth exceeded"));
}

TEST(TemplateLimits, DeepRecursionThroughDeepExpressionsStops) {
  // Each macro level evaluates a deeply nested expression: the evaluation-depth cap (not the
  // C++ stack) ends it.
  std::string nested = repeat("[", 60) + "f(n + 1)" + repeat("]", 60);
  EXPECT_TRUE(
      mentions(limits_render_error("{% macro f(n) %}{{ " + nested + " }}{% endmacro %}{{ f(0) }}"),
               "nested too deeply"));
}

TEST(TemplateLimits, DeepNestingIsAParseError) {
  EXPECT_TRUE(
      mentions(limits_render_error("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}"),
               "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}"),
                       "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ " + repeat("not ", 100000) + "1 }}"),
                       "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ " + repeat("-", 100000) + "1 }}"),
                       "template nesting too deep"));
  EXPECT_TRUE(
      mentions(limits_render_error(repeat("{% if 1 %}", 5000) + repeat("{% endif %}", 5000)),
               "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ 1" + repeat(" if 1 else 1", 5000) + " }}"),
                       "template nesting too deep"));
  // Operator chains nest the tree one level per operator: fine at template scale, bounded.
  auto chain = ChatTemplate::parse("{{ 1" + repeat(" + 1", 150) + " }}");
  ASSERT_TRUE(chain.ok()) << chain.message();
  EXPECT_EQ(*chain->render({}), "151");
  EXPECT_TRUE(mentions(limits_render_error("{{ 1" + repeat(" + 1", 100000) + " }}"),
                       "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ x" + repeat(".a", 100000) + " }}"),
                       "template nesting too deep"));
  EXPECT_TRUE(mentions(limits_render_error("{{ x" + repeat("|trim", 100000) + " }}"),
                       "template nesting too deep"));
}

TEST(TemplateLimits, DeeplyNestedValuesAreRejected) {
  EXPECT_TRUE(
      mentions(limits_render_error("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
                                   "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}"),
               "value nested deeper than 200 levels"));
}

TEST(TemplateLimits, HugeStringsAndListsAreRejected) {
  EXPECT_TRUE(mentions(limits_render_error("{{ 'x' * 10000000000 }}"), "exceeds the size limit"));
  EXPECT_TRUE(
      mentions(limits_render_error("{{ ([1] * 1000000000) | length }}"), "exceeds the size limit"));
  EXPECT_TRUE(
      mentions(limits_render_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                                   "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
               "exceeds the size limit"));
  EXPECT_TRUE(mentions(limits_render_error("{{ '{:>1000000000}'.format('x') }}"),
                       "exceeds the size limit"));
  EXPECT_TRUE(
      mentions(limits_render_error("{{ 'x' | center(1000000000) }}"), "exceeds the size limit"));
  EXPECT_TRUE(
      mentions(limits_render_error("{{ 'a\nb' | indent(1000000000) }}"), "exceeds the size limit"));
  EXPECT_TRUE(mentions(limits_render_error("{{ range(100000) | list | tojson(indent=100000) }}"),
                       "exceeds"));
  EXPECT_TRUE(
      mentions(limits_render_error("{{ '%*d' % (1000000000, 1) }}"), "exceeds the size limit"));
  // A big list printed many times over (each element shares one 1 MB string).
  EXPECT_TRUE(mentions(limits_render_error("{{ ['x' * 1000000] * 100000 }}"), "exceeds"));
}

TEST(TemplateLimits, HugeOutputIsRejected) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1 << 20;
  EXPECT_TRUE(mentions(
      limits_render_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", small),
      "rendered output exceeds the limit of 1048576 bytes"));
  EXPECT_TRUE(mentions(limits_render_error("{% macro m() %}{% for i in range(100000) "
                                           "%}xxxxxxxxxxxxxxxxxxxx{% endfor %}{% endmacro %}"
                                           "{{ m() }}",
                                           small),
                       "exceeds the limit"));
}

TEST(TemplateLimits, ObjectCountIsBounded) {
  ChatTemplateLimits small;
  small.max_objects = 1000;
  EXPECT_TRUE(mentions(
      limits_render_error("{% for i in range(5000) %}{% set n = namespace() %}{% endfor %}", small),
      "too many namespace()/macro objects (limit 1000)"));
}

TEST(TemplateLimits, NamespaceCyclesPrintLikePython) {
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(a=[1]) %}{% set ns.b = [ns] %}{% set ns.self = ns %}{{ ns }}|{{ ns.b "
      "}}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render({});
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out,
            "<Namespace {'a': [1], 'b': [<Namespace {...}>], 'self': <Namespace {...}>}>|"
            "[<Namespace {'a': [1], 'b': [...], 'self': <Namespace {...}>}>]");
}

}  // namespace
}  // namespace sluice
