// Golden tests of the template language: each template below was rendered by Python Jinja2 3.1.6
// configured as Hugging Face transformers does (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, json.dumps-based tojson, strftime_now pinned to
// 2026-01-15 12:00:00) with kContext as variables; sluice must reproduce the output byte for byte.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "template/chat_template.h"

namespace sluice {
namespace {

constexpr const char* kContext =
    R"J({"d": {"a": 1, "b": [1, 2, {"c": "x"}], "items": 5, "s": "it's", "n": null},
 "l": [3, 1, 2], "s": "Hello World", "f": 1.5, "n": null, "t": true, "e": "",
 "users": [{"name": "bob", "age": 3, "role": "user"}, {"name": "Al", "age": 10, "role": "assistant"}, {"name": "cy", "role": "user"}],
 "u": "héllo wörld ünïcode 中文"})J";

struct GoldenCase {
  const char* name;
  const char* source;
  const char* expected;
};

// clang-format off
const GoldenCase kGolden[] = {
    {"ws_lstrip_trim", R"J(a
  {% if t %}
  b
  {% endif %}
c)J",
     R"J(a
  b
c)J"},
    {"ws_plus_disables_lstrip", R"J(a
  {%+ if t %}
  b
  {%+ endif %}
c)J",
     R"J(a
    b
  c)J"},
    {"ws_plus_disables_trim", R"J(a
  {% if t +%}
  b
  {% endif +%}
c)J",
     R"J(a

  b

c)J"},
    {"ws_print_not_stripped", R"J(a
  {{ s }}
  {# c #}
  d)J",
     R"J(a
  Hello World
  d)J"},
    {"ws_minus_both_sides", R"J(a  {%- if t -%}  b  {%- endif -%}  c
{{- ' d ' -}}
 e)J",
     R"J(abc d e)J"},
    {"ws_minus_newlines", R"J(x
{%- if t %}
y
{%- endif %}
z)J",
     R"J(xyz)J"},
    {"ws_loop_lines", R"J(line1
{% for x in l %}
  {{ x }}
{% endfor %}
end)J",
     R"J(line1
  3
  1
  2
end)J"},
    {"ws_loop_minus", R"J({% for i in l -%}
  - {{ i }}
{%- endfor %}
)J",
     R"J(- 3- 1- 2)J"},
    {"ws_comment_lstrip", R"J(a
  {# comment #}
  b {# x
y #}
c)J",
     R"J(a
  b c)J"},
    {"ws_comment_minus", R"J(a
  {#- comment -#}
  b)J",
     R"J(ab)J"},
    {"ws_raw", R"J({% raw %}
  {% if %}{{ x }}
{% endraw %}!)J",
     R"J(
  {% if %}{{ x }}
!)J"},
    {"ws_raw_minus", R"J(a{%- raw -%}  x  {%- endraw -%}b)J",
     R"J(axb)J"},
    {"ws_crlf", "a\r\nb\r\n{% if t %}\r\nc\r\n{% endif %}\r\n",
     R"J(a
b
c
)J"},
    {"ws_trailing_newline_dropped", R"J(trailing

)J",
     R"J(trailing
)J"},
    {"ws_unicode_space_lstrip", R"J(　{% if t %}x{% endif %}  {%- if t %}y{% endif %})J",
     R"J(xy)J"},
    {"ws_minus_int_gotcha", R"J({{-1}})J",
     R"J(1)J"},
    {"ws_macro_body", R"J({% macro m() -%}
  body
{%- endmacro %}
[{{ m() }}])J",
     R"J([body])J"},
    {"ws_set_minus", R"J({%- set x = 1 -%}


{{ x }})J",
     R"J(1)J"},
    {"ws_nested_if", R"J({% if t %}{% if t %}
  nested
  {% endif %}
{% endif %})J",
     R"J(  nested
)J"},
    {"print_containers", R"J({{ l }} {{ d }} {{ (1,) }} {{ () }} {{ (1, 'a') }} {{ n }} {{ t }} {{ [none, true, 1.5, 'q"', "x'y", 'a\nb'] }})J",
     R"J([3, 1, 2] {'a': 1, 'b': [1, 2, {'c': 'x'}], 'items': 5, 's': "it's", 'n': None} (1,) () (1, 'a') None True [None, True, 1.5, 'q"', "x'y", 'a\nb'])J"},
    {"print_floats", R"J({{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 1e100 }} {{ 5e-324 }} {{ 123456789.123456789 }})J",
     R"J(1.0 0.30000000000000004 1e+16 1000000000000000.0 1e-05 0.0001 -0.0 1e+100 5e-324 123456789.12345679)J"},
    {"print_nested_dict", R"J({{ {'a': {'b': 1}} }}{{ {1: 'x', 2.0: 'y', true: 'z'} }} {{ ((1, 2), 3) }} {{ [(1,)] }})J",
     R"J({'a': {'b': 1}}{1: 'z', 2.0: 'y'} ((1, 2), 3) [(1,)])J"},
    {"print_unicode_repr", R"J({{ [u, 'tab\tx', '\x00\x7f\u200b'] }})J",
     R"J(['héllo wörld ünïcode 中文', 'tab\tx', '\x00\x7f\u200b'])J"},
    {"string_literals", R"J({{ 'a' 'b' }} {{ "x\ty" }} {{ '\u00e9\x41\101' }} {{ 'a\'b' }} {{ 'no\qescape' }})J",
     R"J(ab x	y éAA a'b no\qescape)J"},
    {"number_literals", R"J({{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1_000 }} {{ 1.5e3 }} {{ 1E3 }} {{ 2.5e-3 }})J",
     R"J(31 5 15 1000 1500.0 1000.0 0.0025)J"},
    {"dict_views", R"J({{ d.items() }} {{ d.keys() }} {{ d.values() }})J",
     R"J(dict_items([('a', 1), ('b', [1, 2, {'c': 'x'}]), ('items', 5), ('s', "it's"), ('n', None)]) dict_keys(['a', 'b', 'items', 's', 'n']) dict_values([1, [1, 2, {'c': 'x'}], 5, "it's", None]))J"},
    {"arith_int", R"J({{ 1 + 2 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }})J",
     R"J(3 0.5 2.0 3 -4 1 2 1024 0.5 64)J"},
    {"arith_float", R"J({{ 1.5 + 1 }} {{ 7.0 // 2 }} {{ -7.5 % 2 }} {{ 10 / 3 }} {{ 2 ** 0.5 }} {{ 1.5 // 0.4 }} {{ -1.5 % 0.4 }} {{ 3.0 % -2 }})J",
     R"J(2.5 3.0 0.5 3.3333333333333335 1.4142135623730951 3.0 0.10000000000000009 -1.0)J"},
    {"arith_bool", R"J({{ true + 1 }} {{ true * 3 }} {{ 10 // true }} {{ 3 % -2 }} {{ -3 // 2 }})J",
     R"J(2 3 10 -1 -2)J"},
    {"arith_precedence", R"J({{ -1 | abs }} {{ - 2 ** 2 }} {{ (-2) ** 2 }} {{ not 1 == 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }})J",
     R"J(1 4 4 True 7 9 64)J"},
    {"arith_sequences", R"J({{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 3 * 'x' }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' * -1 }}|)J",
     R"J(a1NoneTrue ababab [1, 1] xxx [1, 2] (1, 2) |)J"},
    {"arith_inf", R"J({{ 1e308 * 10 }} {{ -(1e308 * 10) }} {{ 0 ** 0 }})J",
     R"J(inf -inf 1)J"},
    {"compare", R"J({{ 1 in l }} {{ 5 not in l }} {{ 'ell' in s }} {{ 'a' in d }} {{ 'zz' in d }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }})J",
     R"J(True True True True False True False True True)J"},
    {"equality", R"J({{ 'abc' == 'abc' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ missing == missing }} {{ [1] in [[1]] }})J",
     R"J(True True True True False True True True True)J"},
    {"and_or_operands", R"J({{ t and 'yes' }} {{ n or 'dflt' }} {{ 0 or '' }}|{{ [] or {} }} {{ 1 and 2 }} {{ not t }} {{ not n }})J",
     R"J(yes dflt |{} 2 False True)J"},
    {"cond_expr", R"J({{ 'a' if t else 'b' }} {{ 'a' if n else 'b' }} |{{ 'a' if n }}| {{ 1 if s is string else 2 }})J",
     R"J(a b || 1)J"},
    {"filter_binds_tighter", R"J({{ l|length>1 }} {{ (l|length) + 1 }} {{ l|length + 1 }} {{ not l|length }} {{ s is defined and s|length > 0 }})J",
     R"J(True 4 4 False True)J"},
    {"access_method_vs_key", R"J({{ d.items is defined }} {{ d['items'] }} {{ d.a }} {{ d.get('zz', 'dflt') }} {{ d.get('a') }} {{ d.get('zz') }})J",
     R"J(True 5 1 dflt 1 None)J"},
    {"access_items", R"J({{ users[0].name }} {{ users[-1]['name'] }} {{ users.0.name }} {{ {'a': 1}.a }} {{ {1: 'x'}[1.0] }})J",
     R"J(bob cy bob 1 x)J"},
    {"access_missing", R"J({{ d.zz }}|{{ d.zz is defined }}|{{ l[10] }}|{{ l[10] is defined }}|{{ 'abc'['x'] }}|{{ none['x'] }}|{{ [1,2,3][1.0] }})J",
     R"J(|False||False|||)J"},
    {"slicing", R"J({{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ s[::2] }} {{ s[-3:] }} {{ u[1:4] }} {{ u[::-1] }} {{ l[5:] }} {{ s[1] }} {{ s[-1] }})J",
     R"J([1, 2] [3, 1] [2, 1, 3] HloWrd rld éll 文中 edocïnü dlröw olléh [] e d)J"},
    {"slicing_steps", R"J({% set a = [1,2,3] %}{{ a[0:2] }}{{ a[:] }}{{ a[::2] }}{{ a[-1:0:-1] }}{{ a[10:-10:-1] }}{{ 'abcdef'[1:5:2] }}{{ 'abc'[-10:2] }})J",
     R"J([1, 2][1, 2, 3][1, 3][3, 2][3, 2, 1]bdab)J"},
    {"loop_vars", R"J({% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }} {% endfor %})J",
     R"J(1/0/3/2/True/False/3//1 2/1/2/1/False/False/3/3/2 3/2/1/0/False/True/3/1/ )J"},
    {"loop_filter_else", R"J({% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for x in missing %}{{ x }}{% else %}nothing{% endfor %})J",
     R"J(3222|empty|nothing)J"},
    {"loop_break_continue", R"J({% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
     R"J(3)J"},
    {"loop_unpack", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }}{% endfor %}{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %})J",
     R"J(a=1;b=[1, 2, {'c': 'x'}];items=5;s=it's;n=None;1234123)J"},
    {"loop_strings_dicts", R"J({% for x in 'ab' %}{{ x }}{% endfor %}{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %})J",
     R"J(abpqabitemssn)J"},
    {"loop_nested", R"J({% for x in l %}{% for y in l %}{{ loop.index }}{{ x }}{% endfor %}{{ loop.index }}{% endfor %})J",
     R"J(132333111213121222323)J"},
    {"loop_cycle_changed", R"J({% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% if loop.changed(x > 1) %}!{% endif %}{% endfor %})J",
     R"J(a!b!a)J"},
    {"loop_recursive", R"J({% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}[{{ item.n }}{{ loop.depth }}{{ loop(item.c) }}]{% endfor %})J",
     R"J([a1[b2]])J"},
    {"loop_scoping", R"J({% set x = 'outer' %}{% for x in l %}{{ x }}{% endfor %}{{ x }}|{% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}{{ y }}{% endfor %}|{{ y }})J",
     R"J(312outer|a|)J"},
    {"range", R"J({{ range(5) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }} {{ range(-3) | list }})J",
     R"J([0, 1, 2, 3, 4] [1, 4, 7] [5, 3, 1] [] [])J"},
    {"namespace", R"J({% set ns = namespace(a=1, b=[]) %}{% for x in l %}{% set ns.a = ns.a + x %}{% set ns.b = ns.b + [x] %}{% endfor %}{{ ns.a }} {{ ns.b }})J",
     R"J(7 [3, 1, 2])J"},
    {"namespace_repr", R"J({% set ns = namespace() %}{% set ns.x = 1 %}{{ ns.x }}{{ ns }}{{ ns.y is defined }})J",
     R"J(1<Namespace {'x': 1}>False)J"},
    {"set_tuple", R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }})J",
     R"J(12(1, 2))J"},
    {"set_block", R"J({% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper | trim %} shout {% endset %}{{ y }})J",
     R"J([block 2]SHOUT)J"},
    {"set_before_after", R"J({{ x }}{% set x = 5 %}{{ x }})J",
     R"J(5)J"},
    {"with", R"J({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }})J",
     R"J(3)J"},
    {"filter_block", R"J({% filter upper %}hello {{ s }}{% endfilter %})J",
     R"J(HELLO HELLO WORLD)J"},
    {"dict_global", R"J({{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict({'k': 'v'}, z=0) }})J",
     R"J({'a': 1, 'b': 2} {'x': 1} {'k': 'v', 'z': 0})J"},
    {"macro_defaults", R"J({% macro m(a, b=2, c='x') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='z') }}{{ m(a=5) }})J",
     R"J([12x][13x][12z][52x])J"},
    {"macro_varargs_kwargs", R"J({% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }})J",
     R"J(1(2, 3){'x': 4})J"},
    {"macro_missing_param", R"J({% macro f(a) %}[{{ a }}]{% endmacro %}{{ f() }})J",
     R"J([])J"},
    {"macro_caller", R"J({% macro wrap(cls) %}<{{ cls }}>{{ caller() }}</{{ cls }}>{% endmacro %}{% call wrap('div') %}inside{% endcall %})J",
     R"J(<div>inside</div>)J"},
    {"macro_caller_args", R"J({% macro lst(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) lst([1,2]) %}<{{ x }}>{% endcall %})J",
     R"J(<1><2>)J"},
    {"macro_scope", R"J({% macro outer() %}{% set v = 'in' %}{{ v }}{% endmacro %}{% set v = 'out' %}{{ outer() }}{{ v }})J",
     R"J(inout)J"},
    {"macro_sees_globals_at_call", R"J({% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ m() }})J",
     R"J(changed)J"},
    {"macro_in_loop", R"J({% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %})J",
     R"J(12)J"},
    {"macro_recursive", R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }})J",
     R"J(120)J"},
    {"undefined_prints_empty", R"J({{ missing }}|{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ '' | d('e') }}|{{ none | default('x') }}|{{ missing is defined }}|{{ missing is undefined }})J",
     R"J(|dflt|e||None|False|True)J"},
    {"undefined_ops", R"J({{ missing | length }} {{ missing | list }} {{ missing | string }}|{{ missing | lower }}|{{ missing | join(',') }}|{{ 'x' in missing }} {{ missing | first is defined }})J",
     R"J(0 [] |||False False)J"},
    {"cond_expr_no_else", R"J({{ ('a' if n) is defined }})J",
     R"J(False)J"},
    {"filters_case", R"J({{ s | lower }} {{ s | upper }} {{ 'hello world-foo(bar' | title }} {{ 'hELLO wORLD' | capitalize }} {{ u | upper }} {{ u | title }})J",
     R"J(hello world HELLO WORLD Hello World-Foo(Bar Hello world HÉLLO WÖRLD ÜNÏCODE 中文 Héllo Wörld Ünïcode 中文)J"},
    {"filters_trim_replace", R"J({{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ s | replace('o', '0') }}|{{ s | replace('o', '0', 1) }})J",
     R"J(x|hi|Hell0 W0rld|Hell0 World)J"},
    {"filters_join_map", R"J({{ l | join(', ') }} {{ l | join }} {{ users | map(attribute='name') | join('|') }} {{ users | join(', ', attribute='name') }} {{ l | map('string') | list }})J",
     R"J(3, 1, 2 312 bob|Al|cy bob, Al, cy ['3', '1', '2'])J"},
    {"filters_first_last_length", R"J({{ l | first }} {{ l | last }} {{ l | length }} {{ s | count }} {{ d | length }} {{ u | length }} {{ d | first }} {{ d | last }})J",
     R"J(3 2 3 11 5 22 a n)J"},
    {"filters_sort", R"J({{ l | sort }} {{ l | sort(reverse=true) }} {{ users | sort(attribute='name') | map(attribute='name') | list }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }})J",
     R"J([1, 2, 3] [3, 2, 1] ['Al', 'bob', 'cy'] ['A', 'b', 'c'] ['A', 'b', 'c'])J"},
    {"filters_select", R"J({{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }} {{ users | rejectattr('age', 'defined') | list }} {{ users | selectattr('age') | list | length }} {{ [1,2,3] | select('>', 1) | list }} {{ ['a','b'] | select('in', 'abc') | list }})J",
     R"J(['bob', 'cy'] [{'name': 'cy', 'role': 'user'}] 2 [2, 3] ['a', 'b'])J"},
    {"filters_select_misc", R"J({{ l | select('odd') | list }} {{ l | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ none | select | list }})J",
     R"J([3, 1] [3, 1] [1, 'a'] [])J"},
    {"filters_unique_sum_minmax", R"J({{ [1, 2, 2, 'a', 'A'] | unique | list }} {{ l | sum }} {{ l | min }} {{ l | max }} {{ users[:2] | sum(attribute='age', start=1) }} {{ ['b', 'A'] | max }} {{ users | min(attribute='name') }})J",
     R"J([1, 2, 'a'] 6 1 3 14 b {'name': 'Al', 'age': 10, 'role': 'assistant'})J"},
    {"filters_map_default", R"J({{ users | map(attribute='age', default=0) | list }} {{ users | map(attribute='age') | list }} {{ ['a', 'b'] | map('upper') | list }})J",
     R"J([3, 10, 0] [3, 10, Undefined] ['A', 'B'])J"},
    {"filters_tojson", R"J({{ d | tojson }} {{ l | tojson }} {{ 'é"\n\u0001' | tojson }} {{ {} | tojson(indent=2) }} {{ [] | tojson }} {{ 1.0 | tojson }} {{ none | tojson }} {{ d | tojson(sort_keys=true) }} {{ (1, 2) | tojson }})J",
     R"J({"a": 1, "b": [1, 2, {"c": "x"}], "items": 5, "s": "it's", "n": null} [3, 1, 2] "é\"\n\u0001" {} [] 1.0 null {"a": 1, "b": [1, 2, {"c": "x"}], "items": 5, "n": null, "s": "it's"} [1, 2])J"},
    {"filters_tojson_indent", R"J({{ users | tojson(indent=2) }}
{{ {'a': [1, {'b': []}]} | tojson(indent='\t') }}
{{ d | tojson(separators=(',', ':')) }} {{ 'é' | tojson(ensure_ascii=true) }})J",
     R"J([
  {
    "name": "bob",
    "age": 3,
    "role": "user"
  },
  {
    "name": "Al",
    "age": 10,
    "role": "assistant"
  },
  {
    "name": "cy",
    "role": "user"
  }
]
{
	"a": [
		1,
		{
			"b": []
		}
	]
}
{"a":1,"b":[1,2,{"c":"x"}],"items":5,"s":"it's","n":null} "\u00e9")J"},
    {"filters_conversions", R"J({{ 'abc' | list }} {{ d | list }} {{ d | items | list }} {{ 'x' | string }} {{ 1 | string }} {{ l | string }} {{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '1.5' | float }} {{ 3 | float }} {{ 'ff' | int(base=16) }} {{ ' 1_0 ' | int }})J",
     R"J(['a', 'b', 'c'] ['a', 'b', 'items', 's', 'n'] [('a', 1), ('b', [1, 2, {'c': 'x'}]), ('items', 5), ('s', "it's"), ('n', None)] x 1 [3, 1, 2] 42 4 0 7 1.5 3.0 255 10)J"},
    {"filters_numbers", R"J({{ -3 | abs }} {{ -2.5 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.5 | round(0, 'floor') }} {{ 2.1 | round(0, 'ceil') }} {{ 3 | round }})J",
     R"J(3 2.5 2.57 2.0 4.0 2.67 2.0 3.0 3)J"},
    {"filters_indent", R"J({{ 'a
b
c' | indent }}|{{ 'a
b

c' | indent(2, true) }}|{{ 'a

b' | indent(2, blank=true) }}|{{ 'x' | indent('--', first=true) }})J",
     R"J(a
    b
    c|  a
  b

  c|a
  
  b|--x)J"},
    {"filters_text", R"J({{ 'one two  three' | wordcount }} {{ 'hello world this is long' | truncate(12) }} {{ 'hello world this is long' | truncate(12, true) }} {{ 'ab' | center(6) }}| {{ 'a b/c' | urlencode }})J",
     R"J(3 hello... hello wor...   ab  | a%20b/c)J"},
    {"filters_format", R"J({{ '%s=%s' | format('a', 2) }} {{ '%(x)s' | format(x=1) }} {{ 'x' | format() }})J",
     R"J(a=2 1 x)J"},
    {"filters_batch_slice", R"J({{ l | batch(2) | list }} {{ l | slice(2) | list }} {{ [1,2,3,4,5] | batch(2, 0) | list }} {{ [1,2,3,4,5] | slice(3, 'f') | list }})J",
     R"J([[3, 1], [2]] [[3, 1], [2]] [[1, 2], [3, 4], [5, 0]] [[1, 2], [3, 4], [5, 'f']])J"},
    {"filters_dictsort_reverse", R"J({{ d | dictsort | first }} {{ {'b': 1, 'A': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} {{ [3, 1] | reverse | list }} {{ 'abc' | reverse }})J",
     R"J(('a', 1) [('A', 2), ('b', 1)] [('b', 1), ('a', 2)] [1, 3] cba)J"},
    {"filters_escape_safe", R"J({{ '<a>&"\'' | e }} {{ '<b>' | safe }} {{ ('x' | safe) + '<y>' }} {{ '<y>' + ('x' | safe) }} {{ ('<' | safe) ~ '<' }} {{ 'Use ' | safe + d.s + ' now' }})J",
     R"J(&lt;a&gt;&amp;&#34;&#39; <b> x&lt;y&gt; &lt;y&gt;x << Use it&#39;s now)J"},
    {"filters_attr", R"J({{ users[0] | attr('name') }}|{{ users[0] | attr('zz') }}|{{ d | attr('items') is defined }})J",
     R"J(||True)J"},
    {"tests_types", R"J({{ n is none }} {{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ t is boolean }} {{ t is true }} {{ 's' is string }} {{ d is mapping }} {{ l is iterable }} {{ l is sequence }} {{ t is number }} {{ t is integer }} {{ d is sequence }} {{ s is iterable }} {{ 1 is iterable }} {{ missing is iterable }})J",
     R"J(True True True True True True True True True True True False True True False True)J"},
    {"tests_values", R"J({{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is in l }} {{ 'a' is eq 'a' }} {{ 'a' is equalto 'b' }} {{ 2 is gt 1 }} {{ 2 is lessthan 1 }} {{ 2 is ge 2 }} {{ 'x' is lower }} {{ 'X' is upper }})J",
     R"J(True True True False True True False True False True True True)J"},
    {"tests_negation", R"J({{ missing is none }} {{ none is defined }} {{ l is not none }} {{ 'abc' is not string }} {{ not missing is defined }})J",
     R"J(False True True False True)J"},
    {"tests_callable_filter", R"J({{ range is callable }} {{ s is callable }} {{ 'trim' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ none is sameas none }})J",
     R"J(True False True False True True)J"},
    {"str_split", R"J({{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ '  a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split(',') }} {{ ''.split() }} {{ ' a b c '.split(none, 1) }} {{ ' a b c '.rsplit(none, 1) }})J",
     R"J(['Hello', 'World'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a', 'b'] ['a,b', 'c'] [''] [] ['a', 'b c '] [' a b', 'c'])J"},
    {"str_case_affix", R"J({{ s.startswith('He') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }} {{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'abc'.capitalize() }} {{ 'Hello World'.swapcase() }} {{ "they're bill's".title() }})J",
     R"J(True False True HELLO WORLD hello world Hello World Abc hELLO wORLD They'Re Bill'S)J"},
    {"str_strip_find", R"J({{ '  xy  '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '  xy  '.lstrip() }}|{{ '  xy  '.rstrip() }}|{{ s.find('o') }}|{{ s.find('z') }}|{{ s.rfind('o') }}|{{ s.count('l') }}|{{ u.find('ö') }}|{{ s.index('W') }})J",
     R"J(xy|y|xy  |  xy|4|-1|7|3|7|6)J"},
    {"str_replace_join", R"J({{ s.replace('l', 'L') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ '\n'.join(['a', 'b']) }} {{ ', '.join(l | map('string')) }} {{ ''.join('abc') }})J",
     R"J(HeLLo WorLd bba -a-b-c- a
b 3, 1, 2 abc)J"},
    {"str_misc", R"J({{ 'abc'.partition('b') }} {{ 'a\nb\r\nc'.splitlines() }} {{ 'hello'.center(11, '*') }} {{ 'x'.ljust(3) }}|{{ 'x'.rjust(3, '0') }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'Hello'.removeprefix('He') }} {{ 'Hello'.removesuffix('lo') }})J",
     R"J(('a', 'b', 'c') ['a', 'b', 'c'] ***hello*** x  |00x 00042 -0042 llo Hel)J"},
    {"str_predicates", R"J({{ 'abc'.isalpha() }} {{ '12'.isdigit() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ ' '.isspace() }} {{ ''.isalpha() }} {{ 'a1'.isalnum() }} {{ 'Ab Cd'.istitle() }})J",
     R"J(True True True True True False True True)J"},
    {"str_format", R"J({{ '{} and {}'.format(1, 'b') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}-{y}'.format(x=1, y=2) }} {{ '{:>5}|{:<5}|{:^5}'.format('a', 'b', 'c') }} {{ '{:.2f}'.format(3.14159) }} {{ '{:05d}'.format(42) }} {{ '{:,}'.format(1234567) }})J",
     R"J(1 and b aba 1-2     a|b    |  c   3.14 00042 1,234,567)J"},
    {"str_format_more", R"J({{ '{:e}'.format(12345.678) }} {{ '{:g}'.format(1.5) }} {{ '{:%}'.format(0.25) }} {{ '{:#x}'.format(255) }} {{ '{:b}'.format(5) }} {{ '{!r}'.format('a') }} {{ '{:+.3}'.format(3.14159) }} {{ '{}'.format(1.0) }} {{ '{:10.3f}|'.format(-3.14159) }} {{ '{0[a]} {0[b][1]}'.format(d) }} {{ '{:*^9}'.format('x') }} {{ '{:=+6d}'.format(-3) }})J",
     R"J(1.234568e+04 1.5 25.000000% 0xff 101 'a' +3.14 1.0     -3.142| 1 2 ****x**** -    3)J"},
    {"str_percent", R"J({{ '%s-%d' % ('a', 3) }} {{ '%05.1f' % 3.14159 }} {{ '%(a)s' % {'a': 1} }} {{ '%r' % 'x' }} {{ '%-5s|' % 'ab' }} {{ '%5.2s|' % 'abc' }} {{ '%x %X %o' % (255, 255, 8) }} {{ '%+d % d' % (5, 5) }} {{ '%e' % 12345.678 }} {{ '%g' % 0.00001234 }} {{ '%%' % () }})J",
     R"J(a-3 003.1 1 'x' ab   |    ab| ff FF 10 +5  5 1.234568e+04 1.234e-05 %)J"},
    {"list_methods", R"J({{ l.count(1) }} {{ l.index(2) }} {{ (1, 2, 1).count(1) }} {{ l.copy() }} {{ d.copy() == d }})J",
     R"J(1 2 2 [3, 1, 2] True)J"},
    {"strftime_now", R"J({{ strftime_now('%Y-%m-%d %H:%M %A %b %d') }})J",
     R"J(2026-01-15 12:00 Thursday Jan 15)J"},
    {"cycler_joiner", R"J({% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set j = joiner('|') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %})J",
     R"J(abab3|1|2)J"},

};
// clang-format on

std::time_t golden_pinned_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// Test names already say which case; print just that on failure.
void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name;
}

class TemplateGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(TemplateGolden, MatchesJinja2) {
  const GoldenCase& c = GetParam();
  auto tmpl = ChatTemplate::parse(c.source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatTemplateInputs in;
  in.extra_context = nlohmann::ordered_json::parse(kContext);
  in.now = golden_pinned_now();
  auto out = tmpl->render(in);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, c.expected) << "template: " << c.source;
}

INSTANTIATE_TEST_SUITE_P(Language, TemplateGolden, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace sluice
