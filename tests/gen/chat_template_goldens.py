#!/usr/bin/env python3
"""chat_template_goldens.py - renders every template in tests/data/chat_templates with transformers'
own Jinja environment (the one apply_chat_template uses) for a fixed set of conversations, plus
small feature templates, and writes tests/data/chat_templates/goldens.json for tests/test_template.c.

    pip install transformers jinja2      # torch is not needed
    python3 tests/gen/chat_template_goldens.py

Rendering mirrors PreTrainedTokenizerBase.apply_chat_template(tokenize=False): messages go through
_normalize_chat_messages, then render_jinja_template(conversations=[...], tools=..., documents=None,
add_generation_prompt=..., bos_token=..., eos_token=..., **kwargs). strftime_now is made
deterministic by fixing datetime.now() to NOW; the C side gets the same instant (HMOE_TEMPLATE_NOW
or hm_jinja_params.now)."""
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "chat_templates")
NOW = _dt.datetime(2025, 3, 14, 12, 34, 56)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = _FixedDatetime  # strftime_now() reads the module global at call time

# bos/eos per template, as the real tokenizers define them
TOKENS = {
    "GLM-4.6": ("", "<|endoftext|>"),
    "GLM-4.7-Flash": ("", "<|endoftext|>"),
    "GLM-5.2": ("", "<|endoftext|>"),
    "GigaChat3-10B-A1.8B": ("<s>", "</s>"),
    "Kimi-K2-Instruct": ("[BOS]", "[EOS]"),
    "Kimi-K2-Thinking": ("[BOS]", "[EOS]"),
    "moonshotai-Kimi-K2": ("[BOS]", "[EOS]"),
    "LFM2-8B-A1B": ("<|startoftext|>", "<|im_end|>"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("<s>", "</s>"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("<s>", "</s>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("<s>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
}
DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
QWEN = (None, "<|im_end|>")  # Qwen tokenizers have no bos_token: it is not passed at all


def tokens_for(name):
    if name in TOKENS:
        return TOKENS[name]
    if "deepseek" in name.lower():
        return DEEPSEEK
    return QWEN


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number", "description": "second, e.g. 2.5"}},
            "required": ["a", "b"]}}},
]

CALL = {"id": "a1b2c3d4e", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_STR = {"id": "f5g6h7i8j", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2.5}"}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! What is 2+2?"}
A1 = {"role": "assistant", "content": "2+2 is 4."}
U2 = {"role": "user", "content": "And 3*3?"}

CONVERSATIONS = {
    "sys_user": {"messages": [SYS, U1]},
    "user_only": {"messages": [U1]},
    "multi_turn": {"messages": [SYS, U1, A1, U2]},
    "multi_turn_nosys": {"messages": [U1, A1, U2]},
    "ends_assistant": {"messages": [SYS, U1, A1]},
    "special_chars": {"messages": [
        {"role": "system", "content": "Quotes ' \" and backslash \\ and <tags> & {braces}"},
        {"role": "user", "content": "  Héllo wörld — 你好 🙂\n\tline two\n"},
        {"role": "assistant", "content": "\n\nOK: «done»  \n"},
        {"role": "user", "content": "{{ not a template }} {% neither %}"}]},
    "reasoning": {"messages": [
        U1,
        {"role": "assistant", "content": "2+2 is 4.", "reasoning_content": "Simple arithmetic: 2+2=4."},
        U2]},
    "reasoning_last": {"messages": [
        SYS, U1,
        {"role": "assistant", "content": "4", "reasoning_content": "The user wants 2+2."}]},
    "think_in_content": {"messages": [
        U1, {"role": "assistant", "content": "<think>\nadding\n</think>\n\nIt is 4."}, U2]},
    "tools_ask": {"messages": [SYS, {"role": "user", "content": "Weather in Paris?"}],
                  "tools": TOOLS},
    "tools_call": {"messages": [
        SYS, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather",
         "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}], "tools": TOOLS},
    "tools_call_done": {"messages": [
        {"role": "user", "content": "Weather in Paris, and 1+2.5?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL_STR]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "21 C, clear"},
        {"role": "tool", "tool_call_id": "f5g6h7i8j", "name": "add", "content": "3.5"},
        {"role": "assistant", "content": "It is 21 C and clear; 1+2.5 = 3.5."}], "tools": TOOLS},
    "tool_call_no_tools": {"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "sunny"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                     {"type": "text", "text": "Part two."}]}]},
    "two_users": {"messages": [U1, U2]},
    "assistant_first": {"messages": [A1, U1]},
}

# (case name, conversation, add_generation_prompt, kwargs)
CASES = [
    ("sys_user+gen", "sys_user", True, {}),
    ("sys_user", "sys_user", False, {}),
    ("user_only+gen", "user_only", True, {}),
    ("multi_turn+gen", "multi_turn", True, {}),
    ("multi_turn_nosys+gen", "multi_turn_nosys", True, {}),
    ("ends_assistant", "ends_assistant", False, {}),
    ("special_chars+gen", "special_chars", True, {}),
    ("reasoning+gen", "reasoning", True, {}),
    ("reasoning_last", "reasoning_last", False, {}),
    ("think_in_content+gen", "think_in_content", True, {}),
    ("thinking_on+gen", "multi_turn", True, {"enable_thinking": True, "thinking": True}),
    ("thinking_off+gen", "multi_turn", True, {"enable_thinking": False, "thinking": False}),
    ("reasoning_thinking_off+gen", "reasoning", True, {"enable_thinking": False}),
    ("effort_high+gen", "sys_user", True, {"reasoning_effort": "high"}),
    ("tools_ask+gen", "tools_ask", True, {}),
    ("tools_call+gen", "tools_call", True, {}),
    ("tools_call_done", "tools_call_done", False, {}),
    ("tools_call_thinking_off+gen", "tools_call", True, {"enable_thinking": False}),
    ("tool_call_no_tools+gen", "tool_call_no_tools", True, {}),
    ("content_parts+gen", "content_parts", True, {}),
    ("two_users+gen", "two_users", True, {}),
    ("assistant_first+gen", "assistant_first", True, {}),
]

# Feature templates rendered with the same environment: (name, source, context)
UNITS = [
    ("ws_trim_lstrip", "a\n  {% if true %}\n    x\n  {% endif %}\nb\n", {}),
    ("ws_minus", "a  {%- if true -%}  x  {%- endif -%}  b", {}),
    ("ws_plus", "a\n  {%+ if true %}x{% endif +%}\nb", {}),
    ("ws_var", "a\n  {{ 1 }}\n  {{- 2 -}}\n  c", {}),
    ("ws_comment", "a\n  {# c #}\nb {#- c -#} c", {}),
    ("trailing_newline", "x\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("raw", "{% raw %}{{ x }}{% endraw %}", {}),
    ("print_values", "{{ none }} {{ true }} {{ false }} {{ 1.0 }} {{ 1.5e20 }} {{ 0.1 }} {{ 1e-7 }} "
     "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ (1, 'b') }} {{ undef }}", {}),
    ("print_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'a\\nb', 'both \\' \"'] }}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
     "{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 + 2.0 }} {{ 7.5 // 2 }} {{ 10 / 5 }} {{ -3 }} {{ 3 - 5 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ undef ~ [1] }}", {}),
    ("compare", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ 1 != 2 }} "
     "{{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ '' or [] }} {{ none and 1 }}", {}),
    ("inline_if", "{{ 'a' if x else 'b' }}|{{ 'c' if not x }}|{{ 1 if 0 }}", {"x": 0}),
    ("loop_vars", "{% for i in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
     "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}"
     "{{ loop.nextitem }}{{ loop.cycle('x', 'y') }};{% endfor %}", {}),
    ("loop_else", "{% for i in [] %}x{% else %}empty{% endfor %}{% for i in [1] %}{{ i }}{% else %}no{% endfor %}", {}),
    ("loop_filter", "{% for i in range(10) if i is odd %}{{ i }}{{ loop.length }},{% endfor %}", {}),
    ("loop_break", "{% for i in range(10) %}{% if i == 5 %}{% break %}{% endif %}{% if i is even %}{% continue %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"x": 1, "y": [2]}}),
    ("loop_dict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("loop_scope", "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("nested_loop", "{% for i in [1,2] %}{% for j in [3,4] %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("namespace", "{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}", {}),
    ("set_block", "{% set x %}hello {{ 1 + 1 }}{% endset %}{{ x | upper }}|{% set y | trim %}  pad  {% endset %}[{{ y }}]", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("macro", "{% macro m(a, b='d', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}", {}),
    ("macro_caller", "{% macro wrap(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call wrap('b') %}inner{% endcall %}"
     "{% macro li(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) li([1,2]) %}({{ v }}){% endcall %}", {}),
    ("macro_scope", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ messages|length }}{% endmacro %}{{ m() }}{% set g = 'H' %}{{ m() }}", {"messages": [1, 2]}),
    ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    ("generation", "{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("tests", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
     "{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}"
     "{{ 'a' is sequence }}{{ 1 is even }}{{ 1 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}"
     "{{ 2 is equalto 3 }}{{ 1 is in [1] }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ x is not none }}"
     "{{ true is true }}{{ 0 is false }}{{ range is callable }}{{ true is integer }}{{ true is number }}"
     "{{ 3 is gt 2 }}{{ 3 is le 2 }}{{ 1 is sameas 1 }}", {"x": 1}),
    ("f_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n<' | tojson }}|{{ [1.0, 2, none, true] | tojson }}",
     {"d": {"b": [1, {"c": "ü"}], "a": None, "e": {}, "f": []}}),
    ("f_tojson_sep", "{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}", {"d": {"b": 1, "a": [2, 3]}}),
    ("f_strings", "{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}"
     "|{{ 'a-b-c' | replace('-', '+') }}|{{ 'a-b-c' | replace('-', '', 1) }}|{{ 'ab' | upper }}{{ 'AB' | lower }}"
     "|{{ 'abc' | length }}|{{ 'a b  c' | wordcount }}|{{ 'ab' | center(6) }}|{{ '<a&\"b>' | e }}|{{ 'x' | string }}"
     "|{{ 'abc' | first }}{{ 'abc' | last }}|{{ 'abc' | reverse }}|{{ 'a\\nb' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, true) }}"
     "|{{ 'a\\n\\nb' | indent(2, true, true) }}|{{ '%s-%d' | format('x', 3) }}|{{ 'x' | safe }}", {}),
    ("f_numbers", "{{ '42' | int }}{{ 'x' | int }}{{ '3.7' | float }}{{ 3.7 | int }}{{ -3 | abs }}{{ 2.5 | round }}"
     "{{ 3.14159 | round(2) }}{{ 3.1 | round(0, 'ceil') }}{{ 3.9 | round(0, 'floor') }}{{ [1, 2.5] | sum }}"
     "{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ '0x1A' | int(0, 16) }}{{ 1 | float }}", {}),
    ("f_lists", "{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}"
     "{{ [1, 2, 1, 3] | unique | list }}{{ [1, 2, 3] | reverse | list }}{{ [1, 2, 3] | join('-') }}"
     "{{ [1, 2, 3, 4, 5] | batch(2) | list }}{{ [1, 2] | first }}{{ [1, 2] | last }}{{ [] | first }}"
     "{{ [1, 2] | length }}{{ [1, 2] | count }}{{ 'ab' | list }}{{ {'a': 1} | list }}", {}),
    ("f_attrs", "{{ xs | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}|"
     "{{ xs | rejectattr('role', 'eq', 'user') | map(attribute='c') | list }}|{{ xs | map(attribute='role') | unique | list }}|"
     "{{ xs | selectattr('flag') | list | length }}|{{ [0, 1, 2, none] | select | list }}|{{ [0, 1, 2] | reject('odd') | list }}|"
     "{{ xs | map(attribute='missing', default='dflt') | list }}|{{ ['a', 'b'] | map('upper') | list }}|"
     "{{ xs | sort(attribute='c') | map(attribute='c') | join }}|{{ xs | sum(attribute='n') }}|{{ xs | join(',', attribute='c') }}",
     {"xs": [{"role": "user", "c": "z", "n": 1}, {"role": "assistant", "c": "y", "flag": True, "n": 2},
             {"role": "user", "c": "x", "n": 3}]}),
    ("f_dicts", "{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ d | length }}"
     "|{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("f_default", "{{ x | default('d') }}{{ none | default('d') }}{{ none | default('d', true) }}{{ '' | d('e', true) }}"
     "{{ 0 | default(5) }}{{ y | default(y2) | default('z') }}", {}),
    ("str_methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a.b.c'.rstrip('.c') }}"
     "|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}"
     "|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', 'y') }}"
     "|{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}|{{ 'abcb'.find('b') }}{{ 'abc'.find('z') }}"
     "|{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{a}!'.format(a=2) }}"
     "|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'a1'.isalnum() }}|{{ 'a\\nb'.splitlines() }}"
     "|{{ 'abc'.rfind('c') }}|{{ 'a=b=c'.partition('=') }}|{{ 'ab'.removeprefix('a') }}|{{ 'x'.zfill(3) }}"
     "|{{ ' \\n'.strip() == '' }}|{{ 'a\\tb'.split() }}|{{ 'abc'.index('c') }}|{{ 'aBc'.swapcase() }}", {}),
    ("dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}|{{ d.keys() | list }}|{{ d.values() | list }}"
     "|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{{ d.a }}{{ d['b'] }}{{ d.zz }}|{{ d.items() | list }}", {"d": {"a": 1, "b": 2}}),
    ("list_methods", "{{ xs.index(2) }}{{ xs.count(1) }}|{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}"
     "|{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ xs[5:] }}{{ xs[-10:1] }}", {"xs": [1, 2, 3, 1]}),
    ("attr_item_fallback", "{{ d.items is callable }}{{ m.content }}{{ m['content'] }}{{ xs.0 }}{{ m.missing is defined }}", {"m": {"content": "c"}, "xs": ["z"], "d": {"items": 3}}),
    ("dict_global", "{{ dict(a=1, b=2) }}{{ dict(a=1).a }}", {}),
    ("range", "{{ range(3) | list }}{{ range(1, 4) | list }}{{ range(5, 0, -2) | list }}", {}),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y %B %A %a') }}", {}),
    ("raise", "{% if x %}{{ raise_exception('boom: ' ~ x) }}{% endif %}ok", {"x": "bad"}),
    ("undefined_attr_error", "{{ undef.attr }}", {}),
    ("undefined_add_error", "{{ undef + 1 }}", {}),
    ("type_error_add", "{{ 'a' + 1 }}", {}),
    ("none_length_error", "{{ none | length }}", {}),
    ("unsafe_append", "{% set xs = [] %}{% set _ = xs.append(1) %}{{ xs }}", {}),
    ("unknown_filter_in_if", "{% if false %}{{ x | nosuchfilter }}{% endif %}ok", {}),
    ("unknown_filter_toplevel", "{{ x | nosuchfilter }}", {}),
    ("unknown_test_in_if", "{% if x is nosuchtest %}a{% endif %}", {"x": 1}),
    ("unclosed_if", "{% if true %}x", {}),
    ("unknown_tag", "{% frobnicate %}", {}),
    ("bad_expr", "{{ 1 + }}", {}),
    ("unclosed_var", "{{ x ", {}),
    ("unexpected_end", "{% endfor %}", {}),
    ("escape_strings", "{{ 'a\\tb\\x41\\u00e9\\'' }}|{{ \"\\d\" }}|{{ 'a' 'b' }}", {}),
    ("json_input", "{{ x }}|{{ x | tojson }}|{{ x.a[1] }}|{{ f }}|{{ big }}|{{ neg }}", {"x": {"a": [1, "two", 3.5, None, True]}, "f": 2.0, "big": 12345678901234, "neg": -0.5}),
    ("int_float_print", "{{ 3 / 1 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.123 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 1_000 }}", {}),
    ("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}{{ 'T' if undef else 'F' }}", {}),
    ("string_iter_unicode", "{% for c in 'aé🙂' %}[{{ c }}]{% endfor %}", {}),
    ("cycler_joiner", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{% set j = joiner('|') %}{% for i in [1,2,3] %}{{ j() }}{{ i }}{% endfor %}", {}),
    ("loop_changed", "{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}", {}),
    ("is_not", "{{ x is not defined }}{{ x is not string }}{{ not x is defined }}", {"x": 1}),
    ("filter_chain_neg", "{{ -1 | abs }}{{ (-1) | abs }}{{ - 'a' | length }}", {}),
    ("tuple_print", "{{ (1, 2) }}{{ () }}{{ ('a',) }}", {}),
    ("in_ops", "{{ 'x' in ['x'] }}{{ 'x' in 'yx' }}{{ 1 in [1.0] }}{{ none in [none] }}", {}),
    ("set_scope_if", "{% if true %}{% set a = 1 %}{% endif %}{{ a }}{% for i in [1] %}{% set b = 2 %}{% endfor %}{{ b }}", {}),
    ("capitalize_title", "{{ 'hello WORLD foo-bar' | title }}|{{ \"it's\" | title }}|{{ 'ABC' | capitalize }}", {}),
    ("string_compare_sort", "{{ ['b', 'a', 'C'] | sort(case_sensitive=true) }}{{ [[2, 'a'], [1, 'b']] | sort }}", {}),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", {}),
    ("macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("deep_nesting_ok", "{{ " + "(" * 30 + "1" + ")" * 30 + " }}", {}),
    ("nested_data", "{{ m.tool_calls[0].function.arguments.city }}{{ m.tool_calls[0]['function']['name'] }}",
     {"m": {"tool_calls": [{"function": {"name": "f", "arguments": {"city": "Paris"}}}]}}),
    ("items_filter_undefined", "[{% for k, v in undef | items %}{{ k }}{% endfor %}]", {}),
    ("mapping_tests", "{{ ns is mapping }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ none is string }}", {"ns": {}}),
    ("string_mul_and_slices", "{{ '=' * 5 }}{{ 'abcdef'[-3:] }}{{ 'abcdef'[1:-1:2] }}", {}),
    ("float_arith_print", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2.5 * 2 }} {{ 10 % 3.5 }}", {}),
    ("title_separators", "{{ 'a(b)c [d]e <f>g {h}i x-y it\\'s' | title }}", {}),
    ("strip_chars_unicode", "{{ '«x»'.strip('«»') }}|{{ 'é' | center(5) }}|{{ 'ab' | center(5) }}", {}),
    ("replace_empty", "{{ 'ab'.replace('', '-') }}|{{ 'ab'.replace('', '-', 2) }}", {}),
    ("json_unicode_escapes", "{{ 'tab\\tnl\\ncr\\rbs\\\\q\"ctl\\x01del\\x7f' | tojson }}", {}),
]

FEATURE_EXTRA_TEMPLATES = {}


def render_case(src, conv, agp, kwargs, bos, eos):
    msgs = ctu._normalize_chat_messages(conv["messages"])
    kw = {}
    if bos is not None:
        kw["bos_token"] = bos
    if eos is not None:
        kw["eos_token"] = eos
    kw.update(kwargs)
    out, _ = ctu.render_jinja_template(conversations=[msgs], tools=conv.get("tools"), documents=None,
                                       chat_template=src, add_generation_prompt=agp, **kw)
    return out[0]


def result(fn):
    try:
        return {"expected": fn()}
    except Exception as e:  # the golden records the failure; our render must fail too
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    out = {"generator": "tests/gen/chat_template_goldens.py", "transformers": transformers.__version__,
           "jinja2": jinja2.__version__, "now": NOW.strftime("%Y-%m-%dT%H:%M:%S"),
           "conversations": CONVERSATIONS, "templates": [], "units": []}
    names = sorted(f for f in os.listdir(DATA) if f.endswith(".jinja"))
    for fname in names:
        name = fname[: -len(".jinja")]
        with open(os.path.join(DATA, fname), encoding="utf-8") as f:
            src = f.read()
        bos, eos = tokens_for(name)
        t = {"file": fname, "bos_token": bos, "eos_token": eos, "cases": []}
        for cname, conv, agp, kwargs in CASES:
            c = {"name": cname, "conversation": conv, "add_generation_prompt": agp, "kwargs": kwargs}
            c.update(result(lambda: render_case(src, CONVERSATIONS[conv], agp, kwargs, bos, eos)))
            t["cases"].append(c)
        out["templates"].append(t)
    for uname, src, ctx in UNITS:
        u = {"name": uname, "template": src, "context": ctx}
        u.update(result(lambda: ctu._compile_jinja_template(src).render(**ctx)))
        out["units"].append(u)
    path = os.path.join(DATA, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    nt = sum(len(t["cases"]) for t in out["templates"])
    ne = sum(1 for t in out["templates"] for c in t["cases"] if "error" in c)
    nu = sum(1 for u in out["units"] if "error" in u)
    print(f"{path}: {len(out['templates'])} templates x {len(CASES)} cases = {nt} ({ne} errors), "
          f"{len(out['units'])} units ({nu} errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
