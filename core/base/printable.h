// printable.h: text from outside (a saved report, a symbol table, a label) made safe to print.
//
// Note [Printable text]
// A report names functions, files, modules, tags, marks, hosts and pools that tracepool did not
// choose: a symbol table, a Python file name, a label a program passed, or a saved report a user was
// sent. Printed raw, such a name drives the terminal that shows it: ESC and the C1 controls start
// escape sequences (set the window title, clear the screen, move the cursor, hyperlinks), CR and NL
// overwrite or fake lines, and the bidirectional controls reorder what is shown (the "Trojan Source"
// trick), so a report could say what it does not hold. Every renderer of text shows such a name
// through this one function (the text report and the OOM message; the HTML page's title; Python's
// merge and diff keep the same rule), which is:
//   - each code point below 0x20 (tab and newline included: inside a name they are not layout), 0x7f,
//     and the C1 controls U+0080..U+009F: \xNN, the code point in two lowercase hex digits;
//   - U+2028 and U+2029 (line and paragraph separators), the bidi embeddings and overrides
//     U+202A..U+202E, the isolates U+2066..U+2069 and the marks U+200E, U+200F: \uNNNN, four
//     lowercase hex digits;
//   - each byte that is not part of well-formed UTF-8 (utf8.h): \xNN, the byte;
//   - everything else as it is, a backslash included, so that ordinary names (C++ operators, Windows
//     paths, any script) read unchanged.
// What is shown can therefore be ambiguous (a name holding the four characters \x1b reads like one
// holding ESC, and an invalid byte 0x85 like U+0085): the rendering is for reading, and the JSON
// report keeps every name exactly.
#pragma once

#include <string>
#include <string_view>

namespace tracepool::core {

// `text` by the rule of Note [Printable text]: no byte of the result is a control character, and the
// result is well-formed UTF-8.
std::string printable(std::string_view text);

}  // namespace tracepool::core
