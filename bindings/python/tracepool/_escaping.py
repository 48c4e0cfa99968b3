"""How a string from a report, or a file name, is shown on a terminal: the rule of the library's text report,
in Python, for what the package prints itself (`merge` and `diff` text, the command line's error lines).

A shared report is someone else's text: a name holding ESC sequences could set the terminal's title or clear
the screen, a carriage return or a newline could fake lines, and a bidirectional control could make a line
read in another order. So each C0 control (newline and tab too: inside a name they are never layout), DEL
and each C1 control is shown as \\xNN; the line and paragraph separators and the bidirectional marks,
embeddings, overrides and isolates as \\uNNNN; and a lone surrogate that surrogateescape made of a byte that
is not UTF-8 (a file name's) as \\xNN of that byte. Nothing else changes: a backslash stays as it is.
"""

_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_FORMATTING = [0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_UNDECODED = range(0xDC80, 0xDD00)  # os.fsdecode's surrogateescape: byte B is U+DC00 + B

_SHOWN = {
    **{c: "\\x%02x" % c for c in _CONTROLS},
    **{c: "\\u%04x" % c for c in _FORMATTING},
    **{c: "\\x%02x" % (c - 0xDC00) for c in _UNDECODED},
}


def escape(text):
    """`text` with every character the rule names shown escaped; anything else as it is."""
    return text.translate(_SHOWN)
