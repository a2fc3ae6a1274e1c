//! The pre-tokenizers: the text between special tokens split into the
//! pieces BPE runs on, with the GPT-2 regex's character classes matched by
//! hand (see the module documentation of `bpe`).

/// Code point ranges (inclusive) that std calls alphabetic and not numeric
/// but HF's `\p{L}` rejects: Other_Alphabetic marks and symbols, and letters
/// newer than Unicode 14. Sorted. A range may also cover characters std
/// does not call alphabetic (their answer is "no" either way), which let
/// neighbouring ranges merge.
#[rustfmt::skip]
static NOT_LETTER: [(u32, u32); 181] = [
    (0x0345, 0x036F), (0x05B0, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670), (0x06D6, 0x06E4),
    (0x06E7, 0x06ED), (0x0711, 0x0711), (0x0730, 0x073F), (0x07A6, 0x07B0), (0x0816, 0x0817), (0x081B, 0x0823),
    (0x0825, 0x0827), (0x0829, 0x082C), (0x088F, 0x0897), (0x08D4, 0x0903), (0x093A, 0x093B), (0x093E, 0x094F),
    (0x0955, 0x0957), (0x0962, 0x0963), (0x0981, 0x0983), (0x09BE, 0x09CC), (0x09D7, 0x09D7), (0x09E2, 0x09E3),
    (0x0A01, 0x0A03), (0x0A3E, 0x0A51), (0x0A70, 0x0A71), (0x0A75, 0x0A83), (0x0ABE, 0x0ACC), (0x0AE2, 0x0AE3),
    (0x0AFA, 0x0B03), (0x0B3E, 0x0B57), (0x0B62, 0x0B63), (0x0B82, 0x0B82), (0x0BBE, 0x0BCC), (0x0BD7, 0x0C04),
    (0x0C3E, 0x0C56), (0x0C5C, 0x0C5C), (0x0C62, 0x0C63), (0x0C81, 0x0C83), (0x0CBE, 0x0CDC), (0x0CE2, 0x0CE3),
    (0x0CF3, 0x0D03), (0x0D3E, 0x0D4C), (0x0D57, 0x0D57), (0x0D62, 0x0D63), (0x0D81, 0x0D83), (0x0DCF, 0x0DF3),
    (0x0E31, 0x0E31), (0x0E34, 0x0E3A), (0x0E4D, 0x0E4D), (0x0EB1, 0x0EB1), (0x0EB4, 0x0EBC), (0x0ECD, 0x0ECD),
    (0x0F71, 0x0F83), (0x0F8D, 0x0FBC), (0x102B, 0x103E), (0x1056, 0x1059), (0x105E, 0x1060), (0x1062, 0x1064),
    (0x1067, 0x106D), (0x1071, 0x1074), (0x1082, 0x108D), (0x108F, 0x109D), (0x1712, 0x1713), (0x1732, 0x1733),
    (0x1752, 0x1753), (0x1772, 0x1773), (0x17B6, 0x17C8), (0x1885, 0x1886), (0x18A9, 0x18A9), (0x1920, 0x1938),
    (0x1A17, 0x1A1B), (0x1A55, 0x1A74), (0x1ABF, 0x1B04), (0x1B35, 0x1B43), (0x1B80, 0x1B82), (0x1BA1, 0x1BAD),
    (0x1BE7, 0x1BF1), (0x1C24, 0x1C36), (0x1DD3, 0x1DF4), (0x24B6, 0x24E9), (0x2DE0, 0x2DFF), (0xA674, 0xA67B),
    (0xA69E, 0xA69F), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7F1, 0xA7F1), (0xA802, 0xA802),
    (0xA80B, 0xA80B), (0xA823, 0xA827), (0xA880, 0xA881), (0xA8B4, 0xA8C5), (0xA8FF, 0xA8FF), (0xA926, 0xA92A),
    (0xA947, 0xA952), (0xA980, 0xA983), (0xA9B4, 0xA9BF), (0xA9E5, 0xA9E5), (0xAA29, 0xAA36), (0xAA43, 0xAA43),
    (0xAA4C, 0xAA4D), (0xAA7B, 0xAA7D), (0xAAB0, 0xAAB0), (0xAAB2, 0xAAB4), (0xAAB7, 0xAAB8), (0xAABE, 0xAABE),
    (0xAAEB, 0xAAEF), (0xAAF5, 0xAAF5), (0xABE3, 0xABEA), (0xFB1E, 0xFB1E), (0x10376, 0x1037A), (0x10940, 0x10959),
    (0x10A01, 0x10A0F), (0x10D24, 0x10D27), (0x10D69, 0x10D69), (0x10EAB, 0x10EAC), (0x10EC5, 0x10EFC),
    (0x11000, 0x11002), (0x11038, 0x11045), (0x11073, 0x11074), (0x11080, 0x11082), (0x110B0, 0x110C2),
    (0x11100, 0x11102), (0x11127, 0x11132), (0x11145, 0x11146), (0x11180, 0x11182), (0x111B3, 0x111BF),
    (0x111CE, 0x111CF), (0x1122C, 0x1123E), (0x11241, 0x11241), (0x112DF, 0x11303), (0x1133E, 0x1134C),
    (0x11357, 0x11357), (0x11362, 0x11363), (0x113B8, 0x113CD), (0x11435, 0x11445), (0x114B0, 0x114C1),
    (0x115AF, 0x115BE), (0x115DC, 0x115DD), (0x11630, 0x11640), (0x116AB, 0x116B5), (0x1171D, 0x1172A),
    (0x1182C, 0x11838), (0x11930, 0x1193C), (0x11940, 0x11940), (0x11942, 0x11942), (0x119D1, 0x119DF),
    (0x119E4, 0x119E4), (0x11A01, 0x11A0A), (0x11A35, 0x11A39), (0x11A3B, 0x11A3E), (0x11A51, 0x11A5B),
    (0x11A8A, 0x11A97), (0x11B60, 0x11B67), (0x11C2F, 0x11C3E), (0x11C92, 0x11CB6), (0x11D31, 0x11D43),
    (0x11D47, 0x11D47), (0x11D8A, 0x11D96), (0x11DB0, 0x11DDB), (0x11EF3, 0x11F01), (0x11F03, 0x11F03),
    (0x11F34, 0x11F40), (0x1611E, 0x1612E), (0x16EA0, 0x16ED3), (0x16F4F, 0x16F4F), (0x16F51, 0x16F92),
    (0x16FF0, 0x16FF3), (0x187F8, 0x187FF), (0x18D09, 0x18DF2), (0x1BC9E, 0x1BC9E), (0x1E000, 0x1E02A),
    (0x1E08F, 0x1E08F), (0x1E6C0, 0x1E6FF), (0x1E947, 0x1E947), (0x1F130, 0x1F189), (0x2B73A, 0x2B73F),
    (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
];

/// Numerics std knows (Unicode 17) that HF's regex `\p{N}` does not.
static NOT_NUMBER: [(u32, u32); 2] = [(0x11DE0, 0x11DE9), (0x16FF4, 0x16FF6)];

fn in_ranges(table: &[(u32, u32)], c: char) -> bool {
    let cp = c as u32;
    // The first range ending at or after cp, if it also starts at or before it.
    let i = table.partition_point(|&(_, hi)| hi < cp);
    table.get(i).is_some_and(|&(lo, _)| lo <= cp)
}

/// The GPT-2 regex's `\p{L}`, as HF `tokenizers` matches it.
pub fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    c.is_alphabetic() && !c.is_numeric() && !in_ranges(&NOT_LETTER, c)
}

/// The GPT-2 regex's `\p{N}`, as HF `tokenizers` matches it.
pub fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    c.is_numeric() && !in_ranges(&NOT_NUMBER, c)
}

/// The regex's `\s`.
pub fn is_space(c: char) -> bool {
    c.is_whitespace()
}

// ---------------------------------------------------------------------------
// Pre-tokenizers.

/// The pre-tokenizers a `.tok` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `gpt2` / `default`: the GPT-2 regex alone.
    Gpt2,
    /// `smollm`: every `\p{N}` character alone (HF `Digits(individual_digits)`,
    /// which tests Rust's `char::is_numeric`), then the GPT-2 regex on the rest.
    SmolLm,
}

impl PreTokenizer {
    pub fn from_name(name: &str) -> Option<PreTokenizer> {
        match name {
            "gpt2" | "default" => Some(PreTokenizer::Gpt2),
            "smollm" => Some(PreTokenizer::SmolLm),
            _ => None,
        }
    }

    /// Splits `text` into the pieces BPE runs on, appending them to `out`.
    /// Their concatenation is `text`.
    pub fn split<'a>(self, text: &'a str, out: &mut Vec<&'a str>) {
        match self {
            PreTokenizer::Gpt2 => gpt2_split(text, out),
            PreTokenizer::SmolLm => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        gpt2_split(&text[start..i], out);
                        let end = i + c.len_utf8();
                        out.push(&text[i..end]);
                        start = end;
                    }
                }
                gpt2_split(&text[start..], out);
            }
        }
    }

    /// The pieces of `text`, as a vector.
    pub fn pieces(self, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        self.split(text, &mut out);
        out
    }
}

/// The four classes the regex tells apart; every character is in exactly one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Space,
    Letter,
    Number,
    Other,
}

fn class(c: char) -> Class {
    if is_space(c) {
        Class::Space
    } else if is_letter(c) {
        Class::Letter
    } else if is_number(c) {
        Class::Number
    } else {
        Class::Other
    }
}

/// Splits with `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
/// Every character starts a match of some alternative, so the matches tile
/// the text and a left-to-right scan finds them.
fn gpt2_split<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let mut at = 0;
    while at < text.len() {
        let end = at + gpt2_match(&text[at..]);
        out.push(&text[at..end]);
        at = end;
    }
}

/// The length in bytes of the regex's match at the start of `s` (non-empty).
fn gpt2_match(s: &str) -> usize {
    let mut chars = s.chars();
    let Some(c) = chars.next() else { return 0 };
    if c == '\'' {
        let rest = &s[1..];
        for suffix in ["s", "t", "re", "ve", "m", "ll", "d"] {
            if rest.starts_with(suffix) {
                return 1 + suffix.len();
            }
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a
    // run of one class. With the space taken, the run's class is that of
    // the character after it; without, c's own (a space is neither).
    let (run_start, run_class) = match (c, chars.next().map(class)) {
        (' ', Some(next)) if next != Class::Space => (1, next),
        _ => (0, class(c)),
    };
    if run_class != Class::Space {
        return run_start + run_length(&s[run_start..], run_class);
    }
    // `\s+(?!\S)` then `\s+`. The longest run of whitespace, unless a
    // non-space follows it: then back off one character so the lookahead
    // sees whitespace, which needs a run of two or more; a single
    // character is matched by `\s+`.
    let run = run_length(s, Class::Space);
    if run == s.len() {
        return run;
    }
    let last = s[..run].chars().next_back().map_or(0, char::len_utf8);
    if run > last {
        run - last
    } else {
        run
    }
}

/// Bytes of the run of `class` characters at the start of `s`.
fn run_length(s: &str, k: Class) -> usize {
    s.char_indices()
        .find(|&(_, c)| class(c) != k)
        .map_or(s.len(), |(i, _)| i)
}
