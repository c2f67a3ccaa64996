// The chat-template API and error paths: how inputs reach the template, error messages
// (Jinja's wording, with line and column), parse errors, and the Python value formatting
// helpers the interpreter is built on.
#include <gtest/gtest.h>

#include <string>

#include "template/chat_template.h"
#include "template/jinja_string.h"
#include "template/jinja_value.h"

namespace sluice {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(std::string_view source, const ChatTemplateInputs& in = {}) {
  SLUICE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  return tmpl.render(in);
}

std::string render_ok(std::string_view source, const ChatTemplateInputs& in = {}) {
  auto r = render(source, in);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::string("<error>");
}

std::string render_error(std::string_view source, const ChatTemplateInputs& in = {}) {
  auto r = render(source, in);
  EXPECT_FALSE(r.ok()) << "rendered: " << *r;
  return r.ok() ? std::string() : r.message();
}

ChatTemplateInputs conversation() {
  ChatTemplateInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "Hi", "name": "x"},
                                        {"role": "assistant", "content": null}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  return in;
}

// ---- inputs ----

TEST(ChatTemplateApi, StandardVariables) {
  ChatTemplateInputs in = conversation();
  in.add_generation_prompt = true;
  EXPECT_EQ(
      render_ok("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}{{ eos_token }}",
                in),
      "<s>user:Hi;assistant:None;assistant:</s>");
}

TEST(ChatTemplateApi, MessageKeysKeepTheirOrder) {
  EXPECT_EQ(
      render_ok("{{ messages[0] }} {{ messages[0] | tojson }}", conversation()),
      R"({'role': 'user', 'content': 'Hi', 'name': 'x'} {"role": "user", "content": "Hi", "name": "x"})");
}

TEST(ChatTemplateApi, NullToolsAreUndefinedLikeTransformers) {
  ChatTemplateInputs in = conversation();
  EXPECT_EQ(render_ok("{{ tools is defined }}", in), "False");
  in.tools = ordered_json::array();
  EXPECT_EQ(render_ok("{{ tools is defined }} {{ tools | length }}", in), "True 0");
}

TEST(ChatTemplateApi, ExtraContext) {
  ChatTemplateInputs in;
  in.extra_context =
      ordered_json::parse(R"({"documents": [{"title": "T"}], "enable_thinking": false})");
  EXPECT_EQ(render_ok("{{ documents[0].title }} {{ enable_thinking }}", in), "T False");
  in.extra_context = ordered_json::array();
  EXPECT_FALSE(render("x", in).ok());
}

TEST(ChatTemplateApi, StrftimeNowFormatsTheGivenClock) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  ChatTemplateInputs in;
  in.now = std::mktime(&tm);
  EXPECT_EQ(render_ok("{{ strftime_now('%d %b %Y %H:%M') }}", in), "15 Jan 2026 12:00");
}

TEST(ChatTemplateApi, RenderHasNoStateBetweenCalls) {
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(tmpl.ok());
  ChatTemplateInputs in = conversation();
  EXPECT_EQ(*tmpl->render(in), "2");
  EXPECT_EQ(*tmpl->render(in), "2");
  ChatTemplate copy = *tmpl;  // copies share the parsed tree
  EXPECT_EQ(*copy.render(in), "2");
}

// ---- runtime errors ----

TEST(ChatTemplateErrors, RaiseExceptionMessageIsVerbatim) {
  EXPECT_EQ(render_error(
                "{% if messages | length == 0 %}{{ raise_exception('No messages!') }}{% endif %}"),
            "No messages!");
}

TEST(ChatTemplateErrors, UndefinedAttributeOfUndefined) {
  EXPECT_EQ(render_error("line one\n{{ messages[0].missing.deeper }}", conversation()),
            "line 2, column 23: 'dict object' has no attribute 'missing'");
  EXPECT_EQ(render_error("{{ nope.x }}"), "line 1, column 8: 'nope' is undefined");
  EXPECT_EQ(render_error("{{ nope() }}"), "line 1, column 8: 'nope' is undefined");
  EXPECT_EQ(render_error("{{ nope + 1 }}"), "line 1, column 9: 'nope' is undefined");
}

TEST(ChatTemplateErrors, PythonTypeErrors) {
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"),
            "line 1, column 8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"),
            "line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{{ 1 / 0 }}"), "line 1, column 6: division by zero");
  EXPECT_EQ(render_error("{% for x in none %}{% endfor %}"),
            "line 1, column 4: 'NoneType' object is not iterable");
  EXPECT_EQ(render_error("{% for a, b in [(1, 2, 3)] %}{% endfor %}"),
            "line 1, column 4: too many values to unpack (expected 2)");
  EXPECT_EQ(render_error("{{ [1, 'a'] | sort }}"),
            "line 1, column 15: '<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(render_error("{{ nope | tojson }}"),
            "line 1, column 11: Object of type Undefined is not JSON serializable");
}

TEST(ChatTemplateErrors, SandboxBlocksMutation) {
  EXPECT_EQ(render_error("{{ messages.append(1) }}", conversation()),
            "line 1, column 19: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{{ messages[0].update({}) }}", conversation()),
            "line 1, column 22: access to attribute 'update' of 'dict' object is unsafe.");
  EXPECT_EQ(render_ok("{{ messages.__class__ }}|{{ messages.pop is defined }}", conversation()),
            "|False");
}

TEST(ChatTemplateErrors, UnknownFiltersAndTests) {
  EXPECT_EQ(render_error("{{ 1 | nope }}"), "line 1, column 8: No filter named 'nope'.");
  EXPECT_EQ(render_error("{{ 1 is nope }}"), "line 1, column 6: No test named 'nope'.");
  EXPECT_EQ(render_ok("{% if false %}{{ 1 | nope }}{% endif %}ok"), "ok");  // only when evaluated
}

TEST(ChatTemplateErrors, MacroArguments) {
  EXPECT_EQ(render_error("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}"),
            "line 1, column 35: macro 'f' takes not more than 1 argument(s)");
  EXPECT_EQ(render_error("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}"),
            "line 1, column 35: macro 'f' takes no keyword argument 'b'");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.y = 2 %}"),
            "line 1, column 19: cannot assign attribute on non-namespace object");
}

// ---- syntax errors ----

std::string parse_error(std::string_view source) {
  auto r = ChatTemplate::parse(source);
  EXPECT_FALSE(r.ok()) << "parsed: " << source;
  return r.ok() ? std::string() : r.message();
}

TEST(ChatTemplateSyntax, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("{% if x %}\nno end"),
            "chat template syntax error at line 2, column 7: unexpected end of template, expected "
            "'elif' or "
            "'else' or 'endif'");
  EXPECT_EQ(parse_error("ok\n  {{ 1 + }}"),
            "chat template syntax error at line 2, column 10: unexpected end of print statement");
  EXPECT_EQ(parse_error("{% for x in y %}{% endif %}"),
            "chat template syntax error at line 1, column 20: unknown tag 'endif', expected "
            "'endfor' or 'else'");
  EXPECT_EQ(parse_error("{% break %}"),
            "chat template syntax error at line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(parse_error("{{ 'abc }}"),
            "chat template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(parse_error("{{ a ! b }}"),
            "chat template syntax error at line 1, column 6: unexpected char '!'");
  EXPECT_EQ(parse_error("{# never closed"),
            "chat template syntax error at line 1, column 1: missing end of comment tag");
  EXPECT_EQ(parse_error("{% include 'x.jinja' %}"),
            "chat template syntax error at line 1, column 4: 'include' tags are not supported in "
            "chat templates");
  EXPECT_EQ(parse_error("{{ (1, 2 }}"),
            "chat template syntax error at line 1, column 10: unexpected '}', expected ')'");
  EXPECT_EQ(parse_error("{% macro m(a=1, b) %}{% endmacro %}"),
            "chat template syntax error at line 1, column 18: non-default argument follows default "
            "argument");
}

TEST(ChatTemplateSyntax, GenerationBlocksRenderTheirBody) {  // transformers' {% generation %} tag
  EXPECT_EQ(render_ok("a{% generation %}b{% endgeneration %}c"), "abc");
}

// ---- value formatting helpers ----

std::string py_float(double d) {
  std::string s;
  jinja::append_py_float(s, d);
  return s;
}

TEST(JinjaValues, FloatReprMatchesPython) {
  EXPECT_EQ(py_float(0.1), "0.1");
  EXPECT_EQ(py_float(1.0), "1.0");
  EXPECT_EQ(py_float(-0.0), "-0.0");
  EXPECT_EQ(py_float(1e16), "1e+16");
  EXPECT_EQ(py_float(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float(1e-5), "1e-05");
  EXPECT_EQ(py_float(0.0001), "0.0001");
  EXPECT_EQ(py_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(py_float(123456789.125), "123456789.125");
  EXPECT_EQ(py_float(1e22), "1e+22");
  EXPECT_EQ(py_float(1.7976931348623157e308), "1.7976931348623157e+308");
}

TEST(JinjaValues, StringReprChoosesQuotesLikePython) {
  auto repr = [](std::string_view s) {
    std::string out;
    jinja::append_py_repr(out, s);
    return out;
  };
  EXPECT_EQ(repr("it's"), "\"it's\"");
  EXPECT_EQ(repr("a'\""), "'a\\'\"'");
  EXPECT_EQ(repr("tab\tnl\n\x01"), "'tab\\tnl\\n\\x01'");
  EXPECT_EQ(repr("中文 é"), "'中文 é'");
  EXPECT_EQ(repr("\xe2\x80\x8b"), "'\\u200b'");  // zero-width space is not printable
}

TEST(JinjaValues, JsonStringsLikeJsonDumps) {
  auto json = [](std::string_view s, bool ascii) {
    std::string out;
    jinja::append_json_string(out, s, ascii);
    return out;
  };
  EXPECT_EQ(json("a\"b\\c\n\x01é", false), "\"a\\\"b\\\\c\\n\\u0001é\"");
  EXPECT_EQ(json("é😀", true), "\"\\u00e9\\ud83d\\ude00\"");
}

TEST(JinjaValues, InvalidUtf8RoundTrips) {
  std::string bytes = "a\xff\xc3(b";
  std::vector<uint32_t> cps = jinja::utf8_decode(bytes);
  EXPECT_EQ(cps.size(), 5u);
  EXPECT_EQ(jinja::utf8_encode(cps.data(), cps.size()), bytes);
  EXPECT_EQ(render_ok("{{ s | length }}{{ s[::-1] | length }}",
                      [&] {
                        ChatTemplateInputs in;
                        in.extra_context["s"] = "h\xc3\xa9llo";
                        return in;
                      }()),
            "55");
}

}  // namespace
}  // namespace sluice
