// wording.h: how every way out of a report names things, so that the text, merge, diff and the HTML
// page say the same: which frames are the user's, a site's title, a frame's line, byte sizes.
//
// Note [Site titles]
// A site is named in one line by the frames a reader recognises: the user's innermost Python line
// (Python's library, installed packages and frozen modules are not the user's) and its callers, each
// after a "←", a file named once while it stays the same; then, where the memory was asked inside a
// library, that library line after "· via": "step (train.py:42) ← main (:80) · via forward
// (linear.py:125)". At most four frames, the via line counted. Without Python frames it is the
// innermost native frames. What ran the program (runpy, the frozen importer, `python -m tracepool run`
// itself, anything beyond a module's top level) is never part of it, nor the interpreter's own C frames. Two sites called from different
// lines of the user's code thus have different titles even when their innermost line is the same.
// The report's JSON carries each site's title and each Python frame's library and launcher flags, so
// that the page draws with these rules and keeps none of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/symbolizer.h"

namespace tracepool::core {

// Python code the user did not write: installed packages, the standard library, frozen modules.
bool is_library(const frame_info& f);
// Python code that ran the program rather than being it: runpy, the frozen importer, tracepool's own
// command line.
bool is_launcher(const frame_info& f);

// A frame's function, its name cut to 100 bytes; without a name its address (native) or "??".
std::string frame_function(const frame_info& f);
// A path's last component.
std::string base_name(const std::string& path);

// One frame in one line: "function (file.py:12)" (the file's base name), "function (in libx.so)" for a
// native frame without a line; a function without a name is its address (native) or "??".
std::string frame_text(const frame_info& f);

// Note [Site titles]; "(no call site recorded)" for a site without frames.
std::string site_title(const std::vector<frame_info>& frames);

// " [a > b]": a site's tags as the text names them; "" without tags.
std::string tag_list(const std::vector<std::string>& tags);

// printf into a string, for figures and words of the library's own: at most 1023 bytes, so never for a
// string from outside (a name, a label, a file), which is joined as a std::string.
std::string printf_string(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "24.00 MiB", "-1.50 GiB", "512 B": powers of 1024, two decimals.
std::string human_bytes(int64_t bytes);

}  // namespace tracepool::core
