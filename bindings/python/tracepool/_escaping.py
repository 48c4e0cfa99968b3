"""How a string from a report, or a file name, is shown on a terminal, for what the package prints itself
(`merge` and `diff` text, the command line's error lines): the library's own rule, Note [Printable text] in
core/base/printable.h, one function for every renderer.

A shared report is someone else's text: a name holding ESC sequences could set the terminal's title or clear
the screen, a carriage return or a newline could fake lines, and a bidirectional control could make a line
read in another order. So each C0 control (newline and tab too: inside a name they are never layout), DEL
and each C1 control is shown as \\xNN; the line and paragraph separators and the bidirectional marks,
embeddings, overrides and isolates as \\uNNNN; and a byte that is not UTF-8 (a lone surrogate that
surrogateescape made of it, in a file name) as \\xNN of that byte. Nothing else changes.
"""

from . import _tracepool


def escape(text):
    """`text` with every character the rule names shown escaped; anything else as it is."""
    if text.isprintable() and text.isascii():
        return text  # the common case, with nothing to escape, without a call into the library
    return _tracepool.printable(text.encode("utf-8", "surrogateescape"))
