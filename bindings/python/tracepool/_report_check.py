"""Checks a parsed report against docs/report-schema.md before anything renders it.

The renderer (_text.py) trusts the types it reads; a file with the right schema and a wrong body
(``"leaks": "x"``, ``"stats": null``, a negative byte count) is refused here with the JSON path of
its first problem, e.g. ``leaks[3].frames[0].line must be a non-negative integer or null, not "x"``.

The schema is a table: each object lists its fields, each field its kind. Only the fields the
schema documents are checked; others are let through (schema 1 may gain fields), but no value
may nest deeper than MAX_DEPTH. Values are checked for type, not against the documented
enumerations (``reason``, ``kind``), which a later version of schema 1 may extend. Integers in a
report are counts, sizes, ids, times or line numbers: never negative, and never a bool.
"""

import json

MAX_DEPTH = 64  # a report nests 5 levels; unknown fields may add some, not thousands


class Kind:
    """A leaf kind: `words` name it in an error ("a string"), `test` accepts a value."""

    def __init__(self, words, test):
        self.words = words
        self.test = test


class Object:
    """A JSON object: `fields` maps a name to its kind; the names in `required` must be there."""

    words = "an object"

    def __init__(self, fields, required=()):
        self.fields = fields
        self.required = required

    @staticmethod
    def test(value):
        return isinstance(value, dict)


class MapOf(Object):
    """An object whose keys are data (device numbers, statistic names), each value of one kind."""

    def __init__(self, value):
        super().__init__({})
        self.value = value


class ListOf:
    words = "a list"

    def __init__(self, item):
        self.item = item

    @staticmethod
    def test(value):
        return isinstance(value, list)


class OrNull:
    """`inner`, or null."""

    def __init__(self, inner):
        self.inner = inner


STRING = Kind("a string", lambda v: isinstance(v, str))
COUNT = Kind("a non-negative integer", lambda v: type(v) is int and v >= 0)  # bool is an int subclass
BOOL = Kind("true or false", lambda v: type(v) is bool)

FRAME = Object(
    {
        "kind": STRING,
        "function": STRING,
        "file": OrNull(STRING),
        "line": OrNull(COUNT),
        "module": OrNull(STRING),
        "address": STRING,
        "interpreter": BOOL,
        "borrowed": BOOL,
    },
    required=("kind", "function"),
)
FRAMES = ListOf(FRAME)
TAGS = ListOf(STRING)

SITE = Object(
    {
        "site": COUNT,
        "bytes": COUNT,
        "blocks": COUNT,
        "block_bytes": COUNT,
        "peak_bytes": COUNT,
        "total_bytes": COUNT,
        "total_blocks": COUNT,
        "tags": TAGS,
        "live_at_marks": ListOf(COUNT),
        "growing": BOOL,
        "frames": FRAMES,
    },
    required=("bytes", "blocks", "tags", "frames"),
)

RETAINED = Object(
    {
        "site": COUNT,
        "bytes": COUNT,
        "blocks": COUNT,
        "tags": TAGS,
        "frames": FRAMES,
        "born_after_mark": OrNull(STRING),
        "marks_survived": COUNT,
    },
    required=("bytes", "blocks"),
)

CACHED = Object(
    {
        "site": COUNT,
        "bytes": COUNT,
        "blocks": COUNT,
        "largest_free_block": COUNT,
        "inactive_split_bytes": COUNT,
        "tags": TAGS,
        "frames": FRAMES,
    },
    required=("bytes", "blocks", "frames"),
)

CFI_LAST_SLOW = Object({"reason": COUNT, "function": STRING, "module": OrNull(STRING), "address": STRING})

CAPTURE = Object(
    {
        "mode": STRING,
        "unwinder": STRING,
        "depth": COUNT,
        "python_depth": COUNT,
        "sample_bytes": COUNT,
        "estimated": BOOL,
        "sites": COUNT,
        "sites_dropped": COUNT,
        "cfi_slow_stacks": COUNT,
        "cfi_last_slow": OrNull(CFI_LAST_SLOW),
    }
)

REPORT = Object(
    {
        "schema": STRING,
        "reason": STRING,
        "time_ns": COUNT,
        "backend": STRING,
        "capture": CAPTURE,
        "stats": MapOf(MapOf(COUNT)),
        "devices": ListOf(Object({"device": COUNT, "cached_bytes": COUNT, "largest_free_block": COUNT},
                                 required=("device",))),
        "leaks": ListOf(SITE),
        "retained": ListOf(RETAINED),
        "cached": ListOf(CACHED),
        "marks": ListOf(Object({"label": STRING, "time_ns": COUNT, "live_bytes": COUNT})),
        "oom": Object({"device": COUNT, "requested_bytes": COUNT, "message": STRING}),
    },
    required=("schema", "stats", "leaks", "cached", "marks"),  # ARCHITECTURE.md's minimum contract
)


def describe(value):
    """A value as an error message shows it: JSON for scalars (cut short), a word for the others."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:36] + ("...\"" if isinstance(value, str) else "...")


def _field(path, name):
    return "%s.%s" % (path, name) if path else name


def _check(value, spec, path):
    """The first problem of `value` against `spec` as a message, or None. Recursion follows the
    schema, so it is at most a few levels deep."""
    or_null = ""
    if isinstance(spec, OrNull):
        if value is None:
            return None
        spec, or_null = spec.inner, " or null"
    if not spec.test(value):
        return "%s must be %s%s, not %s" % (path, spec.words, or_null, describe(value))
    if isinstance(spec, ListOf):
        items = (_check(item, spec.item, "%s[%d]" % (path, i)) for i, item in enumerate(value))
    elif isinstance(spec, MapOf):
        items = (_check(item, spec.value, "%s[%s]" % (path, json.dumps(key))) for key, item in value.items())
    elif isinstance(spec, Object):
        missing = [name for name in spec.required if name not in value]
        if missing:
            return '%s has no "%s" field' % (path or "the report", missing[0])
        items = (_check(value[name], kind, _field(path, name)) for name, kind in spec.fields.items() if name in value)
    else:
        return None
    return next((p for p in items if p is not None), None)


def _too_deep(doc):
    """The path of the first value nested deeper than MAX_DEPTH, or None. Iterative: a deep
    document must not exhaust the stack here either."""
    stack = [(doc, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return path
        if isinstance(value, dict):
            stack.extend((v, _field(path, k), depth + 1) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, "%s[%d]" % (path, i), depth + 1) for i, v in reversed(list(enumerate(value))))
    return None


def problem(report):
    """The first way `report` (parsed JSON whose schema is tracepool.report/1) breaks the schema, as
    a message naming its JSON path, or None."""
    deep = _too_deep(report)
    if deep is not None:
        return "%s is nested more than %d levels deep" % (deep, MAX_DEPTH)
    return _check(report, REPORT, "")
