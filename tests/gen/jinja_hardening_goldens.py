#!/usr/bin/env python3
"""jinja_hardening_goldens.py - hostile and edge-case templates rendered with transformers' own
Jinja environment (sandboxed jinja2 3.1.x), written to tests/data/chat_templates/hardening.json for
tests/test_template.c: each unit's output, or the error jinja2 raises (where our engine must fail
too). A unit with "ours_error" is a documented difference (docs/templates.md: big integers,
complex numbers, named escapes): our engine fails with that message. Cases that need huge inputs
(deep nesting, long chains, big strings) are built in C.

    pip install transformers jinja2      # torch is not needed
    python3 tests/gen/jinja_hardening_goldens.py
"""
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "chat_templates", "hardening.json")

NS_SELF = "{% set ns = namespace(a=1) %}{% set ns.b = ns %}"
DEEP = ("{% set ns = namespace(x=[]) %}{% for i in range(N) %}{% set ns.x = [ns.x] %}{% endfor %}")

UNITS = [
    # recursive namespaces print as {...}; serializing them fails
    ("ns_self_print", NS_SELF + "{{ ns }}|{{ [ns] }}|{{ ns|pprint }}|{{ ns == ns }}|{{ ns.b.b.a }}", {}),
    ("ns_self_nested", "{% set ns = namespace(a=1) %}{% set ns.b = [ns, {'k': ns}, (ns,)] %}{{ ns }}", {}),
    ("ns_two_cycle", "{% set p = namespace() %}{% set q = namespace(p=p) %}{% set p.q = q %}{{ p }}|{{ q }}", {}),
    ("ns_self_tojson", NS_SELF + "{{ ns|tojson }}", {}),
    ("ns_self_string", NS_SELF + "{{ ns|string|length }}", {}),
    # nested data within the limits behaves as jinja2
    ("deep_100_print", DEEP.replace("N", "100") + "{{ ns.x|string|length }}{{ ns.x == ns.x }}", {}),
    ("deep_100_tojson", DEEP.replace("N", "100") + "{{ ns.x|tojson|length }}", {}),
    ("deep_100_sort", DEEP.replace("N", "100") + "{{ [ns.x, ns.x]|sort|length }}{{ ns.x in [ns.x] }}", {}),
    # deeper than Python's recursion limit: jinja2 fails, so do we
    ("deep_5000_print", DEEP.replace("N", "5000") + "{{ ns.x }}", {}),
    ("deep_5000_eq", DEEP.replace("N", "5000") + "{% set a = ns.x %}" + DEEP.replace("N", "5000") + "{{ a == ns.x }}", {}),
    ("deep_5000_tojson", DEEP.replace("N", "5000") + "{{ ns.x|tojson }}", {}),
    ("deep_5000_in", DEEP.replace("N", "5000") + "{% set a = ns.x %}" + DEEP.replace("N", "5000") + "{{ a in [ns.x] }}", {}),
    ("deep_5000_max", DEEP.replace("N", "5000") + "{% set a = ns.x %}" + DEEP.replace("N", "5000") + "{{ [a, ns.x]|max }}", {}),
    ("deep_5000_sort", DEEP.replace("N", "5000") + "{% set a = ns.x %}" + DEEP.replace("N", "5000") + "{{ [a, ns.x]|sort }}", {}),
    ("deep_tuple_unique", "{% set ns = namespace(x=()) %}{% for i in range(5000) %}{% set ns.x = (ns.x,) %}{% endfor %}{{ [ns.x]|unique|list }}", {}),
    # hashing: equal numbers are one key, unhashable keys fail
    ("dict_numeric_keys", "{{ {1: 'a', 1.0: 'b', true: 'c', 2: 'd'} }}|{{ {0: 1}[false] }}|{{ {2.0: 'x'}[2] }}", {}),
    ("dict_tuple_keys", "{{ {(1, 2): 3}[(1, 2)] }}|{{ (1, 2) in {(1, 2): 0} }}|{{ [(1,), (1,), (1.0,)]|unique|list }}", {}),
    ("dict_list_key", "{{ {[1]: 2} }}", {}),
    ("dict_list_in", "{{ [1] in {} }}", {}),
    ("dict_list_getitem", "{{ {}[[1]] is defined }}", {}),
    ("dict_list_get", "{{ {}.get([1]) }}", {}),
    ("unique_lists", "{{ [[1], [1]]|unique|list }}", {}),
    ("dict_many_keys", "{% set ns = namespace(d={}) %}{% set d = dict(k0=0, k1=1, k2=2, k3=3, k4=4, k5=5, k6=6, k7=7, k8=8, k9=9) %}{{ d.k9 }}{{ d['k0'] }}{{ 'k5' in d }}{{ d|length }}{{ d == dict(d) }}{{ d|dictsort|first }}", {}),
    ("context_many_keys", "{{ obj|length }}|{{ obj.k1234 }}|{{ 'k999' in obj }}|{{ obj.get('nope', 'd') }}", {"obj": {f"k{i}": i for i in range(2000)}}),
    # format: widths and precisions of any size; Python's conversions
    ("format_width_600", "{{ '%600d|%-600s|%0600.3f'|format(7, 'x', 2.5) }}", {}),
    ("format_prec_600", "{{ '%.600f'|format(0.1) }}|{{ '%.600e'|format(1.0) }}|{{ '%.600g'|format(0.1) }}", {}),
    ("format_prec_2000", "{{ '%.2000f'|format(0.1) }}|{{ '%.1500e'|format(3.0) }}", {}),
    ("format_flags", "{{ '%+d|% d|%05d|%-5d|%x|%#x|%#X|%#o|%o|%.3d|%08.3d|%+08.2f|%e|%G|%c|%c|%5c|%%'|format(5, 5, -5, 5, 255, 255, 255, 8, 8, 5, -5, 3.14159, 12345.678, 0.00001, 65, 'é', 'x') }}", {}),
    ("format_str_prec", "{{ '[%.2s|%5s|%-5s|%5.1s|%r|%.3r]'|format('héllo', 'é', 'é', 'ab', 'q', 'abc') }}", {}),
    ("format_float_to_int", "{{ '%d %i %u'|format(3.9, -3.9, true) }}", {}),
    ("format_nan_inf", "{% set inf = sinf|float %}{% set nan = snan|float %}{{ '%f %f %e %+f %5.1f %d %F %010.1f'|format(nan, inf, -inf, inf, nan, 2, inf, -inf) }}", {"sinf": "inf", "snan": "nan"}),
    ("format_x_float", "{{ '%x'|format(3.0) }}", {}),
    ("format_d_str", "{{ '%d'|format('3') }}", {}),
    ("format_nan_int", "{{ '%d'|format('nan'|float) }}", {}),
    ("format_inf_int", "{{ '%d'|format('inf'|float) }}", {}),
    ("format_too_few", "{{ '%s %s'|format(1) }}", {}),
    ("format_too_many", "{{ '%s'|format(1, 2) }}", {}),
    ("format_bad_conv", "{{ '%y'|format(1) }}", {}),
    ("format_incomplete", "{{ 'abc %'|format(1) }}", {}),
    ("format_length_mod", "{{ '%ld %hd %Lf'|format(1, 2, 0.5) }}", {}),
    ("format_neg_zero", "{{ '%f %+.1f %e'|format(-0.0, -0.0, -0.0) }}", {}),
    # clamps that jinja2 does not have
    ("center_big", "{{ 'ab'|center(2001) }}|{{ ('x'|center(1000000))|length }}", {}),
    ("center_unicode", "{{ 'é'|center(6) }}|{{ 'ab'|center(-3) }}", {}),
    ("indent_big", "{{ 'a\nb\n\nc'|indent(5000) }}", {}),
    ("indent_big_first", "{{ 'a\nb'|indent(4100, true) }}|{{ 'a\nb'|indent(-2) }}|{{ 'a\nb'|indent('->') }}", {}),
    ("tojson_indent_big", "{{ {'a': [1, {'b': 2}]}|tojson(indent=100) }}", {}),
    ("tojson_indent_neg", "{{ {'a': [1, 2]}|tojson(indent=-1) }}|{{ [1]|tojson(indent=0) }}", {}),
    ("tojson_indent_str", "{{ {'a': [1, 2]}|tojson(indent='\t') }}", {}),
    ("tojson_separators", "{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, indent=1) }}", {}),
    # round: Python's round() for any precision, ints stay ints
    ("round_far", "{{ 1.5|round(400) }}|{{ 1.5|round(-400) }}|{{ -1.5|round(-400) }}|{{ 1.5|round(323) }}|{{ 1.5|round(308) }}|{{ 123.456|round(-308) }}", {}),
    ("round_ints", "{{ 15|round(-1) }}|{{ 25|round(-1) }}|{{ -15|round(-1) }}|{{ 5|round(2) }}|{{ 1234567|round(-3) }}|{{ 7|round(-30) }}|{{ true|round }}|{{ 4000000000000000000|round(-19) }}|{{ -9223372036854775807|round(-18) }}", {}),
    ("round_int_big", "{{ 9223372036854775807|round(-19) }}", {}, "beyond 64 bits"),
    ("round_floats", "{{ 2.675|round(2) }}|{{ 0.5|round }}|{{ 1.5|round }}|{{ 2.5|round }}|{{ -0.4|round }}|{{ 95.0|round(-1) }}|{{ 85.0|round(-1) }}|{{ 50.0|round(-2) }}|{{ 51.0|round(-2) }}|{{ 150.0|round(-2) }}|{{ 0.125|round(2) }}|{{ 1e300|round(-300) }}|{{ 12345.678|round(-2) }}|{{ 1e-5|round(3) }}", {}),
    ("round_ceil_floor", "{{ 1.234|round(2, 'ceil') }}|{{ 1.234|round(1, 'floor') }}|{{ 15|round(-1, 'ceil') }}|{{ 15|round(2, 'floor') }}|{{ -1.5|round(0, 'floor') }}|{{ 1.5|round(-2, 'ceil') }}", {}),
    ("round_ceil_far", "{{ 1.5|round(400, 'ceil') }}", {}),
    ("round_floor_neg_far", "{{ 1.5|round(-400, 'floor') }}", {}),
    ("round_nan_inf", "{% set inf = sinf|float %}{{ (snan|float)|round(2) }}|{{ inf|round(2) }}|{{ -inf|round }}", {"sinf": "inf", "snan": "nan"}),
    ("round_inf_ceil", "{{ ('inf'|float)|round(0, 'ceil') }}", {}),
    ("round_nan_floor", "{{ ('nan'|float)|round(0, 'floor') }}", {}),
    ("round_bad_method", "{{ 1.5|round(0, 'up') }}", {}),
    # int(): huge values, bases, Python's syntax; float()
    ("int_huge_str", "{{ '99999999999999999999'|int }}", {}, "beyond 64 bits"),
    ("int_huge_neg_str", "{{ '-99999999999999999999'|int }}", {}, "beyond 64 bits"),
    ("int_huge_float_str", "{{ '1e30'|int }}", {}, "beyond 64 bits"),
    ("int_limits", "{{ '9223372036854775807'|int }}|{{ '-9223372036854775808'|int }}|{{ ' 42 '|int }}|{{ '4_2'|int }}|{{ '+7'|int }}", {}),
    ("int_bases", "{{ '0x1f'|int(base=16) }}|{{ '0x1f'|int(0, 0) }}|{{ '1f'|int(base=16) }}|{{ '0b101'|int(0, 2) }}|{{ 'z'|int(3, 36) }}|{{ '10'|int(base=1) }}|{{ '010'|int(0, 0) }}|{{ '0o17'|int(0, 0) }}|{{ '0x_1f'|int(0, 16) }}|{{ '17'|int(0, 8) }}|{{ '19'|int(-1, 8) }}|{{ 'ff'|int(-1, 37) }}|{{ '12'|int(base='x') }}", {}),
    ("int_float_fallback", "{{ '42.9'|int }}|{{ '1e3'|int }}|{{ '1_0.5'|int }}|{{ 'nan'|int(-1) }}|{{ '1__0'|int(-1) }}|{{ '_1'|int(-1) }}|{{ '0x1p3'|int(-1) }}|{{ 'inf'|int(-1) if false else 1 }}|{{ ''|int(-2) }}|{{ '.5'|int }}|{{ '5.'|int }}|{{ none|int(-3) }}|{{ [1]|int(-4) }}", {}),
    ("int_inf_str", "{{ 'inf'|int }}", {}),
    ("int_inf_float", "{{ ('inf'|float)|int }}", {}),
    ("int_big_float", "{{ 1e19|int }}", {}, "beyond 64 bits"),
    ("int_floats", "{{ 3.99|int }}|{{ -3.99|int }}|{{ ('nan'|float)|int(-5) }}|{{ 9.2e18|int }}|{{ '-inf'|int(-6) }}", {}),
    ("float_filter", "{{ '1_000.5'|float }}|{{ ' 2.5 '|float }}|{{ 'inf'|float }}|{{ '-Infinity'|float }}|{{ 'nan'|float }}|{{ '0x10'|float(-1) }}|{{ '1e'|float(-1) }}|{{ 'abc'|float }}|{{ 7|float }}|{{ '1__0'|float(-1) }}", {}),
    # arithmetic: Python's results, or its errors
    ("mod_int64_min", "{{ (-9223372036854775807 - 1) % -1 }}|{{ (-9223372036854775807 - 1) % 7 }}|{{ -7 % 3 }}|{{ 7 % -3 }}", {}),
    ("floordiv_int64_min", "{{ (-9223372036854775807 - 1) // -1 }}", {}, "beyond 64 bits"),
    ("mod_neg_zero", "{{ -0.0 % 1 }}|{{ 0.0 % -1 }}|{{ -1.0 % 1 }}|{{ 5.5 % -2 }}|{{ -5.5 % 2 }}|{{ 1 % 0.3 }}", {}),
    ("floordiv_floats", "{{ 1 // 0.1 }}|{{ -1 // 0.1 }}|{{ 7.5 // 2 }}|{{ -7.5 // 2 }}|{{ 0.0 // -1 }}|{{ 1e308 // 1e-308 }}", {}),
    ("pow_zero_neg", "{{ 0 ** -1 }}", {}),
    ("pow_zero_float_neg", "{{ 0.0 ** -1.5 }}", {}),
    ("pow_values", "{{ 2 ** -1 }}|{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 2.0 ** 0.5 }}|{{ 0 ** 0 }}|{{ (-8) ** 2.0 }}|{{ 1 ** 1e400 }}|{{ 10.0 ** -400 }}", {}),
    ("pow_overflow", "{{ 10.0 ** 400 }}", {}),
    ("pow_int_overflow", "{{ 2 ** 64 }}", {}, "beyond 64 bits"),
    ("pow_complex", "{{ (-8) ** 0.5 }}", {}, "complex"),
    ("add_int_overflow", "{% set m = 9223372036854775807 %}{{ m + 1 }}", {}, "beyond 64 bits"),
    ("mul_int_overflow", "{% set m = 4611686018427387904 %}{{ m * 2 }}", {}, "beyond 64 bits"),
    ("neg_int_min", "{% set m = -9223372036854775807 - 1 %}{{ -m }}", {}, "beyond 64 bits"),
    ("abs_int_min", "{% set m = -9223372036854775807 - 1 %}{{ m|abs }}", {}, "beyond 64 bits"),
    ("sum_overflow", "{{ [9223372036854775807, 1]|sum }}", {}, "beyond 64 bits"),
    ("int_float_eq", "{{ 9007199254740993 == 9007199254740992.0 }}|{{ 1 == 1.0 }}|{{ 2 ** 53 + 1 in [9007199254740992.0] }}", {}),
    # string literals: \\N{...} names are not supported (jinja2 knows every Unicode name)
    ("escape_named", "{{ '\\N{BULLET}' }}", {}, "\\N{...} escapes"),
    ("escape_named_unknown", "{{ '\\N{NOSUCHNAME}' }}", {}),
    ("escapes_other", "{{ '\\x41\\u00e9\\U0001F600\\101\\q\\0' | length }}|{{ '\\x41\\u00e9\\101\\q' }}", {}),
    # slices of strings by code point
    ("slice_unicode", "{{ 'héllo wörld'[1:4] }}|{{ 'héllo'[-2:] }}|{{ 'héllo'[::2] }}|{{ 'héllo'[::-1] }}|{{ 'héllo'[10:] }}|{{ 'héllo'[3:1] }}", {}),
    # expression and block depth: jinja2 fails near Python's limits, we below them
    ("chain_add_90", "{% set x = 1 %}{{ x" + "+x" * 89 + " }}", {}),
    ("chain_add_300", "{% set x = 1 %}{{ x" + "+x" * 299 + " }}", {}),
    ("chain_filter_90", "{{ 'A'" + "|lower" * 90 + " }}", {}),
    ("chain_filter_300", "{% set x = 'A' %}{{ x" + "|lower" * 300 + " }}", {}),
    ("chain_attr_300", "{% set x = namespace(y=1) %}{{ x" + ".y" * 300 + " }}", {}),
    ("chain_not_300", "{% set x = 1 %}{{ " + "not " * 300 + "x }}", {}),
    ("chain_and_300", "{% set x = 1 %}{{ x" + " and x" * 300 + " }}", {}),
    ("parens_100", "{{ " + "(" * 100 + "1" + ")" * 100 + " }}", {}),
    ("lists_100", "{{ " + "[" * 100 + "]" * 100 + " }}", {}),
    ("if_nest_20", "{% if 1 %}" * 20 + "x" + "{% endif %}" * 20, {}),
    ("if_nest_120", "{% if 1 %}" * 120 + "x" + "{% endif %}" * 120, {}),
    ("for_nest_20", "{% for a in [1] %}" * 20 + "x" + "{% endfor %}" * 20, {}),
    ("for_nest_21", "{% for a in [1] %}" * 21 + "x" + "{% endfor %}" * 21, {}),
    ("for_nest_macro", "{% for a in [1] %}" * 15 + "{% macro m() %}" + "{% for b in [1] %}" * 10 + "y" + "{% endfor %}" * 10 + "{% endmacro %}{{ m() }}" + "{% endfor %}" * 15, {}),
    # recursion at run time
    ("macro_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}),
    ("macro_recursion_ok", "{% macro f(n) %}{% if n < 30 %}({{ f(n + 1) }}){% endif %}{% endmacro %}{{ f(0) }}", {}),
]


def result(fn):  # noqa: E302
    try:
        return {"expected": fn()}
    except Exception as e:  # the golden records the failure; our render must fail too
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def main():
    out = {"generator": "tests/gen/jinja_hardening_goldens.py", "transformers": transformers.__version__,
           "jinja2": jinja2.__version__, "units": []}
    for name, src, ctx, *ours in UNITS:
        u = {"name": name, "template": src, "context": ctx}
        u.update(result(lambda: ctu._compile_jinja_template(src).render(**ctx)))
        if ours:  # a documented difference: our engine fails with this message
            u["ours_error"] = ours[0]
        out["units"].append(u)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ne = sum(1 for u in out["units"] if "error" in u)
    print(f"{OUT}: {len(out['units'])} units ({ne} errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
