// Names from outside, made printable (Note [Printable text] in core/base/printable.h): control
// characters, layout and bidi controls and bytes that are not UTF-8 are shown escaped; nothing else
// changes.
#include "base/printable.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>

namespace {

namespace core = tracepool::core;

// The rule itself, one class of character at a time.
TEST(Printable, EachControlCharacterIsShownAsItsCodeInHex) {
  EXPECT_EQ(core::printable(std::string("\0\x01\t\n\r\x1b\x1f\x7f", 8)), "\\x00\\x01\\x09\\x0a\\x0d\\x1b\\x1f\\x7f");
  EXPECT_EQ(core::printable("\xc2\x80 \xc2\x85 \xc2\x9b \xc2\x9f"), "\\x80 \\x85 \\x9b \\x9f");  // C1: U+0080..U+009F
  EXPECT_EQ(core::printable("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"),
            "\\x1b]8;;http://x\\x1b\\link\\x1b]8;;\\x1b\\");
}

TEST(Printable, LayoutAndBidiControlsAreShownAsTheirCodePoint) {
  const char* controls[] = {"\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c",
                            "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"};
  const char* shown[] = {"\\u200e", "\\u200f", "\\u2028", "\\u2029", "\\u202a", "\\u202b", "\\u202c",
                         "\\u202d", "\\u202e", "\\u2066", "\\u2067", "\\u2068", "\\u2069"};
  for (size_t i = 0; i < std::size(controls); ++i)
    EXPECT_EQ(core::printable(std::string("a") + controls[i] + "b"), std::string("a") + shown[i] + "b") << shown[i];
  // Their neighbours are ordinary: zero-width space and joiner, the narrow no-break space, word joiner.
  for (const char* ordinary : {"\u200b", "\u200d", "\u202f", "\u2060", "\u2065", "\u206a", "\u00a0", "\u00a1"})
    EXPECT_EQ(core::printable(ordinary), ordinary);
}

TEST(Printable, EachByteOutsideUtf8IsShownAsTheByteInHex) {
  EXPECT_EQ(core::printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(core::printable("a\xc3"), "a\\xc3");                           // cut short at the end
  EXPECT_EQ(core::printable("\xe2\x80("), "\\xe2\\x80(");                  // cut short before an ASCII byte
  EXPECT_EQ(core::printable("\xc0\xaf"), "\\xc0\\xaf");                    // an overlong '/'
  EXPECT_EQ(core::printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(core::printable("\x85"), "\\x85");                             // a lone continuation byte
  EXPECT_EQ(core::printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
}

TEST(Printable, EverythingElseIsLeftAsItIs) {
  for (const char* ordinary :
       {"", "plain ascii ~!@#$%^&*()_+{}|:<>?", "back\\slash \\x1b \\n \\u202e",
        "ünïcödé 中文 日本語 العربية עברית 🙂 e\xcc\x81", "operator<<(std::ostream&, T const&)",
        "C:\\Users\\me\\train.py", "\u00a0\u00ff\u0100\U0010ffff"})
    EXPECT_EQ(core::printable(ordinary), ordinary);
}

}  // namespace
